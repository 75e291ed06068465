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


class _CountedRequest(ApiModel):
    device_class_name: str
    selectors: list[DeviceSelector] | None = None
    allocation_mode: str | None = None
    count: int | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None

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


class DeviceSubRequest(_CountedRequest):
    """One alternative of ``firstAvailable``; referenced as ``<request>/<name>``."""

    name: str


class DeviceRequest(ApiModel):
    """A named request; exactly one of ``exactly`` and ``first_available`` is set."""

    name: str
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = None


class DeviceConstraint(ApiModel):
    """A constraint over the devices of some requests (all when ``requests`` is empty)."""

    requests: list[str] | None = None
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaim(ApiModel):
    requests: list[DeviceRequest] | None = None
    constraints: list[DeviceConstraint] | None = None
    config: list[DeviceClaimConfiguration] | None = None


class ResourceClaimSpec(ApiModel):
    devices: DeviceClaim | None = None

    def iter_requests(self) -> Iterator[DeviceRequest]:
        """The claim's requests in order (none when the spec has no devices)."""
        if self.devices is not None and self.devices.requests:
            yield from self.devices.requests
