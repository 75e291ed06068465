"""The ResourceClaim spec (what to allocate), shared by ResourceClaim and
ResourceClaimTemplate.

Defaulting as upstream does it happens when a model is built: an absent or empty
``allocationMode`` becomes ``ExactCount``, and under ``ExactCount`` an absent or zero
``count`` becomes 1, for ``exactly`` and for each ``firstAvailable`` subrequest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Self

from pydantic import model_validator

from draco.api.common import DeviceClaimConfiguration, DeviceSelector, DeviceToleration
from draco.api.constants import ALLOCATION_MODE_EXACT_COUNT
from draco.api.meta import ApiModel
from draco.api.quantity import Quantity

__all__ = [
    "CapacityRequirements",
    "DeviceClaim",
    "DeviceConstraint",
    "DeviceRequest",
    "DeviceSubRequest",
    "ExactDeviceRequest",
    "ResourceClaimSpec",
]


class CapacityRequirements(ApiModel):
    """Capacity a request consumes from multi-allocatable devices (DRAConsumableCapacity)."""

    requests: dict[str, Quantity] | None = None
    """The amount of each capacity (by qualified name) to consume from the device; a capacity left out
    gets the device's request policy default, or all of it when there is no policy."""


class _CountedRequest(ApiModel):
    """The fields ``exactly`` and a ``firstAvailable`` entry share."""

    device_class_name: str
    """The DeviceClass the devices must belong to; its selectors and config apply. Required."""
    selectors: list[DeviceSelector] | None = None
    """Additional selectors a device must all satisfy, on top of the class's; at most 32."""
    allocation_mode: str | None = None
    """``ExactCount`` (the default) allocates ``count`` devices; ``All`` allocates every matching device in
    the pool(s), and fails if any of them is unavailable."""
    count: int | None = None
    """How many devices to allocate with ``ExactCount``; defaults to 1. Must be unset with ``All``."""
    tolerations: list[DeviceToleration] | None = None
    """Device taints this request tolerates; at most 16."""
    capacity: CapacityRequirements | None = None
    """How much of each consumable capacity to take from a device that allows multiple allocations."""

    @model_validator(mode="after")
    def _default_mode_and_count(self) -> Self:
        if not self.allocation_mode:
            self.allocation_mode = ALLOCATION_MODE_EXACT_COUNT
        if self.allocation_mode == ALLOCATION_MODE_EXACT_COUNT and not self.count:
            self.count = 1
        return self


class ExactDeviceRequest(_CountedRequest):
    """A request for devices of one class."""

    admin_access: bool | None = None
    """Requests administrative access: the devices are allocated even if already in use, for monitoring
    or maintenance. Only in namespaces labelled for admin access."""


class DeviceSubRequest(_CountedRequest):
    """One alternative of ``firstAvailable``; referenced as ``<request>/<name>``."""

    name: str
    """The subrequest's name (a DNS label), unique within its request."""


class DeviceRequest(ApiModel):
    """A named request; exactly one of ``exactly`` and ``firstAvailable`` is set."""

    name: str
    """The request's name (a DNS label), unique within the claim; containers and constraints refer to it."""
    exactly: ExactDeviceRequest | None = None
    """Devices of one class, allocated exactly as described."""
    first_available: list[DeviceSubRequest] | None = None
    """Alternatives in order of preference (1 to 8); the first that can be satisfied is allocated."""


class DeviceConstraint(ApiModel):
    """A constraint over the devices of some requests (all when ``requests`` is empty)."""

    requests: list[str] | None = None
    """The requests (``<request>`` or ``<request>/<subrequest>``) the constraint covers; empty means all.
    At most 32."""
    match_attribute: str | None = None
    """A fully qualified attribute name that every covered device must have, with the same value."""
    distinct_attribute: str | None = None
    """A fully qualified attribute name whose value must differ between all covered devices."""


class DeviceClaim(ApiModel):
    """The devices a claim asks for: requests, constraints between them, and their configuration."""

    requests: list[DeviceRequest] | None = None
    """The device requests, all of which must be satisfied; at most 32. Empty means nothing to allocate."""
    constraints: list[DeviceConstraint] | None = None
    """Constraints that the allocated devices must satisfy together; at most 32."""
    config: list[DeviceClaimConfiguration] | None = None
    """Configuration for the devices of some or all requests; at most 32."""


class ResourceClaimSpec(ApiModel):
    """What a claim asks for; immutable once created."""

    devices: DeviceClaim | None = None
    """The devices to allocate."""

    def iter_requests(self) -> Iterator[DeviceRequest]:
        """The claim's requests in order (none when the spec has no devices)."""
        if self.devices is not None and self.devices.requests:
            yield from self.devices.requests
