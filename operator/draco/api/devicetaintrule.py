"""DeviceTaintRule: taints devices from outside their ResourceSlice (cluster-scoped).

The ``resource.k8s.io/v1`` shape of Kubernetes 1.37. The selector's fields are exact
matches, ANDed; an empty selector matches every device and an absent one matches none
(as upstream's API documentation and its device-taint eviction controller have it).
"""

from __future__ import annotations

from typing import ClassVar

from draco.api.common import DeviceTaint
from draco.api.constants import KIND_DEVICE_TAINT_RULE
from draco.api.meta import ApiModel, Condition, TypedObject

__all__ = ["DeviceTaintRule", "DeviceTaintRuleSpec", "DeviceTaintRuleStatus", "DeviceTaintSelector"]


class DeviceTaintSelector(ApiModel):
    """Which devices a rule taints; the set fields must all match exactly, and an empty selector
    matches every device."""

    driver: str | None = None
    """Only devices of this driver."""
    pool: str | None = None
    """Only devices in this pool."""
    device: str | None = None
    """Only devices with this name."""

    def matches(self, *, driver: str, pool: str, device: str) -> bool:
        """Whether a device identified by driver/pool/device is selected."""
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )


class DeviceTaintRuleSpec(ApiModel):
    """Which devices to taint, and with what."""

    device_selector: DeviceTaintSelector | None = None
    """The devices to taint; an empty selector matches all devices and no selector matches none."""
    taint: DeviceTaint
    """The taint added to every selected device. Required."""

    def selects(self, *, driver: str, pool: str, device: str) -> bool:
        """Whether this rule taints the device; an absent selector selects nothing."""
        if self.device_selector is None:
            return False
        return self.device_selector.matches(driver=driver, pool=pool, device=device)


class DeviceTaintRuleStatus(ApiModel):
    """What the rule's NoExecute eviction is doing."""

    conditions: list[Condition] | None = None
    """Conditions keyed by type, at most 8; ``EvictionInProgress`` tells whether pods are being evicted
    because of the taint."""


class DeviceTaintRule(TypedObject):
    """Adds a taint to devices selected by driver, pool and name, without changing their
    ResourceSlices. draco's copy of ``resource.k8s.io/v1`` DeviceTaintRule (cluster-scoped)."""

    KIND: ClassVar[str] = KIND_DEVICE_TAINT_RULE
    NAMESPACED: ClassVar[bool] = False

    spec: DeviceTaintRuleSpec
    """The devices to taint and the taint to add. Required."""
    status: DeviceTaintRuleStatus | None = None
    """The state of the rule's eviction."""
