"""What is free in each resource pool, in the shape of upstream's pool status (KEP-5677,
``resource.k8s.io/v1alpha3`` ResourcePoolStatusRequest, Kubernetes 1.37).

Computed from an :class:`~draco.allocator.inventory.Inventory`: the allocator's own
picture of the published devices and of what allocated claims hold, so the numbers a user
reads are the numbers allocation decides by. Per pool, at its newest generation:

- ``totalDevices``: the devices the pool publishes (a name listed in two slices of the
  pool counts once);
- ``allocatedDevices``: those some claim holds (a shared device counts once however many
  shares it has; an ``adminAccess`` result holds nothing and counts nowhere);
- ``unavailableDevices``: those with a ``NoSchedule`` or ``NoExecute`` taint, from their
  slice or a DeviceTaintRule, allocated or not (1.37's rule: such a device is taken off
  twice, and ``availableDevices`` never goes below 0);
- ``availableDevices``: ``totalDevices - allocatedDevices - unavailableDevices``;
- (draco's, not in the request's status) the devices a node agent reports unhealthy (the
  ``draco.dev/unhealthy`` taint, whatever its effect), for the metrics and ``draco top``;
- ``partitionSummary``: for a partitionable pool (``sharedCounters``) whose slices name a
  ``partitionTypeAttribute`` (or, when none does, the request's
  ``defaultPartitionTypeAttribute``), per partition type (the attribute's value: a MIG
  profile), how many devices of that type the pool has and how many more still fit the
  counters left. Each type is measured on its own against the same counters, so the
  entries are alternatives, never to be summed;
- ``shareableSummary``: for devices that allow multiple allocations, how many have no
  share yet and how many have some, and per capacity (a GPU's memory) the total, what the
  shares consume and what is left.

An incomplete pool (fewer slices seen than it declares) gets only a ``validationError``
with upstream's ``PoolIncomplete:`` prefix; a view that cannot be computed clears that
view and says why (``PartitionTypeMissing:``, ``PartitionSummaryOverCap:``,
``ShareableSummaryOverCap:``), the counts stay.

One departure: upstream refuses a partition type whose devices consume different counters
(``PartitionCostMismatch:``). A MIG profile's partitions draw on the memory slices of
their placement and on their own GPU's counter set, so every NVIDIA MIG pool would be
refused; here the fit is checked device by device (in name order, each fitting device
taking its counters before the next is tried), which gives upstream's answer where the
costs agree and a count that certainly fits where they do not.

Pure: no I/O, no clock; the same inventory gives the same answer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from draco.allocator.devices import DeviceRecord, qualify
from draco.allocator.inventory import Inventory, PoolInfo
from draco.api.constants import (
    POOL_STATUS_LIMIT_DEFAULT,
    POOL_STATUS_LIST_MAX,
    POOL_STATUS_VALIDATION_ERROR_MAX_BYTES,
    UNHEALTHY_TAINT_KEY,
)
from draco.quantity import Quantity

__all__ = [
    "MAX_STATUS_LIST_ITEMS",
    "PARTITION_SUMMARY_OVER_CAP",
    "PARTITION_TYPE_MISSING",
    "POOL_INCOMPLETE",
    "SHAREABLE_SUMMARY_OVER_CAP",
    "PartitionType",
    "PoolStatus",
    "RequestAnswer",
    "ShareableCapacity",
    "ShareableSummary",
    "answer_request",
    "pool_devices",
    "pool_statuses",
]

#: Upstream's caps of ``partitionSummary`` and ``shareableSummary.capacity``.
MAX_STATUS_LIST_ITEMS: Final = POOL_STATUS_LIST_MAX
#: Upstream's machine-readable prefixes of ``validationError``.
POOL_INCOMPLETE: Final = "PoolIncomplete:"
PARTITION_TYPE_MISSING: Final = "PartitionTypeMissing:"
PARTITION_SUMMARY_OVER_CAP: Final = "PartitionSummaryOverCap:"
SHAREABLE_SUMMARY_OVER_CAP: Final = "ShareableSummaryOverCap:"
#: Taint effects that keep a device from new allocations.
_UNAVAILABLE_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class PartitionType:
    """One partition type of a pool (``partitionSummary[]``)."""

    attribute: str
    type: str
    total: int
    allocatable: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "attribute": self.attribute,
            "type": self.type,
            "total": self.total,
            "allocatable": self.allocatable,
        }


@dataclass(frozen=True, slots=True)
class ShareableCapacity:
    """One capacity over a pool's shareable devices (``shareableSummary.capacity[]``)."""

    name: str
    total: Quantity
    consumed: Quantity
    available: Quantity

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "total": self.total.to_json(),
            "consumed": self.consumed.to_json(),
            "available": self.available.to_json(),
        }


@dataclass(frozen=True, slots=True)
class ShareableSummary:
    """A pool's devices that allow multiple allocations (``shareableSummary``)."""

    fully_available_devices: int
    partially_available_devices: int
    capacity: tuple[ShareableCapacity, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fullyAvailableDevices": self.fully_available_devices,
            "partiallyAvailableDevices": self.partially_available_devices,
        }
        if self.capacity:
            out["capacity"] = [c.to_wire() for c in self.capacity]
        return out


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """One pool (``status.pools[]``); the counts are None for an incomplete pool."""

    driver: str
    pool_name: str
    generation: int
    node_name: str | None = None
    resource_slice_count: int | None = None
    total_devices: int | None = None
    allocated_devices: int | None = None
    available_devices: int | None = None
    unavailable_devices: int | None = None
    #: Not part of the wire form (see the module docstring).
    unhealthy_devices: int | None = None
    validation_error: str | None = None
    partition_summary: tuple[PartitionType, ...] = ()
    shareable_summary: ShareableSummary | None = None

    @property
    def incomplete(self) -> bool:
        return bool(self.validation_error and self.validation_error.startswith(POOL_INCOMPLETE))

    def to_wire(self) -> dict[str, Any]:
        """The pool as ``status.pools[]`` has it (camelCase, unset fields left out)."""
        out: dict[str, Any] = {
            "driver": self.driver,
            "poolName": self.pool_name,
            "generation": self.generation,
        }
        optional = {
            "nodeName": self.node_name,
            "resourceSliceCount": self.resource_slice_count,
            "totalDevices": self.total_devices,
            "allocatedDevices": self.allocated_devices,
            "availableDevices": self.available_devices,
            "unavailableDevices": self.unavailable_devices,
            "validationError": self.validation_error,
        }
        out.update({key: value for key, value in optional.items() if value is not None})
        if self.partition_summary:
            out["partitionSummary"] = [p.to_wire() for p in self.partition_summary]
        if self.shareable_summary is not None:
            out["shareableSummary"] = self.shareable_summary.to_wire()
        return out


def pool_statuses(
    inventory: Inventory,
    *,
    driver: str | None = None,
    pool_name: str | None = None,
    default_partition_type_attribute: str | None = None,
) -> list[PoolStatus]:
    """Every pool of the inventory (or of `driver`, or only `pool_name`), sorted by
    driver then pool name; see the module docstring."""
    devices = pool_devices(inventory)
    out: list[PoolStatus] = []
    for key in sorted(inventory.pools):
        if (driver is not None and key[0] != driver) or (pool_name is not None and key[1] != pool_name):
            continue
        out.append(
            _pool_status(
                inventory,
                inventory.pools[key],
                devices.get(key, []),
                default=default_partition_type_attribute,
            )
        )
    return out


def pool_devices(inventory: Inventory) -> dict[tuple[str, str], list[DeviceRecord]]:
    """Each pool's devices at its newest generation, one per name, in name order."""
    found: dict[tuple[str, str], dict[str, DeviceRecord]] = defaultdict(dict)
    for device in inventory.devices:
        pool = inventory.pools.get((device.driver, device.pool))
        if pool is not None and device.generation == pool.generation:
            found[(device.driver, device.pool)].setdefault(device.name, device)
    return {key: [named[name] for name in sorted(named)] for key, named in found.items()}


def _error(text: str) -> str:
    """`text` cut to upstream's 256 bytes."""
    encoded = text.encode()
    return (
        text
        if len(encoded) <= POOL_STATUS_VALIDATION_ERROR_MAX_BYTES
        else encoded[:POOL_STATUS_VALIDATION_ERROR_MAX_BYTES].decode(errors="ignore")
    )


def _pool_status(
    inventory: Inventory, info: PoolInfo, devices: list[DeviceRecord], *, default: str | None
) -> PoolStatus:
    nodes = {device.node_name for device in devices}
    node_name = next(iter(nodes)) if len(nodes) == 1 else None
    if not info.complete:
        return PoolStatus(
            driver=info.driver,
            pool_name=info.name,
            generation=info.generation,
            node_name=node_name,
            validation_error=_error(
                f"{POOL_INCOMPLETE} pool {info.describe()} is incomplete: observed "
                f"{info.seen_slices}/{info.expected_slices} slices at generation {info.generation}"
            ),
        )
    allocated = unavailable = unhealthy = 0
    for device in devices:
        allocated += inventory.is_allocated(device)
        if device.taints:
            unavailable += any(t.effect in _UNAVAILABLE_EFFECTS for t in device.taints)
            unhealthy += any(t.key == UNHEALTHY_TAINT_KEY for t in device.taints)
    partitions, error = _partition_summary(inventory, info, devices, default=default)
    shareable, shareable_error = _shareable_summary(inventory, info, devices)
    error = error or shareable_error
    return PoolStatus(
        driver=info.driver,
        pool_name=info.name,
        generation=info.generation,
        node_name=node_name,
        resource_slice_count=info.seen_slices,
        total_devices=len(devices),
        allocated_devices=allocated,
        available_devices=max(0, len(devices) - allocated - unavailable),
        unavailable_devices=unavailable,
        unhealthy_devices=unhealthy,
        validation_error=_error(error) if error else None,
        partition_summary=() if error else partitions,
        shareable_summary=shareable,
    )


def _partition_attribute(info: PoolInfo, device: DeviceRecord, default: str | None) -> str | None:
    """The attribute that names `device`'s partition type: its slice's declaration; the
    request's default only when no slice of the pool declares one (upstream's rule)."""
    if info.partition_attributes:
        return info.partition_attributes.get(device.slice_name)
    return qualify(default, info.driver) if default else None


def _string_attribute(device: DeviceRecord, name: str) -> str | None:
    found = device.attrs.get(name)
    if found is None or found[0] != "string" or len(found[1]) != 1:
        return None
    (value,) = found[1]
    return str(value)


def _partition_summary(
    inventory: Inventory, info: PoolInfo, devices: list[DeviceRecord], *, default: str | None
) -> tuple[tuple[PartitionType, ...], str | None]:
    if not info.partition_attributes and not default:
        return (), None  # no partition types are named
    attributes = {device.index: _partition_attribute(info, device, default) for device in devices}
    if not any(attributes.values()):
        return (), None
    if not info.counters:
        return (), (
            f"{PARTITION_TYPE_MISSING} pool {info.describe()} declares partitionTypeAttribute "
            "but publishes no sharedCounters"
        )
    groups: dict[tuple[str, str], list[DeviceRecord]] = defaultdict(list)
    for device in devices:
        attribute = attributes[device.index]
        if not device.consumes or attribute is None:
            continue  # not a partition, or not grouped
        kind = _string_attribute(device, attribute)
        if kind is None:
            return (), (
                f"{PARTITION_TYPE_MISSING} device {device.name!r} in pool {info.describe()} "
                f"does not carry partition type attribute {attribute!r}"
            )
        groups[(attribute, kind)].append(device)
    if len(groups) > MAX_STATUS_LIST_ITEMS:
        return (), (
            f"{PARTITION_SUMMARY_OVER_CAP} pool {info.describe()} has {len(groups)} partition types, "
            f"exceeding the maximum of {MAX_STATUS_LIST_ITEMS}"
        )
    baseline = dict(info.counters)
    if devices:
        baseline = inventory.counters_available(devices[0])
    summary = tuple(
        PartitionType(
            attribute=attribute,
            type=kind,
            total=len(members),
            allocatable=_fitting(inventory, members, baseline),
        )
        for (attribute, kind), members in sorted(groups.items())
    )
    return summary, None


def _fitting(
    inventory: Inventory, members: Iterable[DeviceRecord], baseline: Mapping[tuple[str, str], int]
) -> int:
    """How many of the unallocated `members` fit the counters left, one after another."""
    left = dict(baseline)
    count = 0
    for device in members:
        if inventory.is_allocated(device):
            continue
        cost = [
            ((set_name, counter), amount)
            for set_name, counters in device.consumes
            for counter, amount in counters
        ]
        if all(left.get(name, 0) >= amount for name, amount in cost):
            count += 1
            for name, amount in cost:
                left[name] -= amount
    return count


def _shareable_summary(
    inventory: Inventory, info: PoolInfo, devices: list[DeviceRecord]
) -> tuple[ShareableSummary | None, str | None]:
    shareable = [device for device in devices if device.allow_multiple]
    if not shareable:
        return None, None
    totals: dict[str, Quantity] = {}
    consumed: dict[str, int] = defaultdict(int)
    partial = 0
    for device in shareable:
        if inventory.is_allocated(device):
            partial += 1
        for name, capacity in device.capacity.items():
            totals[name] = totals[name] + capacity.value if name in totals else capacity.value
        # (Copied first: the operator's metrics read an inventory the allocation is marking.)
        for name, amount in list((inventory.shared_capacity(device) or {}).items()):
            consumed[name] += amount
    if len(totals) > MAX_STATUS_LIST_ITEMS:
        return None, (
            f"{SHAREABLE_SUMMARY_OVER_CAP} pool {info.describe()} has {len(totals)} shareable capacity keys, "
            f"exceeding the maximum of {MAX_STATUS_LIST_ITEMS}"
        )
    return (
        ShareableSummary(
            fully_available_devices=len(shareable) - partial,
            partially_available_devices=partial,
            capacity=tuple(_capacity(name, totals[name], consumed.get(name, 0)) for name in sorted(totals)),
        ),
        None,
    )


def _capacity(name: str, total: Quantity, consumed_nanos: int) -> ShareableCapacity:
    consumed = Quantity.from_nanos(consumed_nanos, fmt=total.format)
    left = max(0, total.nanos - consumed_nanos)
    return ShareableCapacity(
        name=name, total=total, consumed=consumed, available=Quantity.from_nanos(left, fmt=total.format)
    )


@dataclass(frozen=True)
class RequestAnswer:
    """What a ResourcePoolStatusRequest's status says: how many pools matched, the first
    `limit` of them, and whether any of those is still incomplete (then nothing is written
    yet: the request is tried again)."""

    pool_count: int
    pools: tuple[PoolStatus, ...] = field(default_factory=tuple)

    @property
    def incomplete(self) -> list[PoolStatus]:
        return [pool for pool in self.pools if pool.incomplete]

    def invalid(self) -> Iterator[PoolStatus]:
        return (pool for pool in self.pools if pool.validation_error)


def answer_request(inventory: Inventory, spec: Mapping[str, Any]) -> RequestAnswer:
    """The status a request with `spec` (``driver``, ``poolName``, ``limit``,
    ``defaultPartitionTypeAttribute``) gets from `inventory`."""
    pools = pool_statuses(
        inventory,
        driver=str(spec.get("driver") or ""),
        pool_name=spec.get("poolName") or None,
        default_partition_type_attribute=spec.get("defaultPartitionTypeAttribute") or None,
    )
    limit = int(spec.get("limit") or POOL_STATUS_LIMIT_DEFAULT)
    return RequestAnswer(pool_count=len(pools), pools=tuple(pools[:limit]))
