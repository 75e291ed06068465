"""DeviceClass: a cluster-scoped, admin-defined set of devices (selectors plus config).

Same shape as upstream ``resource.k8s.io/v1``. draco adds a status the operator keeps
current (how many published devices the class selects, how many of those are allocated,
and a ``Valid`` condition), because "does my class select anything?" is the first
question a user asks and upstream has no answer in the API.
"""

from __future__ import annotations

from typing import ClassVar

from draco.api.common import DeviceClassConfiguration, DeviceSelector
from draco.api.constants import KIND_DEVICE_CLASS
from draco.api.meta import ApiModel, Condition, TypedObject

__all__ = ["DeviceClass", "DeviceClassSpec", "DeviceClassStatus"]


class DeviceClassSpec(ApiModel):
    """Which devices the class covers and how they are configured."""

    selectors: list[DeviceSelector] | None = None
    """Selectors a device must all satisfy to belong to the class; at most 32."""
    config: list[DeviceClassConfiguration] | None = None
    """Configuration applied to every device allocated through the class, before the claim's own;
    at most 32."""
    extended_resource_name: str | None = None
    """An extended resource name (such as ``example.com/gpu``) under which pods can ask for the class's
    devices in their container resources."""


class DeviceClassStatus(ApiModel):
    """draco's addition (upstream DeviceClasses have no status); the operator fills it."""

    selected_devices: int | None = None
    """draco: how many published devices the class's selectors select."""
    allocated_devices: int | None = None
    """draco: how many of the selected devices are allocated to a claim."""
    conditions: list[Condition] | None = None
    """draco: ``Valid`` is False when a selector does not compile, the spec is invalid, or a selector fails
    on a published device (reasons InvalidSelector, InvalidSpec, SelectorRuntimeError)."""


class DeviceClass(TypedObject):
    """A class of devices that claims request by name: selectors plus configuration, defined by an
    administrator. draco's copy of ``resource.k8s.io/v1`` DeviceClass (cluster-scoped)."""

    KIND: ClassVar[str] = KIND_DEVICE_CLASS
    NAMESPACED: ClassVar[bool] = False

    spec: DeviceClassSpec
    """The class's selectors and configuration; changes do not affect existing allocations."""
    status: DeviceClassStatus | None = None
    """draco: device counts and validity, kept current by the operator."""
