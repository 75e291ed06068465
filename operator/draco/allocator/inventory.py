"""The allocator's view of the cluster: devices, pools, classes and what is in use.

Built once from DeviceClasses, ResourceSlices and DeviceTaintRules (slices and rules are
immutable for the life of an inventory: rebuild it when they change; selector results
live in a :class:`SelectorCache`, process-wide by default, so a rebuild re-evaluates only
changed devices) and kept current about allocations with
:meth:`Inventory.mark_allocated` / :meth:`Inventory.release`, which callers use for
allocated claims and for in-flight allocations alike.

It holds the indexes that make allocation cheap: per-node device lists in the order the
search tries them (cached per node), pool completeness and validity, counters consumed
by allocated devices, and per selection (class + request selectors) the matching
devices by node with their free counts, so node choice does not evaluate every node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from draco.allocator.capacity import used_by_device_name
from draco.allocator.devices import CapacityRecord, DeviceRecord, Taint, attribute_set, qualify
from draco.allocator.nodeselect import node_selector_matches
from draco.allocator.outcome import Node
from draco.allocator.selectors import SelectorCache, shared_cache
from draco.api.bodies import key_of
from draco.api.pools import pool_of
from draco.api.quantity import Quantity
from draco.errors import AllocationInputError, CELError

__all__ = ["Inventory", "NodeView", "PoolInfo", "as_dict"]

DeviceKey = tuple[str, str, str]
PoolKey = tuple[str, str]


def as_dict(obj: Any) -> dict[str, Any]:
    """The Kubernetes JSON shape of an api model (or the dict itself)."""
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(obj, "to_dict", None)
    if to_dict is not None:
        result = to_dict()
        if isinstance(result, dict):
            return result
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        result = dump(by_alias=True, exclude_none=True, mode="json")
        if isinstance(result, dict):
            return result
    raise TypeError(f"expected an api model or a dict, got {type(obj).__name__}")


@dataclass(slots=True)
class PoolInfo:
    """One resource pool at its newest generation."""

    driver: str
    name: str
    generation: int
    expected_slices: int
    seen_slices: int
    #: Counter totals from ``sharedCounters``: ``(counterSet, counter) -> nanos``.
    counters: dict[tuple[str, str], int] = field(default_factory=dict)
    #: The ``partitionTypeAttribute`` of the slices that declare one (slice name ->
    #: fully qualified attribute): how the pool's partitions are told apart
    #: (`draco.allocator.poolstatus`); the allocator itself never reads it.
    partition_attributes: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> PoolKey:
        return (self.driver, self.name)

    @property
    def complete(self) -> bool:
        return self.seen_slices == self.expected_slices

    def describe(self) -> str:
        return f"{self.driver}/{self.name}"


@dataclass(slots=True)
class _Slice:
    name: str
    generation: int
    driver: str
    pool: str
    node_name: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    per_device: bool
    devices: list[int]
    #: ``sharedCounters`` of the slice: counter set -> names of its counters.
    counter_sets: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(slots=True)
class NodeView:
    """What one node can reach: usable devices in search order, and unusable pools."""

    devices: list[int]
    #: ``(pool, reachable device count, "incomplete" | "invalid", why)`` for pools the
    #: node reaches but nothing may be allocated from.
    unusable: list[tuple[PoolInfo, int, str, str]]
    #: Devices of usable pools that do not reach the node but sit in a slice with
    #: ``perDeviceNodeSelection`` that does: upstream runs selectors on them before it
    #: checks their node, so a CEL runtime error there is an error here too.
    unreachable: list[int] = field(default_factory=list)


class SelectionIndex:
    """Devices matching one (class selectors, request selectors) pair, by node.

    Devices a selector fails on with a runtime error count as matching here: the index
    gives upper bounds for node choice, and the per-node allocation reports the error.
    """

    __slots__ = ("free_local", "free_shared", "local", "nonempty", "shared")

    def __init__(self) -> None:
        self.local: dict[str, list[int]] = {}
        self.shared: list[int] = []
        self.free_local: dict[str, int] = {}
        #: Nodes with at least one free matching local device.
        self.nonempty: set[str] = set()
        self.free_shared = 0

    def adjust(self, node: str | None, delta: int) -> None:
        if node is None:
            self.free_shared += delta
            return
        free = self.free_local.get(node, 0) + delta
        self.free_local[node] = free
        if free > 0:
            self.nonempty.add(node)
        else:
            self.nonempty.discard(node)

    def upper_bound(self, node: str) -> int:
        return self.free_local.get(node, 0) + self.free_shared


class Inventory:
    """Devices, pools, classes and the allocated state; see the module docstring."""

    def __init__(self, *, cache: SelectorCache | None = None) -> None:
        self.cache = cache if cache is not None else shared_cache()
        self.classes: dict[str, dict[str, Any]] = {}
        self.devices: list[DeviceRecord] = []
        self.pools: dict[PoolKey, PoolInfo] = {}
        self.by_key: dict[DeviceKey, int] = {}
        #: Further devices published under a key already taken (slices of one pool for
        #: different nodes, older generations): in the pool's newest generation they share
        #: the key's allocated state, as upstream's device IDs do.
        self._same_key: dict[DeviceKey, list[int]] = {}
        self._slices: list[_Slice] = []
        self._local_slices: dict[str, list[_Slice]] = defaultdict(list)
        self._shared_slices: list[_Slice] = []
        self._generations: dict[PoolKey, dict[int, PoolInfo]] = defaultdict(dict)
        self._pool_slices: dict[tuple[PoolKey, int], list[_Slice]] = defaultdict(list)
        self._node_views: dict[Node, NodeView] = {}
        # Allocated state.
        self._exclusive: dict[DeviceKey, int] = {}
        self._shared_count: dict[DeviceKey, int] = {}
        self._shared_capacity: dict[DeviceKey, dict[str, int]] = {}
        self._claims: dict[str, list[tuple[DeviceKey, dict[str, int] | None]]] = {}
        self._pool_counters_used: dict[PoolKey, dict[tuple[str, str], int]] = defaultdict(dict)
        self._node_allocated: dict[str, int] = defaultdict(int)
        #: Bumped by every change of the allocated state: a reader that keeps something it
        #: computed from the state (the pool metrics) knows when it is stale.
        self.changes = 0
        self._selections: dict[tuple[Any, ...], SelectionIndex] = {}
        self._device_selections: dict[int, list[SelectionIndex]] = defaultdict(list)
        #: Selector verdicts per (node view, class, selectors) and compiled class
        #: selectors, filled by the planner (classes and slices do not change).
        self.node_selections: dict[tuple[Any, ...], Any] = {}
        #: Node choice caches its sorted view of the candidate nodes here.
        self.node_order: object = None

    # --- building ---------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        *,
        classes: Iterable[Any],
        slices: Iterable[Any],
        taint_rules: Iterable[Any] = (),
        allocated_claims: Iterable[Any] = (),
        cache: SelectorCache | None = None,
    ) -> Inventory:
        """Index everything; ``allocated_claims`` (with ``status.allocation``) count as in use."""
        inventory = cls(cache=cache)
        for device_class in classes:
            data = as_dict(device_class)
            inventory.classes[(data.get("metadata") or {}).get("name", "")] = data
        rules = [as_dict(rule) for rule in taint_rules]
        inventory._add_slices([as_dict(s) for s in slices], rules)
        for claim in allocated_claims:
            inventory.mark_allocated(claim)
        return inventory

    def _add_slices(self, slices: list[dict[str, Any]], rules: list[dict[str, Any]]) -> None:
        by_generation: dict[PoolKey, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for data in slices:
            key, generation = pool_of(data.get("spec") or {})
            by_generation[key][generation].append(data)
        rule_taints = _rule_taints(rules)
        for key in sorted(by_generation):
            # Newest first, so that a device name maps to its newest record.
            for generation in sorted(by_generation[key], reverse=True):
                members = sorted(
                    by_generation[key][generation], key=lambda s: (s.get("metadata") or {}).get("name", "")
                )
                first_pool = (members[0].get("spec") or {}).get("pool") or {}
                info = PoolInfo(
                    driver=key[0],
                    name=key[1],
                    generation=generation,
                    expected_slices=int(first_pool.get("resourceSliceCount") or 0),
                    seen_slices=len(members),
                )
                self._generations[key][generation] = info
                self.pools.setdefault(key, info)
                self._add_pool_slices(info, members, rule_taints)

    def _add_pool_slices(
        self,
        info: PoolInfo,
        members: list[dict[str, Any]],
        rule_taints: list[tuple[Mapping[str, Any], Taint]],
    ) -> None:
        counter_sets: dict[str, dict[str, int]] = {}
        for data in members:
            spec = data.get("spec") or {}
            slice_name = (data.get("metadata") or {}).get("name", "")
            per_device = bool(spec.get("perDeviceNodeSelection"))
            if spec.get("partitionTypeAttribute"):
                info.partition_attributes[slice_name] = qualify(
                    str(spec["partitionTypeAttribute"]), info.driver
                )
            entry = _Slice(
                name=slice_name,
                generation=info.generation,
                driver=info.driver,
                pool=info.name,
                node_name=spec.get("nodeName") or None,
                all_nodes=bool(spec.get("allNodes")),
                node_selector=spec.get("nodeSelector"),
                per_device=per_device,
                devices=[],
            )
            for counter_set in spec.get("sharedCounters") or []:
                set_name = counter_set.get("name", "")
                counters = counter_set.get("counters") or {}
                entry.counter_sets[set_name] = frozenset(counters)
                counter_sets[set_name] = {
                    name: _nanos(counter.get("value", "0")) for name, counter in counters.items()
                }
            for raw in spec.get("devices") or []:
                record = self._make_device(info, entry, raw, rule_taints)
                entry.devices.append(record.index)
            if entry.node_name is None and not (entry.all_nodes or entry.node_selector or entry.per_device):
                # No known node selection: some future extension; ignore it like upstream.
                continue
            self._slices.append(entry)
            self._pool_slices[(info.key, info.generation)].append(entry)
            if entry.node_name is not None:
                self._local_slices[entry.node_name].append(entry)
            else:
                self._shared_slices.append(entry)
        info.counters = {
            (set_name, counter): value
            for set_name, counters in counter_sets.items()
            for counter, value in counters.items()
        }

    def _make_device(
        self,
        info: PoolInfo,
        entry: _Slice,
        raw: Mapping[str, Any],
        rule_taints: list[tuple[Mapping[str, Any], Taint]],
    ) -> DeviceRecord:
        driver = info.driver
        name = raw.get("name", "")
        attrs: dict[str, Any] = {}
        # Unqualified names first, so that a fully qualified spelling wins (upstream lookup order).
        for attr_name, attribute in sorted(
            (raw.get("attributes") or {}).items(), key=lambda kv: "/" in kv[0]
        ):
            value = attribute_set(as_dict(attribute) if not isinstance(attribute, dict) else attribute)
            if value is not None:
                attrs[qualify(attr_name, driver)] = value
        capacity: dict[str, CapacityRecord] = {}
        published = raw.get("capacity") or {}
        for cap_name, cap in published.items():
            if "/" not in cap_name and f"{driver}/{cap_name}" in published:
                continue  # one capacity under two spellings: the qualified entry wins (1.38)
            value = cap.get("value", "0")
            capacity[cap_name] = CapacityRecord(
                value=value if isinstance(value, Quantity) else Quantity(str(value)),
                policy=cap.get("requestPolicy"),
            )
        consumes = tuple(
            (
                consumption.get("counterSet", ""),
                tuple(
                    (counter, _nanos(spec.get("value", "0")))
                    for counter, spec in sorted((consumption.get("counters") or {}).items())
                ),
            )
            for consumption in raw.get("consumesCounters") or []
        )
        taints = [
            Taint(
                key=t.get("key", ""),
                value=t.get("value", "") or "",
                effect=t.get("effect", "") or "",
                source="slice",
            )
            for t in raw.get("taints") or []
        ]
        for selector, taint in rule_taints:
            if all(
                selector.get(f) in (None, "", v)
                for f, v in (("driver", driver), ("pool", info.name), ("device", name))
            ):
                taints.append(taint)
        if entry.per_device:
            node_name = raw.get("nodeName") or None
            all_nodes = bool(raw.get("allNodes"))
            node_selector = raw.get("nodeSelector")
        else:
            node_name, all_nodes, node_selector = entry.node_name, entry.all_nodes, entry.node_selector
        record = DeviceRecord(
            index=len(self.devices),
            driver=driver,
            pool=info.name,
            name=name,
            slice_name=entry.name,
            raw=raw,
            attrs=attrs,
            capacity=capacity,
            allow_multiple=bool(raw.get("allowMultipleAllocations")),
            consumes=consumes,
            taints=tuple(taints),
            binding_conditions=tuple(raw.get("bindingConditions") or ()),
            binding_failure_conditions=tuple(raw.get("bindingFailureConditions") or ()),
            binds_to_node=bool(raw.get("bindsToNode")),
            node_name=node_name,
            all_nodes=all_nodes,
            node_selector=node_selector,
            generation=info.generation,
        )
        self.cache.intern(record)
        self.devices.append(record)
        if self.by_key.setdefault(record.key, record.index) != record.index:
            self._same_key.setdefault(record.key, []).append(record.index)
        return record

    # --- per-node views ----------------------------------------------------------------

    def node_view(self, node: Node) -> NodeView:
        """Devices ``node`` can use, in search order (pool, slice, device), cached."""
        view = self._node_views.get(node)
        if view is None:
            view = self._build_node_view(node)
            self._node_views[node] = view
        return view

    def _build_node_view(self, node: Node) -> NodeView:
        by_pool: dict[PoolKey, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        relevant_slices: dict[tuple[PoolKey, int], int] = defaultdict(int)
        # Upstream orders a pool last when a device of its slices for this node (all of
        # such a slice's devices, reachable or not) has binding conditions.
        binding: set[tuple[PoolKey, int]] = set()
        hidden: dict[tuple[PoolKey, int], list[int]] = defaultdict(list)
        relevant: dict[tuple[PoolKey, int], list[_Slice]] = defaultdict(list)
        for entry in (*self._local_slices.get(node.name, ()), *self._shared_slices):
            if entry.node_name is not None:
                if entry.node_name != node.name:
                    continue
            elif entry.all_nodes:
                pass
            elif entry.node_selector and not node_selector_matches(
                entry.node_selector, name=node.name, labels=node.labels
            ):
                continue
            key = (entry.driver, entry.pool)
            if entry.per_device:
                reachable = [i for i in entry.devices if self._device_reaches(self.devices[i], node)]
                if not reachable:
                    continue
                if len(reachable) < len(entry.devices):
                    hidden[(key, entry.generation)].extend(i for i in entry.devices if i not in reachable)
            else:
                reachable = entry.devices
            by_pool[key][entry.generation].extend(reachable)
            relevant_slices[(key, entry.generation)] += 1
            relevant[(key, entry.generation)].append(entry)
            if any(self.devices[i].binding_conditions for i in entry.devices):
                binding.add((key, entry.generation))
        chosen: list[tuple[PoolInfo, list[int], bool, str | None]] = []
        for key, generations in by_pool.items():
            # Upstream: the node's newest generation is used if the node sees all of its
            # slices; otherwise a newer generation anywhere makes it obsolete, else the
            # pool is complete only if all its slices at that generation exist.
            generation = max(generations)
            info = self._generations[key][generation]
            sees_all = relevant_slices[(key, generation)] == info.expected_slices
            if not sees_all and self.pools[key].generation > generation:
                continue
            complete = sees_all or info.complete
            invalid = (
                self._invalid_for_node(key, generation, relevant[(key, generation)], sees_all)
                if complete
                else None
            )
            chosen.append((info, generations[generation], complete, invalid))
        devices: list[int] = []
        unusable: list[tuple[PoolInfo, int, str, str]] = []
        unreachable: list[int] = []
        for info, indices, complete, invalid in sorted(
            chosen, key=lambda c: ((c[0].key, c[0].generation) in binding, c[0].key)
        ):
            members = sorted(indices, key=lambda i: (self.devices[i].slice_name, i))
            if not complete:
                why = f"{info.seen_slices} of {info.expected_slices} slices at generation {info.generation}"
                unusable.append((info, len(members), "incomplete", why))
            elif invalid is not None:
                unusable.append((info, len(members), "invalid", invalid))
            else:
                devices.extend(members)
                unreachable.extend(hidden.get((info.key, info.generation), ()))
        return NodeView(devices=devices, unusable=unusable, unreachable=unreachable)

    def _invalid_for_node(
        self, key: PoolKey, generation: int, relevant: list[_Slice], sees_all: bool
    ) -> str | None:
        """Why the pool is invalid as seen from a node (``None``: it is valid).

        Upstream judges what the node sees: device names must be unique among the
        node's slices (a per-device slice counts with all its devices), and every device
        must consume known counters of a counter set defined once. When the node does not
        see every slice of the pool, all slices' counter sets and devices count for the
        counters, but still only the node's slices for the names.
        """
        others: list[_Slice] = []
        if not sees_all:
            mine = {id(entry) for entry in relevant}
            others = [entry for entry in self._pool_slices[(key, generation)] if id(entry) not in mine]
        names: set[str] = set()
        for entry in relevant:
            if entry.counter_sets:
                continue
            for index in entry.devices:
                name = self.devices[index].name
                if name in names:
                    return f"device name {name} is used more than once"
                names.add(name)
        counter_sets: dict[str, frozenset[str]] = {}
        for entry in (*relevant, *others):
            for set_name, names_in_set in entry.counter_sets.items():
                if set_name in counter_sets:
                    return f"counter set {set_name} is defined more than once"
                counter_sets[set_name] = names_in_set
        for entry in (*relevant, *others):
            if entry.counter_sets:
                continue
            for index in entry.devices:
                device = self.devices[index]
                for set_name, consumed in device.consumes:
                    known = counter_sets.get(set_name)
                    if known is None:
                        return f"device {device.name} consumes counters of the unknown counter set {set_name}"
                    for counter, _ in consumed:
                        if counter not in known:
                            return (
                                f"device {device.name} consumes the unknown counter {counter} of counter set "
                                f"{set_name}"
                            )
        return None

    @staticmethod
    def _device_reaches(device: DeviceRecord, node: Node) -> bool:
        if device.node_name is not None:
            return device.node_name == node.name
        if device.all_nodes:
            return True
        return node_selector_matches(device.node_selector, name=node.name, labels=node.labels)

    # --- allocated state ---------------------------------------------------------------

    def exclusive_in_use(self, device: DeviceRecord) -> bool:
        """Whether allocated claims hold ``device`` exclusively, which keeps it from being
        taken but for admin access."""
        return device.key in self._exclusive

    def shared_capacity(self, device: DeviceRecord) -> dict[str, int] | None:
        """Capacity consumed by the allocated shares of ``device`` (``None``: not shared).

        Keyed by name, as upstream keys it: for a device that cannot be shared, what
        shares of a device the pool publishes under the same name on another node
        consume (see :mod:`draco.allocator.capacity`). The names are the device's own
        (a share recorded as ``memory`` counts against ``<driver>/memory``)."""
        used = self._shared_capacity.get(device.key)
        return None if used is None else used_by_device_name(device, used)

    def capacity_taken_by_name(self, device: DeviceRecord) -> bool:
        """Whether ``device`` cannot be shared and shares under its name consumed some of
        a capacity it publishes: then it fits no request that leaves that capacity
        unasked (the allocation takes all of it)."""
        consumed = None if device.allow_multiple else self.shared_capacity(device)
        if not consumed:
            return False
        return any(amount > 0 for amount in consumed.values())

    def shared_in_use(self, device: DeviceRecord) -> bool:
        """Whether allocated claims hold a share of ``device`` (with or without consumed
        capacity recorded): its counters are then already charged, once for all shares."""
        return self._shared_count.get(device.key, 0) > 0

    def is_allocated(self, device: DeviceRecord) -> bool:
        key = device.key
        return self._exclusive.get(key, 0) > 0 or self._shared_count.get(key, 0) > 0

    def counters_available(self, device: DeviceRecord) -> dict[tuple[str, str], int]:
        """Counter amounts left in ``device``'s pool after what allocated devices consume."""
        pool = (device.driver, device.pool)
        info = self._generations[pool][device.generation]
        used = self._pool_counters_used.get(pool, {})
        return {name: total - used.get(name, 0) for name, total in info.counters.items()}

    def allocated_on_node(self, node: str) -> int:
        """Allocated results on devices local to ``node`` (for pack/spread scoring)."""
        return self._node_allocated.get(node, 0)

    def mark_allocated(self, claim: Any) -> None:
        """Count the devices in ``claim``'s ``status.allocation`` as in use (idempotent)."""
        data = as_dict(claim)
        key = key_of(data)
        if key in self._claims:
            self._release_key(key)
        allocation = (data.get("status") or {}).get("allocation")
        if not allocation:
            return
        contributions: list[tuple[DeviceKey, dict[str, int] | None]] = []
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("adminAccess"):
                continue
            device_key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
            if result.get("shareID"):
                amounts = {
                    name: _nanos(value) for name, value in (result.get("consumedCapacity") or {}).items()
                }
                contributions.append((device_key, amounts))
            else:
                contributions.append((device_key, None))
        self._claims[key] = contributions
        for device_key, consumed in contributions:
            self._apply(device_key, consumed, +1)

    def release(self, claim: Any) -> None:
        """Forget what :meth:`mark_allocated` counted for ``claim`` (no-op when unknown)."""
        self._release_key(key_of(as_dict(claim)))

    def _release_key(self, key: str) -> None:
        for device_key, consumed in self._claims.pop(key, ()):
            self._apply(device_key, consumed, -1)

    def _apply(self, device_key: DeviceKey, consumed: dict[str, int] | None, sign: int) -> None:
        self.changes += 1
        was_allocated = self._exclusive.get(device_key, 0) > 0 or self._shared_count.get(device_key, 0) > 0
        was_exclusive = self._exclusive.get(device_key, 0) > 0
        if consumed is None:
            self._exclusive[device_key] = self._exclusive.get(device_key, 0) + sign
            if self._exclusive[device_key] <= 0:
                del self._exclusive[device_key]
        else:
            count = self._shared_count.get(device_key, 0) + sign
            totals = self._shared_capacity.setdefault(device_key, {})
            for name, amount in consumed.items():
                totals[name] = totals.get(name, 0) + sign * amount
            if count <= 0:
                self._shared_count.pop(device_key, None)
                self._shared_capacity.pop(device_key, None)
            else:
                self._shared_count[device_key] = count
        first = self.by_key.get(device_key)
        if first is None:
            return
        is_allocated = self._exclusive.get(device_key, 0) > 0 or self._shared_count.get(device_key, 0) > 0
        is_exclusive = self._exclusive.get(device_key, 0) > 0
        # Every device the pool publishes under the key (in its newest generation) is in
        # use, and each charges its counters: upstream charges each allocated device of
        # the pool's slices, whichever node they are for.
        pool = self.pools.get((device_key[0], device_key[1]))
        for index in (first, *self._same_key.get(device_key, ())):
            device = self.devices[index]
            if pool is not None and device.generation != pool.generation:
                continue
            if device.node_name is not None:
                self._node_allocated[device.node_name] += sign
            if is_allocated != was_allocated and device.consumes:
                used = self._pool_counters_used[(device.driver, device.pool)]
                delta = 1 if is_allocated else -1
                for set_name, counters in device.consumes:
                    for counter, amount in counters:
                        used[(set_name, counter)] = used.get((set_name, counter), 0) + delta * amount
            if is_exclusive != was_exclusive:
                delta = -1 if is_exclusive else 1
                for selection in self._device_selections.get(index, ()):
                    selection.adjust(device.node_name, delta)

    # --- selection indexes (node choice) ------------------------------------------------

    def selection(self, class_selectors: Sequence[str], request_selectors: Sequence[str]) -> SelectionIndex:
        """Devices matching the selectors anywhere, by node, with free counts (cached).

        Raises ``AllocationInputError`` when a selector does not compile.
        """
        key = (tuple(class_selectors), tuple(request_selectors))
        index = self._selections.get(key)
        if index is not None:
            return index
        index = SelectionIndex()
        try:
            evaluators = [self.cache.evaluator(e) for e in (*class_selectors, *request_selectors)]
        except CELError as exc:
            raise AllocationInputError(f"selector does not compile: {exc}") from exc
        for device in self.devices:
            if not all(evaluate(device) is not False for evaluate in evaluators):
                continue
            if device.node_name is not None:
                index.local.setdefault(device.node_name, []).append(device.index)
            else:
                index.shared.append(device.index)
            if not self.exclusive_in_use(device):
                index.adjust(device.node_name, 1)
            self._device_selections[device.index].append(index)
        self._selections[key] = index
        return index


def _nanos(value: Any) -> int:
    if isinstance(value, Quantity):
        return value.nanos
    return Quantity(str(value)).nanos


def _rule_taints(rules: list[dict[str, Any]]) -> list[tuple[Mapping[str, Any], Taint]]:
    """``(deviceSelector, taint)`` of each rule; a rule without a selector matches nothing."""
    taints: list[tuple[Mapping[str, Any], Taint]] = []
    for rule in sorted(rules, key=lambda r: (r.get("metadata") or {}).get("name", "")):
        spec = rule.get("spec") or {}
        selector = spec.get("deviceSelector")
        taint = spec.get("taint") or {}
        if selector is None or not taint:
            continue
        taints.append(
            (
                selector,
                Taint(
                    key=taint.get("key", ""),
                    value=taint.get("value", "") or "",
                    effect=taint.get("effect", "") or "",
                    source=f"rule {(rule.get('metadata') or {}).get('name', '')}",
                ),
            )
        )
    return taints
