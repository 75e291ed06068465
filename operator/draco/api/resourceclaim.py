"""ResourceClaim: a namespaced request for devices and, in its status, the allocation.

Same shape as upstream ``resource.k8s.io/v1``. A claim is *allocated* iff
``status.allocation`` is set and *in use* iff ``status.reservedFor`` is non-empty.

draco adds two read-only summary fields to the status, ``state`` and
``allocatedDevices``, because CRD printer columns can only show stored fields (JSONPath)
while upstream's ``STATE`` column is computed. :meth:`ResourceClaim.refresh_summary`
recomputes them and whoever writes the status (the operator) calls it, so
``kubectl get resourceclaims.resource.draco.dev`` shows upstream's ``pending`` /
``allocated,reserved`` / ``deleted,...`` values. :attr:`ResourceClaim.state` always
computes the value from the object itself and is what code should use.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from draco.api.claimspec import ResourceClaimSpec
from draco.api.common import DeviceConfiguration, DeviceToleration
from draco.api.constants import KIND_RESOURCE_CLAIM, POD_RESOURCE
from draco.api.meta import ApiModel, Condition, JSONValue, NodeSelector, Time, TypedObject
from draco.api.names import natural_sorted
from draco.api.quantity import Quantity

__all__ = [
    "AllocatedDeviceStatus",
    "AllocationResult",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceRequestAllocationResult",
    "NetworkDeviceData",
    "ResourceClaim",
    "ResourceClaimConsumerReference",
    "ResourceClaimStatus",
    "claim_state",
    "summarize_claim_status",
]


class DeviceRequestAllocationResult(ApiModel):
    """One allocated device and the request (``<req>`` or ``<req>/<sub>``) it serves."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    share_id: str | None = Field(default=None, alias="shareID")
    consumed_capacity: dict[str, Quantity] | None = None
    skip_node_operations: list[str] | None = None

    @property
    def device_id(self) -> tuple[str, str, str]:
        """``(driver, pool, device)``: how a device is identified across the cluster."""
        return (self.driver, self.pool, self.device)


class DeviceAllocationConfiguration(DeviceConfiguration):
    """Configuration recorded with the allocation; ``source`` is FromClass or FromClaim."""

    source: str
    requests: list[str] | None = None


class DeviceAllocationResult(ApiModel):
    results: list[DeviceRequestAllocationResult] | None = None
    config: list[DeviceAllocationConfiguration] | None = None


class AllocationResult(ApiModel):
    """Immutable once set: it can only be set from nothing or cleared."""

    devices: DeviceAllocationResult | None = None
    node_selector: NodeSelector | None = None
    allocation_timestamp: Time | None = None


class ResourceClaimConsumerReference(ApiModel):
    """An entry of ``reservedFor``; pods have ``apiGroup`` "" (absent) and resource "pods"."""

    api_group: str | None = None
    resource: str
    name: str
    uid: str

    @property
    def is_pod(self) -> bool:
        return not self.api_group and self.resource == POD_RESOURCE


class NetworkDeviceData(ApiModel):
    interface_name: str | None = None
    ips: list[str] | None = None
    hardware_address: str | None = None


class AllocatedDeviceStatus(ApiModel):
    """Driver-written status of one allocated device."""

    driver: str
    pool: str
    device: str
    share_id: str | None = Field(default=None, alias="shareID")
    conditions: list[Condition] | None = None
    data: JSONValue = None
    network_data: NetworkDeviceData | None = None


class ResourceClaimStatus(ApiModel):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] | None = None
    devices: list[AllocatedDeviceStatus] | None = None
    #: draco: upstream's STATE column value, kept current by the status writer.
    state: str | None = None
    #: draco: the allocated devices as ``pool/device`` joined by ",", for the DEVICES column.
    allocated_devices: str | None = None


def claim_state(claim: ResourceClaim) -> str:
    """Upstream's STATE: ``deleted`` if being deleted, then ``pending`` (not allocated and
    not being deleted) or ``allocated`` plus ``reserved`` when reserved; comma-joined."""
    parts: list[str] = []
    deleting = claim.metadata.deletion_timestamp is not None
    if deleting:
        parts.append("deleted")
    if claim.is_allocated:
        parts.append("allocated")
        if claim.is_reserved:
            parts.append("reserved")
    elif not deleting:
        parts.append("pending")
    return ",".join(parts)


def summarize_claim_status(status: dict[str, Any], *, deleting: bool) -> dict[str, Any]:
    """Set ``state`` and ``allocatedDevices`` in a claim's raw JSON ``status`` (what the
    printer columns show) from its allocation and reservations; returns ``status``.

    For code that writes claim status as JSON: every such write must carry the summary,
    or ``kubectl get`` shows a stale STATE.
    """
    allocation = status.get("allocation")
    parts = ["deleted"] if deleting else []
    if allocation:
        parts.append("allocated")
        if status.get("reservedFor"):
            parts.append("reserved")
    elif not deleting:
        parts.append("pending")
    status["state"] = ",".join(parts)
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    devices = ",".join(natural_sorted(f"{r.get('pool', '')}/{r.get('device', '')}" for r in results))
    if devices:
        status["allocatedDevices"] = devices
    else:
        status.pop("allocatedDevices", None)
    return status


class ResourceClaim(TypedObject):
    KIND: ClassVar[str] = KIND_RESOURCE_CLAIM
    NAMESPACED: ClassVar[bool] = True

    spec: ResourceClaimSpec
    status: ResourceClaimStatus | None = None

    @property
    def allocation(self) -> AllocationResult | None:
        return self.status.allocation if self.status is not None else None

    @property
    def is_allocated(self) -> bool:
        return self.allocation is not None

    @property
    def reserved_for(self) -> list[ResourceClaimConsumerReference]:
        if self.status is None or not self.status.reserved_for:
            return []
        return self.status.reserved_for

    @property
    def is_reserved(self) -> bool:
        return bool(self.reserved_for)

    @property
    def results(self) -> list[DeviceRequestAllocationResult]:
        """The allocation's per-device results (empty when not allocated)."""
        allocation = self.allocation
        if allocation is None or allocation.devices is None or not allocation.devices.results:
            return []
        return allocation.devices.results

    @property
    def state(self) -> str:
        """Upstream's STATE string, computed from this object (see :func:`claim_state`)."""
        return claim_state(self)

    @property
    def allocated_devices_summary(self) -> str:
        return ",".join(natural_sorted(f"{result.pool}/{result.device}" for result in self.results))

    def refresh_summary(self) -> bool:
        """Recompute ``status.state`` and ``status.allocatedDevices``; True if they changed."""
        status = self.status if self.status is not None else ResourceClaimStatus()
        state = self.state
        devices = self.allocated_devices_summary or None
        if status.state == state and status.allocated_devices == devices and self.status is not None:
            return False
        status.state = state
        status.allocated_devices = devices
        self.status = status
        return True
