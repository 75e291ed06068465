"""Device-level types several kinds share: selectors, tolerations, taints, opaque config.

DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice and DeviceTaintRule all
use these, in the ``resource.k8s.io/v1`` shape. Defaulting that upstream applies on write
(toleration ``operator`` -> ``Equal``) happens when a model is built.
"""

from __future__ import annotations

from typing import Self

from pydantic import model_validator

from draco.api.constants import (
    TAINT_EFFECT_NO_EXECUTE,
    TAINT_EFFECT_NO_SCHEDULE,
    TOLERATION_OP_EQUAL,
)
from draco.api.meta import ApiModel, JSONValue, Time
from draco.api.tolerations import matches as toleration_matches

__all__ = [
    "CELDeviceSelector",
    "DeviceClaimConfiguration",
    "DeviceClassConfiguration",
    "DeviceConfiguration",
    "DeviceSelector",
    "DeviceTaint",
    "DeviceToleration",
    "OpaqueDeviceConfiguration",
]


class CELDeviceSelector(ApiModel):
    """A CEL expression over ``device`` that must evaluate to true for the device to match."""

    expression: str
    """A CEL expression that receives ``device`` (driver, attributes, capacity, allowMultipleAllocations) and
    returns a bool; at most 10 KiB, with a bounded evaluation cost."""


class DeviceSelector(ApiModel):
    """One selector; exactly one field (today only ``cel``) must be set."""

    cel: CELDeviceSelector | None = None
    """Selects devices with a CEL expression."""


class DeviceTaint(ApiModel):
    """A taint on a device (in a ResourceSlice, or applied by a DeviceTaintRule).

    Consumers treat an unknown effect like ``None``: stored values ratchet upstream.
    """

    key: str
    """The taint key (a label name); required."""
    value: str | None = None
    """The taint value (a label value)."""
    effect: str
    """What the taint does to claims that do not tolerate it: None (nothing), NoSchedule (no new allocations)
    or NoExecute (also evicts pods using the device). Unknown effects are treated like None."""
    time_added: Time | None = None
    """When the taint was added."""

    @property
    def is_blocking(self) -> bool:
        """True for effects that keep new allocations away (NoSchedule, NoExecute)."""
        return self.effect in (TAINT_EFFECT_NO_SCHEDULE, TAINT_EFFECT_NO_EXECUTE)


class DeviceToleration(ApiModel):
    """A toleration of device taints; ``operator`` defaults to ``Equal`` as upstream."""

    key: str | None = None
    """The taint key this toleration applies to; empty matches every key (requires ``Exists``)."""
    operator: str | None = None
    """``Exists`` (any value) or ``Equal`` (the value must match); defaults to ``Equal``."""
    value: str | None = None
    """The taint value to match with ``Equal``; empty with ``Exists``."""
    effect: str | None = None
    """The taint effect to match (None, NoSchedule or NoExecute); empty matches every effect."""
    toleration_seconds: int | None = None
    """For NoExecute only: how long a pod may keep using the device after the taint appears. Unset
    tolerates forever; zero or less evicts at once."""

    @model_validator(mode="after")
    def _default_operator(self) -> Self:
        if not self.operator:
            self.operator = TOLERATION_OP_EQUAL
        return self

    def tolerates(self, taint: DeviceTaint) -> bool:
        """Whether this toleration matches ``taint`` (key, effect, then value unless Exists).

        An empty key with ``Exists`` matches every key; an empty effect matches every
        effect. ``tolerationSeconds`` is not considered here (it only bounds NoExecute).
        """
        return toleration_matches(
            key=self.key or "",
            operator=self.operator or "",
            value=self.value or "",
            effect=self.effect or "",
            taint_key=taint.key,
            taint_value=taint.value or "",
            taint_effect=taint.effect,
        )


class OpaqueDeviceConfiguration(ApiModel):
    """Driver-specific parameters, passed through untouched.

    ``parameters`` is any JSON value as stored; validation insists it is an object.
    """

    driver: str
    """The driver these parameters are for (a DNS subdomain of at most 63 characters); other drivers
    ignore the entry."""
    parameters: JSONValue = None
    """Driver-specific configuration as a JSON object of at most 10 KiB, passed to the driver when it
    prepares the device."""


class DeviceConfiguration(ApiModel):
    """One configuration entry; exactly one field (today only ``opaque``) must be set."""

    opaque: OpaqueDeviceConfiguration | None = None
    """Driver-specific parameters in a format the driver defines."""


class DeviceClassConfiguration(DeviceConfiguration):
    """Configuration a DeviceClass applies to every device allocated through it."""


class DeviceClaimConfiguration(DeviceConfiguration):
    """Claim configuration for some requests (all when ``requests`` is absent or empty)."""

    requests: list[str] | None = None
    """Names of the requests (``<request>`` or ``<request>/<subrequest>``) this configuration applies to;
    empty means all of them. At most 32."""
