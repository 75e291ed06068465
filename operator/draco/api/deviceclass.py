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
    selectors: list[DeviceSelector] | None = None
    config: list[DeviceClassConfiguration] | None = None
    extended_resource_name: str | None = None


class DeviceClassStatus(ApiModel):
    """draco's addition; the operator fills it."""

    selected_devices: int | None = None
    allocated_devices: int | None = None
    conditions: list[Condition] | None = None


class DeviceClass(TypedObject):
    KIND: ClassVar[str] = KIND_DEVICE_CLASS
    NAMESPACED: ClassVar[bool] = False

    spec: DeviceClassSpec
    status: DeviceClassStatus | None = None
