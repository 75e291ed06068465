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
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def matches(self, *, driver: str, pool: str, device: str) -> bool:
        """Whether a device identified by driver/pool/device is selected."""
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )


class DeviceTaintRuleSpec(ApiModel):
    device_selector: DeviceTaintSelector | None = None
    taint: DeviceTaint

    def selects(self, *, driver: str, pool: str, device: str) -> bool:
        """Whether this rule taints the device; an absent selector selects nothing."""
        if self.device_selector is None:
            return False
        return self.device_selector.matches(driver=driver, pool=pool, device=device)


class DeviceTaintRuleStatus(ApiModel):
    conditions: list[Condition] | None = None


class DeviceTaintRule(TypedObject):
    KIND: ClassVar[str] = KIND_DEVICE_TAINT_RULE
    NAMESPACED: ClassVar[bool] = False

    spec: DeviceTaintRuleSpec
    status: DeviceTaintRuleStatus | None = None
