"""ResourceClaim: a namespaced request for devices and, in its status, the allocation.

Same shape as upstream ``resource.k8s.io/v1``. A claim is *allocated* iff
``status.allocation`` is set and *in use* iff ``status.reservedFor`` is non-empty.

draco adds two read-only summary fields to the status, ``state`` and
``allocatedDevices``, because CRD printer columns can only show stored fields (JSONPath)
while upstream's ``STATE`` column is computed; and ``nodeName``, the node whose agent
prepares the devices, which node agents select their claims on.
:meth:`ResourceClaim.refresh_summary` recomputes them and whoever writes the status (the
operator) calls it, so
``kubectl get resourceclaims.resource.draco.dev`` shows upstream's ``pending`` /
``allocated,reserved`` / ``deleted,...`` values. :attr:`ResourceClaim.state` always
computes the value from the object itself and is what code should use.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from draco.api.bodies import ResourceClaimStatusBody
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
    "allocated_node",
    "claim_state",
    "summarize_claim_status",
]


class DeviceRequestAllocationResult(ApiModel):
    """One allocated device and the request (``<req>`` or ``<req>/<sub>``) it serves."""

    request: str
    """The request this device was allocated for: ``<request>``, or ``<request>/<subrequest>`` when a
    ``firstAvailable`` alternative was chosen."""
    driver: str
    """The driver that manages the device (also the ResourceSlice's driver)."""
    pool: str
    """The pool the device belongs to, unique per driver."""
    device: str
    """The device's name, unique within its pool."""
    admin_access: bool | None = None
    """True when the device was allocated for administrative access (set only when true)."""
    tolerations: list[DeviceToleration] | None = None
    """The request's tolerations at allocation time; taint eviction uses this copy. At most 16."""
    binding_conditions: list[str] | None = None
    """Copied from the device: conditions in ``status.devices`` that must be True before the pod binds.
    At most 4."""
    binding_failure_conditions: list[str] | None = None
    """Copied from the device: conditions that, when True, make binding fail and the pod reschedule.
    At most 4."""
    share_id: str | None = Field(default=None, alias="shareID")
    """A UUID that tells this allocation of a shareable device (``allowMultipleAllocations``) from others."""
    consumed_capacity: dict[str, Quantity] | None = None
    """For shareable devices: the amount of every capacity this allocation takes (zero amounts too)."""
    skip_node_operations: list[str] | None = None
    """Copied from the ResourceSlice: node operations (NodePrepareResources, NodeUnprepareResources, or
    ``*``) the kubelet does not call for this device."""

    @property
    def device_id(self) -> tuple[str, str, str]:
        """``(driver, pool, device)``: how a device is identified across the cluster."""
        return (self.driver, self.pool, self.device)


class DeviceAllocationConfiguration(DeviceConfiguration):
    """Configuration recorded with the allocation; ``source`` is FromClass or FromClaim."""

    source: str
    """Where the configuration comes from: ``FromClass`` or ``FromClaim``."""
    requests: list[str] | None = None
    """The requests the configuration applies to; empty means all. At most 32."""


class DeviceAllocationResult(ApiModel):
    """The allocated devices and the configuration that applies to them."""

    results: list[DeviceRequestAllocationResult] | None = None
    """One entry per allocated device; at most 32."""
    config: list[DeviceAllocationConfiguration] | None = None
    """Class and claim configuration in the order it applies (class first); at most 64."""


class AllocationResult(ApiModel):
    """Immutable once set: it can only be set from nothing or cleared."""

    devices: DeviceAllocationResult | None = None
    """The allocated devices and their configuration."""
    node_selector: NodeSelector | None = None
    """The nodes where the allocated devices are available; unset means every node."""
    allocation_timestamp: Time | None = None
    """When the allocation was made (used with binding conditions)."""


class ResourceClaimConsumerReference(ApiModel):
    """An entry of ``reservedFor``; pods have ``apiGroup`` "" (absent) and resource "pods"."""

    api_group: str | None = None
    """The consumer's API group; empty for pods."""
    resource: str
    """The consumer's resource type, e.g. ``pods``."""
    name: str
    """The consumer's name."""
    uid: str
    """The consumer's UID, which identifies this entry."""

    @property
    def is_pod(self) -> bool:
        return not self.api_group and self.resource == POD_RESOURCE


class NetworkDeviceData(ApiModel):
    """Network details of an allocated device, written by its driver."""

    interface_name: str | None = None
    """The network interface name in the pod (e.g. ``eth1``); at most 256 bytes."""
    ips: list[str] | None = None
    """The device's addresses in CIDR form, e.g. ``192.0.2.5/24``; at most 16."""
    hardware_address: str | None = None
    """The interface's hardware (MAC) address; at most 128 bytes."""


class AllocatedDeviceStatus(ApiModel):
    """Driver-written status of one allocated device."""

    driver: str
    """The driver of an allocated device."""
    pool: str
    """The pool of an allocated device."""
    device: str
    """The name of an allocated device."""
    share_id: str | None = Field(default=None, alias="shareID")
    """The allocation's shareID, for a shareable device."""
    conditions: list[Condition] | None = None
    """The device's conditions, keyed by type; at most 8."""
    data: JSONValue = None
    """Driver-specific data as a JSON object of at most 10 KiB."""
    network_data: NetworkDeviceData | None = None
    """Network details of the device."""


class ResourceClaimStatus(ApiModel):
    """Whether and how the claim is allocated, who uses it, and what drivers report."""

    allocation: AllocationResult | None = None
    """Set once the claim is allocated; it can then only be cleared, not changed."""
    reserved_for: list[ResourceClaimConsumerReference] | None = None
    """The pods (consumers) allowed to use the claim, keyed by UID; at most 256. Non-empty only while
    allocated; no entries are added once the claim is being deleted."""
    devices: list[AllocatedDeviceStatus] | None = None
    """Status that drivers report for allocated devices."""
    state: str | None = None
    """draco: upstream's STATE column (``pending``, ``allocated``, ``allocated,reserved``, ``deleted,...``),
    stored for the printer column and kept current by the operator. Read-only."""
    allocated_devices: str | None = None
    """draco: the allocated devices as ``pool/device`` joined by commas, for the DEVICES printer column.
    Read-only."""
    node_name: str | None = None
    """draco: the node whose agent prepares the devices (the node of the pod the claim was allocated
    for), set with the allocation and cleared with it; node agents select their claims on it
    (``--field-selector status.nodeName=<node>``). Read-only."""


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


def summarize_claim_status(status: ResourceClaimStatusBody, *, deleting: bool) -> ResourceClaimStatusBody:
    """Set ``state`` and ``allocatedDevices`` in a claim's raw JSON ``status`` (what the
    printer columns show) from its allocation and reservations, and keep ``nodeName`` only
    while allocated (filled in from a one-node selector when missing); returns ``status``.

    For code that writes claim status as JSON: every such write must carry the summary,
    or ``kubectl get`` shows a stale STATE.
    """
    allocation = status.get("allocation")
    if not allocation:
        status.pop("nodeName", None)
    elif not status.get("nodeName") and (node := allocated_node(status)) is not None:
        status["nodeName"] = node
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
    """A request for devices, allocated by draco's operator and prepared on the node by the driver.
    draco's copy of ``resource.k8s.io/v1`` ResourceClaim."""

    KIND: ClassVar[str] = KIND_RESOURCE_CLAIM
    NAMESPACED: ClassVar[bool] = True

    spec: ResourceClaimSpec
    """What to allocate; immutable. Required."""
    status: ResourceClaimStatus | None = None
    """The allocation and reservations, written by draco, and driver-reported device status."""

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
        """Recompute ``status.state`` and ``status.allocatedDevices`` (and drop ``nodeName``
        when not allocated); True if they changed."""
        status = self.status if self.status is not None else ResourceClaimStatus()
        state = self.state
        devices = self.allocated_devices_summary or None
        node = status.node_name if self.is_allocated else None
        if (
            status.state == state
            and status.allocated_devices == devices
            and status.node_name == node
            and self.status is not None
        ):
            return False
        status.state = state
        status.allocated_devices = devices
        status.node_name = node
        self.status = status
        return True


def allocated_node(status: ResourceClaimStatusBody) -> str | None:
    """The one node a claim's raw JSON ``status.allocation`` is bound to, when its node
    selector names exactly one node by ``metadata.name`` (what draco's allocator writes for
    node-local devices); None for unallocated claims and devices reachable from many nodes."""
    selector = (status.get("allocation") or {}).get("nodeSelector") or {}
    terms = selector.get("nodeSelectorTerms") or []
    if len(terms) != 1:
        return None
    names: set[str] | None = None
    for requirement in terms[0].get("matchFields") or []:
        if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In":
            values = set(requirement.get("values") or [])
            names = values if names is None else names & values
    return next(iter(names)) if names is not None and len(names) == 1 else None
