"""The allocation side's picture of the cluster, kept current by watch events.

Allocating a pod's claims needs, at once, every DeviceClass, ResourceSlice and
DeviceTaintRule, every Node (labels, taints, allocatable), what the pods already placed
on each node request, and which devices allocated claims hold. Reading all of that from
the API per pod would be far too slow, so the scheduling handlers feed watch events into
this view and the allocation service reads it. Nothing here is needed to survive a
restart: the view is rebuilt by listing the API before the first allocation.

Compactness: the view keeps only what allocation reads. Slices, classes and rules are
kept as ``{"metadata": {"name"}, "spec"}`` (the allocator's input); nodes as
:class:`NodeInfo`; pods as :class:`PodInfo` records when they occupy a node; claims as
:class:`ClaimRecord` (their allocation's results, reservations and resourceVersion),
never whole objects.

Devices in use, and why there is no double allocation:

- The allocator's :class:`Inventory` is told about every claim with an allocation
  (``mark_allocated``) and forgets it when the allocation goes (``release``). Slices,
  classes and rules are immutable inside an inventory, so a change to them marks the
  inventory stale and the next reader rebuilds it, re-marking every allocated claim.
- An allocation the service has chosen but not yet written is *in flight*: it is marked
  at the moment of the choice (no ``await`` between choosing and marking), so the next
  pod's choice already sees those devices as taken. It stays marked until the service
  either commits it (the write succeeded: the record takes the written object's
  resourceVersion) or abandons it (the write failed: the record's own allocation, if
  any, is marked again).
- Watch events can be stale: an event for a claim older than what the service just
  wrote must not un-mark the devices. Claim events whose resourceVersion is lower than
  the record's are ignored, and a claim with an in-flight allocation keeps it marked
  whatever the events say until the service decides.

Where the claims come from: the operator's claim informer (``claim_cache``, see
:mod:`draco.kube.informer`) hands the view every claim it holds and every change,
deletions found by a LIST included, so the view's records are a function of that one
cache of claims plus what is in flight, never a tally of their own. The service's writes
go through the cache too (:meth:`commit` assumes the answer there), so what another
consumer of the cache (the lifecycle) sees and what the view counts cannot part: a claim
the cache knows deleted cannot be revived by a late answer to our write.

Searching off the event loop: the allocation service runs the allocator (which reads the
inventory and node usage) in a worker thread. While it does, the view is *frozen*
(:meth:`ClusterView.freeze`): every change (watch events, writes committed by other pods'
syncs) is queued and applied, in order, when the view thaws, so the search reads a state
nothing changes under it. Decisions are serialized by the service; it thaws and marks its
choice (``begin``) with no ``await`` between, so choose-and-mark stays atomic.

Listeners registered with :meth:`ClusterView.on_capacity` are called when something
changes that could let a waiting pod fit (a slice, class, rule or node changed, an
allocation was released, a pod left a node); allocations growing never call them. Those
of :meth:`ClusterView.on_change` also hear of pods placed anywhere and of storage objects
(a pod's affinity may wait for another pod; its volumes for a claim to bind). Those
of :meth:`ClusterView.on_change` are told what changed (a :class:`CapacityChange`: the
pools whose devices were freed or whose slices changed, the class, node resources), so
that only the waiting pods it may help are tried again (:mod:`draco.scheduling.wakeups`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, Final, Literal, ParamSpec, Protocol, get_args

from draco.allocator.inventory import Inventory
from draco.allocator.outcome import Node
from draco.api.bodies import AllocationResultBody, Obj, ResourceClaimBody, key_of, meta_of, reserved_for
from draco.api.constants import SCHEDULER_NAME, SCHEDULING_GATE
from draco.api.corebodies import NodeBody, PodBody
from draco.scheduling.cluster import ImageState, TermKind
from draco.scheduling.labels import LabelSelector, label_selector
from draco.scheduling.nodefit import NodeInfo, node_info_from_dict
from draco.scheduling.podinfo import PodInfo, PodInfoParser
from draco.scheduling.profile import node_unfit
from draco.scheduling.wakeups import EVERYTHING, CapacityChange

__all__ = [
    "STORAGE_KINDS",
    "ClaimCache",
    "ClaimRecord",
    "ClusterView",
    "StaticFit",
    "StorageKind",
    "pinned_node",
    "resource_version",
]


_NO_PODS: Final[dict[str, PodInfo]] = {}
_NO_REQUESTS: Final[dict[str, int]] = {}

StorageKind = Literal[
    "persistentvolumeclaims",
    "persistentvolumes",
    "storageclasses",
    "csinodes",
    "csidrivers",
    "csistoragecapacities",
    "volumeattachments",
]
STORAGE_KINDS: Final[tuple[StorageKind, ...]] = get_args(StorageKind)


P = ParamSpec("P")


def _deferred_while_frozen(
    method: Callable[Concatenate[ClusterView, P], None],
) -> Callable[Concatenate[ClusterView, P], None]:
    """A change to the view: applied now, or queued until the view thaws."""

    def change(view: ClusterView, /, *args: P.args, **kwargs: P.kwargs) -> None:
        if view._frozen:
            view._deferred.append(functools.partial(method, view, *args, **kwargs))
            return
        method(view, *args, **kwargs)

    change.__name__ = method.__name__
    change.__qualname__ = method.__qualname__
    change.__doc__ = method.__doc__
    return change


def resource_version(obj: Mapping[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd revisions; 0 when absent)."""
    text = meta_of(obj).get("resourceVersion") or "0"
    try:
        return int(text)
    except ValueError:
        return 0


def _compact(obj: Mapping[str, Any]) -> Obj:
    meta = obj.get("metadata") or {}
    # creationTimestamp: the newest class wins an extendedResourceName clash.
    return {
        "metadata": {"name": meta.get("name", ""), "creationTimestamp": meta.get("creationTimestamp")},
        "spec": obj.get("spec") or {},
    }


def pinned_node(pod: PodBody) -> str | None:
    """The node a pod occupies or is promised to: ``spec.nodeName``, or, once it is no
    longer gated by draco, the single node its required affinity names by
    ``metadata.name`` (how draco pins pods it leaves to kube-scheduler to bind)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    if any(gate.get("name") == SCHEDULING_GATE for gate in spec.get("schedulingGates") or []):
        return None
    if spec.get("schedulerName") == SCHEDULER_NAME:
        return None  # draco binds these itself: unbound, they are promised nowhere
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    names: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        term_names = [
            set(field.get("values") or [])
            for field in term.get("matchFields") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In"
        ]
        if not term_names:
            return None
        names |= set.intersection(*term_names)
    return next(iter(names)) if len(names) == 1 else None


def _occupies_node(pod: PodBody) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed")


def _pools(devices: Iterable[tuple[str, str, str]]) -> frozenset[tuple[str, str]]:
    return frozenset((driver, pool) for driver, pool, _ in devices)


def _slice_pool(compact: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    spec = compact.get("spec") or {}
    return frozenset({(str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", "")))})


def _devices(allocation: AllocationResultBody | None) -> set[tuple[str, str, str]]:
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    return {(r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in results}


class ClaimCache(Protocol):
    """Where the view's claims come from (the operator's claim informer)."""

    def assume(self, obj: ResourceClaimBody) -> bool:
        """Take the API's answer to our write; its handler brings it to the view."""
        ...


@dataclass(slots=True)
class ClaimRecord:
    """What the view keeps of a claim that has (or had) an allocation."""

    key: str
    uid: str
    resource_version: int
    #: ``status.allocation`` as written (results, config, nodeSelector), or None.
    allocation: AllocationResultBody | None
    #: Pod UIDs in ``status.reservedFor``.
    reserved_for: tuple[str, ...] = ()
    deleting: bool = False

    def as_claim(self) -> ResourceClaimBody:
        """The minimal claim shape ``Inventory.mark_allocated`` reads."""
        namespace, _, name = self.key.partition("/")
        if self.allocation is None:
            return {"metadata": {"namespace": namespace, "name": name}, "status": {}}
        return {"metadata": {"namespace": namespace, "name": name}, "status": {"allocation": self.allocation}}


@dataclass(frozen=True, slots=True)
class StaticFit:
    """Nodes that pass the label, affinity and taint checks for one kind of pod."""

    names: list[str]
    #: The same nodes as the allocator takes them.
    nodes: list[Node]
    #: Why each other node fails (one phrase per node).
    reasons: list[str]


@dataclass(slots=True)
class _InFlight:
    allocation: AllocationResultBody


@dataclass
class ClusterView:
    """See the module docstring. All methods are synchronous: callers never yield to the
    event loop between reading the view and marking what they chose."""

    classes: dict[str, Obj] = field(default_factory=dict)
    slices: dict[str, Obj] = field(default_factory=dict)
    taint_rules: dict[str, Obj] = field(default_factory=dict)
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    claims: dict[str, ClaimRecord] = field(default_factory=dict)
    #: The claim informer feeding ``upsert_claim``/``delete_claim``; :meth:`commit` puts
    #: written claims there (None in tests that feed the view by hand).
    claim_cache: ClaimCache | None = None
    #: Set once the initial listing is in; nothing may be allocated before.
    synced: bool = False
    _allocator_nodes: dict[str, Node] = field(default_factory=dict)
    #: Namespace -> labels (namespace selectors of pod affinity terms).
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)
    #: The storage objects the volume rules read, per kind (see :meth:`upsert_storage`).
    storage: dict[StorageKind, dict[str, Mapping[str, Any]]] = field(
        default_factory=lambda: {kind: {} for kind in STORAGE_KINDS}
    )
    #: Pods bound or pinned to a node (from the pod informer), and pods the service
    #: chose a node for and is writing (promised): key -> placement record.
    _placed: dict[str, PodInfo] = field(default_factory=dict)
    _promised: dict[str, PodInfo] = field(default_factory=dict)
    #: Indexes over the effective placement of each pod (placed, else promised).
    _on_node: dict[str, dict[str, PodInfo]] = field(default_factory=dict)
    _in_namespace: dict[str, dict[str, PodInfo]] = field(default_factory=dict)
    _with_affinity: dict[str, PodInfo] = field(default_factory=dict)
    _with_required_anti: dict[str, PodInfo] = field(default_factory=dict)
    #: The affinity terms of placed pods by kind, each distinct term (by identity: the
    #: pods of one template share them) with its pods per node (:meth:`affinity_terms`).
    _terms: dict[str, dict[int, tuple[Any, dict[str, int]]]] = field(
        default_factory=lambda: {k: {} for k in ("required", "required_anti", "preferred", "preferred_anti")}
    )
    _requested: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Per node: the pods' cpu and memory as scoring counts them (LeastAllocated).
    _nonzero: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Image name -> its size and how many nodes list it (ImageLocality).
    _images: dict[str, ImageState] = field(default_factory=dict)
    #: VolumeAttachments by ``spec.nodeName``, built when first asked after a change.
    _attachments_by_node: dict[str, list[Mapping[str, Any]]] | None = None
    _parser: PodInfoParser = field(default_factory=PodInfoParser)
    #: Services' selectors per namespace, and controllers' compiled selectors by
    #: ``namespace/kind/name`` (:meth:`upsert_workload`).
    _services: dict[str, dict[str, Mapping[str, str]]] = field(default_factory=dict)
    _controllers: dict[str, LabelSelector] = field(default_factory=dict)
    _in_flight: dict[str, _InFlight] = field(default_factory=dict)
    _inventory: Inventory | None = None
    #: Per ``PodInfo.placement_key``: nodes passing the node-only rules (by
    #: name) and why the others fail; dropped whenever a node changes.
    _static_fit: dict[str, StaticFit] = field(default_factory=dict)
    _listeners: list[Callable[[], None]] = field(default_factory=list)
    _change_listeners: list[Callable[[CapacityChange], None]] = field(default_factory=list)
    #: How many times a waiting pod might have started to fit (every ``on_capacity`` call).
    #: What changed goes to the ``on_change`` listeners: the allocation's waiting pods keep
    #: the recent changes for the attempts that ran meanwhile.
    capacity_changes: int = 0
    _frozen: int = 0
    _deferred: list[Callable[[], None]] = field(default_factory=list)

    # --- freezing (a search runs off the loop) ---------------------------------------------

    def freeze(self) -> None:
        """Queue every change until :meth:`thaw` (see the module docstring)."""
        self._frozen += 1

    def thaw(self) -> None:
        """Apply the changes queued while frozen, in the order they came."""
        self._frozen -= 1
        if self._frozen:
            return
        while self._deferred:
            pending, self._deferred = self._deferred, []
            for change in pending:
                change()

    @property
    def frozen(self) -> bool:
        return self._frozen > 0

    def current_inventory(self) -> Inventory | None:
        """The inventory if it is built and current (never builds one)."""
        return self._inventory

    # --- listeners ---------------------------------------------------------------------------

    def on_capacity(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a waiting pod might fit now."""
        self._listeners.append(listener)

    def on_change(self, listener: Callable[[CapacityChange], None]) -> None:
        """Call ``listener(change)`` whenever a waiting pod might fit now, with what changed."""
        self._change_listeners.append(listener)

    def _capacity_changed(self, change: CapacityChange) -> None:
        # A pod placed somewhere, or a volume object, changes no node's capacity, only what
        # the inter-pod and volume rules answer: only the change listeners hear of it.
        if change.freed or change.slices or change.classes or change.node_resources or change.everything:
            self.capacity_changes += 1
            for listener in self._listeners:
                listener()
        for change_listener in self._change_listeners:
            change_listener(change)

    # --- classes, slices, rules: any change means a new inventory ------------------------------

    def _inventory_inputs_changed(self, change: CapacityChange) -> None:
        self._inventory = None
        self._capacity_changed(change)

    @_deferred_while_frozen
    def upsert_class(self, obj: Mapping[str, Any]) -> None:
        compact = _compact(obj)
        if self.classes.get(compact["metadata"]["name"]) != compact:
            self.classes[compact["metadata"]["name"]] = compact
            self._inventory_inputs_changed(CapacityChange(classes=frozenset({compact["metadata"]["name"]})))

    @_deferred_while_frozen
    def delete_class(self, name: str) -> None:
        if self.classes.pop(name, None) is not None:
            self._inventory_inputs_changed(CapacityChange(classes=frozenset({name})))

    @_deferred_while_frozen
    def upsert_slice(self, obj: Mapping[str, Any]) -> None:
        compact = _compact(obj)
        previous = self.slices.get(compact["metadata"]["name"])
        if previous != compact:
            self.slices[compact["metadata"]["name"]] = compact
            pools = _slice_pool(compact) | (_slice_pool(previous) if previous is not None else frozenset())
            self._inventory_inputs_changed(CapacityChange(slices=pools))

    @_deferred_while_frozen
    def delete_slice(self, name: str) -> None:
        previous = self.slices.pop(name, None)
        if previous is not None:
            self._inventory_inputs_changed(CapacityChange(slices=_slice_pool(previous)))

    @_deferred_while_frozen
    def upsert_taint_rule(self, obj: Mapping[str, Any]) -> None:
        compact = _compact(obj)
        if self.taint_rules.get(compact["metadata"]["name"]) != compact:
            self.taint_rules[compact["metadata"]["name"]] = compact
            self._inventory_inputs_changed(EVERYTHING)

    @_deferred_while_frozen
    def delete_taint_rule(self, name: str) -> None:
        if self.taint_rules.pop(name, None) is not None:
            self._inventory_inputs_changed(EVERYTHING)

    def inventory(self) -> Inventory:
        """The current inventory, rebuilt if its inputs changed, with every allocated and
        in-flight claim marked."""
        if self._inventory is None:
            self._inventory = Inventory.build(
                classes=self.classes.values(),
                slices=self.slices.values(),
                taint_rules=self.taint_rules.values(),
                allocated_claims=[self._effective(key) for key in self._marked_keys()],
            )
        return self._inventory

    def _marked_keys(self) -> set[str]:
        return {key for key, record in self.claims.items() if record.allocation} | set(self._in_flight)

    def _effective(self, key: str) -> ResourceClaimBody:
        flight = self._in_flight.get(key)
        if flight is not None:
            namespace, _, name = key.partition("/")
            return {
                "metadata": {"namespace": namespace, "name": name},
                "status": {"allocation": flight.allocation},
            }
        record = self.claims.get(key)
        if record is None or record.allocation is None:
            namespace, _, name = key.partition("/")
            return {"metadata": {"namespace": namespace, "name": name}, "status": {}}
        return record.as_claim()

    def _remark(self, key: str) -> None:
        """Tell the inventory (if built) what ``key`` holds now."""
        if self._inventory is not None:
            self._inventory.mark_allocated(self._effective(key))

    # --- nodes ---------------------------------------------------------------------------------

    @_deferred_while_frozen
    def upsert_node(self, obj: NodeBody) -> None:
        info = node_info_from_dict(obj)
        previous = self.nodes.get(info.name)
        if previous != info:
            if previous is not None:
                self._count_images(previous, -1)
            self._count_images(info, 1)
            self.nodes[info.name] = info
            self._allocator_nodes[info.name] = Node(info.name, info.labels)
            self._static_fit.clear()
            self._capacity_changed(EVERYTHING)

    @_deferred_while_frozen
    def delete_node(self, name: str) -> None:
        info = self.nodes.pop(name, None)
        if info is not None:
            self._count_images(info, -1)
            self._allocator_nodes.pop(name, None)
            self._static_fit.clear()
            self._capacity_changed(EVERYTHING)

    def _count_images(self, info: NodeInfo, delta: int) -> None:
        """Count ``info``'s images in (1) or out (-1); a name keeps the size it was first
        listed with until no node lists it (as the scheduler's cache does)."""
        for name, size in info.images.items():
            known = self._images.get(name)
            nodes = (0 if known is None else known.nodes) + delta
            if nodes <= 0:
                self._images.pop(name, None)
            else:
                self._images[name] = ImageState(size if known is None else known.size, nodes)

    def static_fit(self, pod: PodInfo) -> StaticFit:
        """Nodes (in name order) whose labels and taints admit pods like ``pod``, and the
        reasons of the others; cached until a node changes."""
        key = pod.placement_key
        cached = self._static_fit.get(key)
        if cached is None:
            names: list[str] = []
            reasons: list[str] = []
            for name in sorted(self.nodes):
                reason = node_unfit(pod, self.nodes[name])
                if reason is None:
                    names.append(name)
                else:
                    reasons.append(reason)
            cached = StaticFit(names, [self._allocator_nodes[n] for n in names], reasons)
            if len(self._static_fit) > 1024:
                self._static_fit.clear()
            self._static_fit[key] = cached
        return cached

    def allocator_node(self, name: str) -> Node:
        return self._allocator_nodes[name]

    def allocator_nodes(self, names: Iterable[str]) -> list[Node]:
        return [self._allocator_nodes[n] for n in names]

    # --- pods: where they are and what they take --------------------------------------------

    @_deferred_while_frozen
    def upsert_pod(self, obj: PodBody, *, info: PodInfo | None = None) -> None:
        """A pod as last seen; ``info``: its placement record, when the caller has it."""
        key = key_of(obj)
        node = pinned_node(obj) if _occupies_node(obj) else None
        if node is None:
            self._set_placed(key, None)
            return
        if info is None or info.node != node:
            info = self._parser.parse(obj, node=node)
        self._set_placed(key, info)
        self._set_promised(key, None)

    @_deferred_while_frozen
    def delete_pod(self, key: str) -> None:
        self._set_placed(key, None)
        self._set_promised(key, None)

    @_deferred_while_frozen
    def promise_node(self, key: str, info: PodInfo) -> None:
        """The service chose ``info.node`` for pod ``key``: count it there already (as
        kube-scheduler counts a pod it assumed)."""
        self._set_promised(key, info)

    @_deferred_while_frozen
    def withdraw_promise(self, key: str) -> None:
        self._set_promised(key, None)

    def pod_info(
        self, obj: PodBody, *, node: str | None = None, avoid: frozenset[str] = frozenset()
    ) -> PodInfo:
        """The placement record of ``obj`` (parsed with the view's shared memo)."""
        return self._parser.parse(obj, node=node, avoid=avoid)

    def _effective_entry(self, key: str) -> PodInfo | None:
        return self._placed.get(key) or self._promised.get(key)

    def _change_entry(self, key: str, apply: Callable[[], None]) -> None:
        before = self._effective_entry(key)
        apply()
        after = self._effective_entry(key)
        if before is after or before == after:
            return
        if before is not None:
            self._unindex(key, before)
        if after is not None:
            self._index(key, after)
        left = before is not None and (after is None or after.node != before.node)
        self._capacity_changed(CapacityChange(node_resources=left, pods=True))

    def _index(self, key: str, info: PodInfo) -> None:
        node = str(info.node)
        self._on_node.setdefault(node, {})[key] = info
        self._in_namespace.setdefault(info.namespace, {})[key] = info
        if not info.affinity.empty:
            self._with_affinity[key] = info
            if info.affinity.required_anti:
                self._with_required_anti[key] = info
            self._count_terms(info, node, 1)
        requested = self._requested.setdefault(node, {})
        for name, amount in info.requests.items():
            requested[name] = requested.get(name, 0) + amount
        requested["pods"] = requested.get("pods", 0) + 1
        cpu, memory = self._nonzero.get(node, (0, 0))
        self._nonzero[node] = (cpu + info.nonzero_milli_cpu, memory + info.nonzero_memory)

    def _unindex(self, key: str, info: PodInfo) -> None:
        node = str(info.node)
        on_node = self._on_node.get(node)
        if on_node is not None:
            on_node.pop(key, None)
            if not on_node:
                del self._on_node[node]
        in_namespace = self._in_namespace.get(info.namespace)
        if in_namespace is not None:
            in_namespace.pop(key, None)
            if not in_namespace:
                del self._in_namespace[info.namespace]
        if self._with_affinity.pop(key, None) is not None:
            self._count_terms(info, node, -1)
        self._with_required_anti.pop(key, None)
        requested = self._requested.get(node, {})
        for name, amount in info.requests.items():
            requested[name] = requested.get(name, 0) - amount
        requested["pods"] = requested.get("pods", 0) - 1
        cpu, memory = self._nonzero.get(node, (0, 0))
        self._nonzero[node] = (cpu - info.nonzero_milli_cpu, memory - info.nonzero_memory)

    def _count_terms(self, info: PodInfo, node: str, delta: int) -> None:
        """Add (1) or take out (-1) the pod's affinity terms on ``node`` in the term index."""
        for kind, terms in (
            ("required", info.affinity.required),
            ("required_anti", info.affinity.required_anti),
            ("preferred", info.affinity.preferred),
            ("preferred_anti", info.affinity.preferred_anti),
        ):
            index = self._terms[kind]
            for term in terms:
                entry = index.get(id(term))
                if entry is None:
                    if delta < 0:
                        continue
                    entry = index[id(term)] = (term, {})
                nodes = entry[1]
                count = nodes.get(node, 0) + delta
                if count > 0:
                    nodes[node] = count
                else:
                    nodes.pop(node, None)
                    if not nodes:
                        del index[id(term)]

    def affinity_terms(
        self, kind: TermKind, *, exclude_uid: str = ""
    ) -> Iterable[tuple[Any, Mapping[str, int]]]:
        """The placed pods' distinct affinity terms of ``kind`` with their pods per node
        (`draco.scheduling.cluster.AffinityTermIndex`)."""
        excluded = self._placed_by_uid(exclude_uid) if exclude_uid else None
        own = {id(t) for t in getattr(excluded.affinity, kind)} if excluded is not None else set()
        for key, (term, nodes) in self._terms[kind].items():
            if key in own and excluded is not None:
                nodes = dict(nodes)
                left = nodes.get(str(excluded.node), 0) - 1
                if left > 0:
                    nodes[str(excluded.node)] = left
                else:
                    nodes.pop(str(excluded.node), None)
            yield term, nodes

    def _placed_by_uid(self, uid: str) -> PodInfo | None:
        for info in self._with_affinity.values():
            if info.uid == uid:
                return info
        return None

    def _set_placed(self, key: str, entry: PodInfo | None) -> None:
        def apply() -> None:
            if entry is None:
                self._placed.pop(key, None)
            else:
                self._placed[key] = entry

        self._change_entry(key, apply)

    def _set_promised(self, key: str, entry: PodInfo | None) -> None:
        def apply() -> None:
            if entry is None:
                self._promised.pop(key, None)
            else:
                self._promised[key] = entry

        self._change_entry(key, apply)

    # --- namespaces and storage: what the placement rules read besides pods and nodes -----------

    @_deferred_while_frozen
    def upsert_namespace(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        name = str(meta.get("name", ""))
        if self.namespaces.get(name) != labels:
            self.namespaces[name] = labels
            self._capacity_changed(CapacityChange(pods=True))

    @_deferred_while_frozen
    def delete_namespace(self, name: str) -> None:
        self.namespaces.pop(name, None)

    @_deferred_while_frozen
    def upsert_storage(self, kind: StorageKind, key: str, obj: Mapping[str, Any]) -> None:
        """A PersistentVolumeClaim or CSIStorageCapacity (``key`` ``namespace/name``),
        PersistentVolume, StorageClass, CSINode, CSIDriver or VolumeAttachment (``key`` its
        name), as the volume rules read it."""
        objects = self.storage[kind]
        if objects.get(key) != obj:
            objects[key] = obj
            if kind == "volumeattachments":
                self._attachments_by_node = None
            self._capacity_changed(CapacityChange(volumes=True))

    @_deferred_while_frozen
    def delete_storage(self, kind: StorageKind, key: str) -> None:
        if self.storage[kind].pop(key, None) is not None:
            if kind == "volumeattachments":
                self._attachments_by_node = None
            self._capacity_changed(CapacityChange(volumes=True))

    # --- workloads: what kube-scheduler's default spreading groups pods by -----------------------

    @_deferred_while_frozen
    def upsert_workload(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A Service (``kind`` "Service") or a ReplicationController, ReplicaSet or
        StatefulSet, by its ``spec.selector``."""
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        selector = (obj.get("spec") or {}).get("selector")
        if kind == "Service":
            services = self._services.setdefault(namespace, {})
            if selector:
                services[name] = dict(selector)
            else:
                services.pop(name, None)
            return
        if kind == "ReplicationController":  # a plain map, as a Service's
            compiled = label_selector({"matchLabels": selector}) if selector else None
        else:
            compiled = label_selector(selector) if selector is not None else None
        if compiled is None:
            self._controllers.pop(f"{namespace}/{kind}/{name}", None)
        else:
            self._controllers[f"{namespace}/{kind}/{name}"] = compiled

    @_deferred_while_frozen
    def delete_workload(self, kind: str, namespace: str, name: str) -> None:
        if kind == "Service":
            self._services.get(namespace, {}).pop(name, None)
        else:
            self._controllers.pop(f"{namespace}/{kind}/{name}", None)

    def service_selectors(self, namespace: str) -> Collection[Mapping[str, str]]:
        return (self._services.get(namespace) or {}).values()

    def controller_selector(self, namespace: str, kind: str, name: str) -> LabelSelector | None:
        return self._controllers.get(f"{namespace}/{kind}/{name}")

    # --- ClusterState (what draco.scheduling.framework's rules read) ----------------------------

    def node_names(self) -> Collection[str]:
        return self.nodes.keys()

    def node(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)

    def pods_on(self, node: str) -> Collection[PodInfo]:
        return (self._on_node.get(node) or _NO_PODS).values()

    def pods_in(self, namespace: str) -> Collection[PodInfo]:
        return (self._in_namespace.get(namespace) or _NO_PODS).values()

    def pods_with_affinity(self) -> Collection[PodInfo]:
        return self._with_affinity.values()

    def pods_with_required_anti_affinity(self) -> Collection[PodInfo]:
        return self._with_required_anti.values()

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.namespaces.get(namespace)

    def requested(self, node: str) -> Mapping[str, int]:
        return self._requested.get(node) or _NO_REQUESTS

    def requested_nonzero(self, node: str) -> tuple[int, int]:
        return self._nonzero.get(node, (0, 0))

    def image_state(self, name: str) -> ImageState | None:
        return self._images.get(name)

    def persistent_volume_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.storage["persistentvolumeclaims"].get(f"{namespace}/{name}")

    def persistent_volume(self, name: str) -> Mapping[str, Any] | None:
        return self.storage["persistentvolumes"].get(name)

    def persistent_volumes(self) -> Iterable[Mapping[str, Any]]:
        return self.storage["persistentvolumes"].values()

    def storage_class(self, name: str) -> Mapping[str, Any] | None:
        return self.storage["storageclasses"].get(name)

    def csi_node(self, name: str) -> Mapping[str, Any] | None:
        return self.storage["csinodes"].get(name)

    def csi_driver(self, name: str) -> Mapping[str, Any] | None:
        return self.storage["csidrivers"].get(name)

    def csi_storage_capacities(self) -> Iterable[Mapping[str, Any]]:
        return self.storage["csistoragecapacities"].values()

    def volume_attachments(self, node: str) -> Iterable[Mapping[str, Any]]:
        if self._attachments_by_node is None:
            by_node: dict[str, list[Mapping[str, Any]]] = {}
            for attachment in self.storage["volumeattachments"].values():
                by_node.setdefault(str((attachment.get("spec") or {}).get("nodeName") or ""), []).append(
                    attachment
                )
            self._attachments_by_node = by_node
        return self._attachments_by_node.get(node, ())

    # --- claims ----------------------------------------------------------------------------------

    @_deferred_while_frozen
    def upsert_claim(self, obj: ResourceClaimBody) -> None:
        """A claim as a watch event (or a write's response) shows it."""
        meta = meta_of(obj)
        key = key_of(obj)
        version = resource_version(obj)
        record = self.claims.get(key)
        uid = meta.get("uid", "")
        if record is not None and record.uid == uid and version < record.resource_version:
            return  # older than what we already know (our own write, typically)
        status = obj.get("status") or {}
        allocation = status.get("allocation") or None
        reserved = tuple(r.get("uid", "") for r in reserved_for(obj))
        if allocation is None and record is None:
            return  # never allocated: nothing of it matters here
        previous = record.allocation if record is not None else None
        if allocation is None:
            del self.claims[key]
        else:
            self.claims[key] = ClaimRecord(
                key=key,
                uid=uid,
                resource_version=version,
                allocation=allocation,
                reserved_for=reserved,
                deleting=bool(meta.get("deletionTimestamp")),
            )
        if key not in self._in_flight and previous != allocation:
            self._remark(key)
            if previous is not None:
                self._capacity_changed(CapacityChange(freed=_pools(_devices(previous))))

    @_deferred_while_frozen
    def delete_claim(self, key: str) -> None:
        record = self.claims.pop(key, None)
        if record is not None and key not in self._in_flight:
            self._remark(key)
            self._capacity_changed(CapacityChange(freed=_pools(_devices(record.allocation))))

    @_deferred_while_frozen
    def begin(self, allocations: Mapping[str, AllocationResultBody]) -> None:
        """Mark chosen allocations (claim key -> ``status.allocation``) as in use."""
        for key, allocation in allocations.items():
            self._in_flight[key] = _InFlight(allocation)
            self._remark(key)

    @_deferred_while_frozen
    def commit(self, written: ResourceClaimBody) -> None:
        """The claim was written (``written`` is the API's answer): it is now what counts.

        The answer goes into the claim cache, whose handler brings it here (unless the
        cache knows a newer state, or knows the claim deleted); then the in-flight hold, if
        any, ends and the record's allocation counts instead.
        """
        key = key_of(written)
        if self.claim_cache is not None:
            self.claim_cache.assume(copy.copy(written))
        else:
            self.upsert_claim(written)
        flight = self._in_flight.pop(key, None)
        if flight is None:
            return
        self._remark(key)
        record = self.claims.get(key)
        released = _devices(flight.allocation) - _devices(record.allocation if record is not None else None)
        if released:  # the hold ended on devices the claim does not hold
            self._capacity_changed(CapacityChange(freed=_pools(released)))

    @_deferred_while_frozen
    def abandon(self, keys: Iterable[str]) -> None:
        """Chosen allocations that were not written: what the claims hold counts again."""
        released: set[tuple[str, str, str]] = set()
        for key in keys:
            flight = self._in_flight.pop(key, None)
            if flight is not None:
                self._remark(key)
                released |= _devices(flight.allocation)
        if released:
            self._capacity_changed(CapacityChange(freed=_pools(released)))

    def in_flight(self) -> set[str]:
        return set(self._in_flight)

    def held_devices(self) -> dict[tuple[str, str, str], list[str]]:
        """Device -> claim keys holding it (written and in flight): a diagnostic for tests,
        where more than one key on a device that is not shareable is a double allocation."""
        holders: dict[tuple[str, str, str], list[str]] = {}
        for key in sorted(self._marked_keys()):
            allocation = (self._effective(key).get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                if result.get("adminAccess") or result.get("shareID"):
                    continue
                device = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
                holders.setdefault(device, []).append(key)
        return holders
