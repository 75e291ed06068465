"""Preemption, kube-scheduler's PostFilter (DefaultPreemption), as a value; pure.

A pod whose plan is :class:`~draco.scheduling.podplan.Unplaced` may make room by evicting
pods of lower priority. :func:`preempt` answers, from the same caches the plan read (the
cluster, the allocator's inventory, the allocated claims and who holds them, the
PodDisruptionBudgets), a :class:`Preemption` (the nominated node, each victim and why) or
a :class:`NoPreemption` (why none), by upstream's rules
(``pkg/scheduler/framework/preemption``, ``plugins/defaultpreemption``):

- a pod with ``preemptionPolicy: Never`` evicts nobody; a pod nominated to a node where a
  pod of lower priority is still terminating waits for it (it evicted it already);
- only nodes the node-only rules admit are tried (a failure no eviction can mend, upstream's
  ``UnschedulableAndUnresolvable``);
- per node, every pod of lower priority is removed; when the pod does not fit even then,
  the node is no candidate; else the victims are reprieved one by one, the most important
  first (higher priority, then earlier start), those whose eviction would violate a
  PodDisruptionBudget before the others: a pod stays when the preemptor still fits without
  its eviction;
- the node is chosen by, in order: fewest PDB violations, the lowest priority of its most
  important victim, the smallest sum of victims' priorities, the fewest victims, the
  latest start among its most important victims, the first such node;
- nothing is ever preempted for a pod of equal or lower priority; a pod's priority is
  ``spec.priority`` as admission resolved it (a PriorityClass that has gone since leaves
  that number; a pod without one counts 0, upstream's ``PodPriority``).

Devices, draco's part: a victim's claim frees its devices only when no pod that stays
is reserved on it (a shared claim stays allocated while one of its consumers remains;
an admin-access claim frees nothing, it takes nothing). A pod of a group is a victim only
with its whole group (`draco.scheduling.groups`: all its placed members, on any node; the
group is evicted only when every member has a lower priority than the preemptor), as
upstream's workload-aware preemption proposes. A group preempts as one
(:func:`preempt_group`): every member must fit after the evictions, or nothing is evicted.

Whether the pod fits is :func:`draco.scheduling.podplan.plan_pod` on the cluster without
the victims (:class:`Without`) and the inventory with the freed claims released; the
inventory is given back as it came before :func:`preempt` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from draco.allocator.inventory import Inventory
from draco.api.bodies import ResourceClaimBody
from draco.scheduling.cluster import ClusterState
from draco.scheduling.groups import group_of_labels
from draco.scheduling.labels import LabelSelector, label_selector
from draco.scheduling.plan import AllocatorNodes
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.podplan import PodPlan, PodRequest, Unplaced, plan_pod
from draco.scheduling.without import Without

__all__ = [
    "DisruptionBudget",
    "HeldClaim",
    "NoPreemption",
    "Preemption",
    "Victim",
    "budget_of",
    "eligible",
    "preempt",
    "preempt_group",
    "unplaced_reason",
]

#: Why a pod is a victim, and why none is chosen (the Events' and `draco simulate`'s words).
LOWER_PRIORITY: Final = "priority {victim} is lower than the preemptor's {preemptor}"


@dataclass(frozen=True, slots=True)
class HeldClaim:
    """An allocated claim as preemption reads it: its key, the body the inventory marks
    (its allocation) and the UIDs of its consumers (``status.reservedFor``)."""

    key: str
    claim: ResourceClaimBody
    reserved_for: frozenset[str]


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as preemption reads it (upstream's ``filterPodsWithPDBViolation``):
    the pods it selects in its namespace, ``status.disruptionsAllowed``, and the pods
    already counted as disrupted (``status.disruptedPods``: not counted again)."""

    namespace: str
    name: str
    selector: LabelSelector
    allowed: int
    disrupted: frozenset[str] = frozenset()
    #: An empty or missing selector selects nothing (policy/v1's rule).
    selects_nothing: bool = False

    def covers(self, pod: PodInfo) -> bool:
        return (
            pod.namespace == self.namespace
            and not self.selects_nothing
            and pod.name not in self.disrupted
            and self.selector.matches(pod.labels)
        )


def budget_of(body: Mapping[str, Any]) -> DisruptionBudget:
    """A ``policy/v1`` PodDisruptionBudget's JSON as :class:`DisruptionBudget`."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    selector = spec.get("selector")
    return DisruptionBudget(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        selector=label_selector(selector),
        allowed=int(status.get("disruptionsAllowed") or 0),
        disrupted=frozenset((status.get("disruptedPods") or {}).keys()),
        selects_nothing=not selector,
    )


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod to evict, and why: its priority against the preemptor's, the PDB its
    eviction violates (empty: none), its group (empty: alone), the claims it frees."""

    pod: PodInfo
    why: str
    violates: str = ""
    group: str = ""
    frees: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.pod.key


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict :attr:`victims`, then place the pod on :attr:`node` (its ``nominatedNodeName``);
    :attr:`plan`: the pod's plan once they are gone (what it would take there)."""

    key: str
    node: str
    victims: tuple[Victim, ...]
    violations: int = 0
    plan: PodPlan | None = None

    def describe(self) -> str:
        """The victims in one line (the preemptor's Event)."""
        names = ", ".join(v.key for v in self.victims)
        return f"preempting {len(self.victims)} pod(s) on node {self.node}: {names}"


@dataclass(frozen=True, slots=True)
class NoPreemption:
    """No eviction makes room: why (appended to the FailedScheduling message, as
    upstream appends its ``preemption: ...`` words). ``waiting``: the pod's victims are
    still terminating, so it nominated a node already and waits for them."""

    key: str
    reason: str
    waiting: bool = False


# --- the devices victims free -----------------------------------------------------------------


@dataclass
class _Devices:
    """The inventory with the claims of removed pods released: a claim is freed when every
    consumer of it is removed; :meth:`restore` marks them all again."""

    inventory: Inventory
    claims: Sequence[HeldClaim]
    by_uid: dict[str, list[HeldClaim]] = field(default_factory=dict)
    released: dict[str, HeldClaim] = field(default_factory=dict)
    #: Allocations a group's members placed before took (:meth:`take`), marked meanwhile.
    taken: list[ResourceClaimBody] = field(default_factory=list)

    def __post_init__(self) -> None:
        for claim in self.claims:
            for uid in claim.reserved_for:
                self.by_uid.setdefault(uid, []).append(claim)

    def freed_by(self, removed: Collection[str], pods: Iterable[PodInfo]) -> tuple[str, ...]:
        """The claims the removal of ``pods`` frees (every consumer among ``removed``)."""
        found = {
            claim.key
            for pod in pods
            for claim in self.by_uid.get(pod.uid, ())
            if claim.reserved_for <= set(removed)
        }
        return tuple(sorted(found))

    def apply(self, removed: Collection[str]) -> None:
        """Release exactly the claims ``removed`` frees, mark the others again."""
        candidates = {claim.key: claim for uid in removed for claim in self.by_uid.get(uid, ())}
        freed = {key: c for key, c in candidates.items() if c.reserved_for <= set(removed)}
        for key in [k for k in self.released if k not in freed]:
            self.inventory.mark_allocated(self.released.pop(key).claim)
        for key, claim in freed.items():
            if key not in self.released:
                self.inventory.release(claim.claim)
                self.released[key] = claim

    def take(self, allocations: Mapping[str, Any]) -> None:
        for key, allocation in allocations.items():
            namespace, _, name = key.partition("/")
            body: ResourceClaimBody = {
                "metadata": {"namespace": namespace, "name": name},
                "status": {"allocation": allocation},
            }
            self.inventory.mark_allocated(body)
            self.taken.append(body)

    def restore(self) -> None:
        for body in self.taken:
            self.inventory.release(body)
        self.taken.clear()
        for claim in self.released.values():
            self.inventory.mark_allocated(claim.claim)
        self.released.clear()


# --- the search -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Unit:
    """What is evicted together: one pod, or every placed member of its group."""

    pods: tuple[PodInfo, ...]
    group: str = ""

    @property
    def priority(self) -> int:
        return max(p.priority for p in self.pods)

    @property
    def started(self) -> str:
        return min((p.started for p in self.pods), key=_start_key)


def _start_key(started: str) -> tuple[int, str]:
    """A pod not started yet counts as started last (upstream: now)."""
    return (1, "") if not started else (0, started)


@dataclass(frozen=True, slots=True)
class _Candidate:
    node: str
    victims: tuple[Victim, ...]
    units: tuple[_Unit, ...]
    violations: int
    plan: PodPlan


@dataclass
class _Search:
    """One preemption search's inputs, shared by the nodes it tries."""

    request: PodRequest
    cluster: Without
    devices: _Devices
    allocator_nodes: AllocatorNodes
    budgets: Sequence[DisruptionBudget]
    exclude: frozenset[str] = frozenset()

    def fits(self, node: str) -> PodPlan | None:
        """The pod's plan on ``node`` in the cluster as it now stands, or None."""
        self.devices.apply(self.cluster.removed.keys())
        plan, _ = plan_pod(
            self.request,
            cluster=self.cluster,
            names=[node],
            reasons=[],
            inventory=self.devices.inventory,
            allocator_nodes=self.allocator_nodes,
        )
        return plan if isinstance(plan, PodPlan) and plan.node == node else None

    def units_on(self, node: str) -> list[_Unit] | None:
        """Every unit of lower priority with a pod on ``node``; None when a pod of its group
        is not of lower priority (that group cannot be evicted, the node is left as is)."""
        preemptor = self.request.info.priority
        units: dict[str, _Unit] = {}
        for pod in self.cluster.pods_on(node):
            if pod.uid in self.exclude or pod.priority >= preemptor:
                continue
            ref = group_of_labels(pod.namespace, pod.labels, {})
            if ref is None:
                units[pod.uid] = _Unit((pod,))
                continue
            if ref.key in units:
                continue
            members = tuple(
                p
                for p in self.cluster.pods_in(pod.namespace)
                if (g := group_of_labels(p.namespace, p.labels, {})) is not None and g.key == ref.key
            )
            if any(p.priority >= preemptor or p.uid in self.exclude for p in members):
                continue  # the group stays whole
            units[ref.key] = _Unit(members, ref.key)
        return list(units.values())

    def violating(self, units: Sequence[_Unit]) -> dict[int, str]:
        """Index -> the PDB evicting that unit violates, in the order the units go
        (upstream's ``filterPodsWithPDBViolation``: each eviction takes one allowed
        disruption of each budget covering the pod)."""
        allowed = [b.allowed for b in self.budgets]
        found: dict[int, str] = {}
        for index, unit in enumerate(units):
            for pod in unit.pods:
                for i, budget in enumerate(self.budgets):
                    if budget.covers(pod):
                        allowed[i] -= 1
                        if allowed[i] < 0:
                            found.setdefault(index, f"{budget.namespace}/{budget.name}")
        return found

    def candidate(self, node: str) -> _Candidate | None:
        """upstream's ``SelectVictimsOnNode``: remove all lower-priority units, then
        reprieve as many as possible, PDB-violating ones first."""
        units = self.units_on(node)
        if not units:
            return None
        before = dict(self.cluster.removed)
        try:
            for unit in units:
                for pod in unit.pods:
                    self.cluster.removed[pod.uid] = pod
            if self.fits(node) is None:
                return None
            ordered = sorted(units, key=lambda u: (-u.priority, _start_key(u.started)))
            pdb = self.violating(ordered)
            violating = [u for i, u in enumerate(ordered) if i in pdb]
            rest = [u for i, u in enumerate(ordered) if i not in pdb]
            kept: list[tuple[_Unit, str]] = []
            violations = 0
            for unit, breaks in [*((u, pdb[ordered.index(u)]) for u in violating), *((u, "") for u in rest)]:
                for pod in unit.pods:
                    del self.cluster.removed[pod.uid]
                if self.fits(node) is not None:
                    continue  # reprieved
                for pod in unit.pods:
                    self.cluster.removed[pod.uid] = pod
                kept.append((unit, breaks))
                violations += 1 if breaks else 0
            plan = self.fits(node)
            assert plan is not None
            victims = self._victims(kept)
            return _Candidate(node, victims, tuple(u for u, _ in kept), violations, plan)
        finally:
            self.cluster.removed = before
            self.devices.apply(before.keys())

    def _victims(self, kept: Sequence[tuple[_Unit, str]]) -> tuple[Victim, ...]:
        removed = self.cluster.removed.keys()
        preemptor = self.request.info.priority
        victims = [
            Victim(
                pod,
                LOWER_PRIORITY.format(victim=pod.priority, preemptor=preemptor)
                + (f", evicted with its group {unit.group}" if unit.group else "")
                + (f"; violates PodDisruptionBudget {breaks}" if breaks else ""),
                violates=breaks,
                group=unit.group,
                frees=self.devices.freed_by(removed, [pod]),
            )
            for unit, breaks in kept
            for pod in unit.pods
        ]
        return tuple(sorted(victims, key=lambda v: v.key))


def _order(candidate: _Candidate) -> tuple[Any, ...]:
    """upstream's ``pickOneNodeForPreemption``, smallest first."""
    top = max(u.priority for u in candidate.units)
    earliest_top = min((u.started for u in candidate.units if u.priority == top), key=_start_key)
    # Latest start first: negate by sorting on the inverse of the key.
    started_rank = _start_key(earliest_top)
    return (
        candidate.violations,
        top,
        sum(v.pod.priority for v in candidate.victims),
        len(candidate.victims),
        (-started_rank[0], _Inverse(started_rank[1])),
    )


@dataclass(frozen=True, slots=True, order=False)
class _Inverse:
    """A string that sorts in reverse."""

    text: str

    def __lt__(self, other: _Inverse) -> bool:
        return self.text > other.text

    def __gt__(self, other: _Inverse) -> bool:
        return self.text < other.text


def eligible(request: PodRequest, cluster: ClusterState) -> NoPreemption | None:
    """upstream's ``PodEligibleToPreemptOthers``: None when the pod may preempt."""
    info = request.info
    if info.never_preempts:
        return NoPreemption(request.key, "not eligible due to preemptionPolicy=Never")
    nominated = ((request.pod or {}).get("status") or {}).get("nominatedNodeName")
    if nominated and any(p.terminating and p.priority < info.priority for p in cluster.pods_on(nominated)):
        return NoPreemption(
            request.key,
            f"not eligible: pods of lower priority on the nominated node {nominated} are still terminating",
            waiting=True,
        )
    return None


@contextmanager
def _searching(
    request: PodRequest,
    *,
    cluster: ClusterState | Without,
    inventory: Inventory,
    claims: Sequence[HeldClaim],
    allocator_nodes: AllocatorNodes,
    budgets: Sequence[DisruptionBudget],
    exclude: frozenset[str] = frozenset(),
) -> Iterator[_Search]:
    without = cluster if isinstance(cluster, Without) else Without(cluster)
    devices = _Devices(inventory, claims)
    search = _Search(request, without, devices, allocator_nodes, budgets, exclude)
    try:
        yield search
    finally:
        devices.restore()


def preempt(
    request: PodRequest,
    *,
    cluster: ClusterState,
    names: Sequence[str],
    inventory: Inventory,
    claims: Sequence[HeldClaim],
    allocator_nodes: AllocatorNodes,
    budgets: Sequence[DisruptionBudget] = (),
) -> Preemption | NoPreemption:
    """The preemption for ``request``, a pod that planned Unplaced (see the module
    docstring). ``names``: the nodes the node-only rules admit it to; ``claims``: every
    allocated claim with its consumers; ``budgets``: the PodDisruptionBudgets."""
    refusal = eligible(request, cluster)
    if refusal is not None:
        return refusal
    with _searching(
        request,
        cluster=cluster,
        inventory=inventory,
        claims=claims,
        allocator_nodes=allocator_nodes,
        budgets=budgets,
    ) as search:
        return _best(request, search, names)


def _best(request: PodRequest, search: _Search, names: Sequence[str]) -> Preemption | NoPreemption:
    found = [c for name in names if (c := search.candidate(name)) is not None]
    if not found:
        return NoPreemption(
            request.key,
            f"0/{len(search.cluster.node_names())} nodes are available: "
            "no preemption victims found for incoming pod",
        )
    best = min(found, key=_order)
    return Preemption(request.key, best.node, best.victims, best.violations, best.plan)


def preempt_group(
    requests: Sequence[PodRequest],
    *,
    cluster: ClusterState,
    names: Callable[[PodRequest], Sequence[str]],
    inventory: Inventory,
    claims: Sequence[HeldClaim],
    allocator_nodes: AllocatorNodes,
    budgets: Sequence[DisruptionBudget] = (),
) -> tuple[Preemption, ...] | NoPreemption:
    """A group's preemption, as one: each member in turn placed (where it fits without
    evictions) or given its preemption, in the cluster as the members before it left it
    (their victims gone, their pods and devices counted); every member's answer, or the
    first member's reason for none (then nothing is evicted)."""
    without = Without(cluster)
    members = frozenset(r.info.uid for r in requests)
    answers: list[Preemption] = []
    with _searching(
        requests[0],
        cluster=without,
        inventory=inventory,
        claims=claims,
        allocator_nodes=allocator_nodes,
        budgets=budgets,
        exclude=members,
    ) as search:
        for request in requests:
            refusal = eligible(request, cluster)
            if refusal is not None:
                return refusal
            search.request = request
            search.devices.apply(without.removed.keys())
            plain = _plain_fit(search, names(request))
            answer = (
                Preemption(request.key, str(plain.node), (), 0, plain)
                if plain is not None
                else _best(request, search, names(request))
            )
            if isinstance(answer, NoPreemption):
                return NoPreemption(answer.key, f"the group cannot be placed whole: {answer.reason}")
            for victim in answer.victims:
                without.removed[victim.pod.uid] = victim.pod
            search.devices.apply(without.removed.keys())
            assert answer.plan is not None
            search.devices.take(answer.plan.allocations)
            without.added.append(answer.plan.placed)
            answers.append(answer)
    return tuple(answers)


def _plain_fit(search: _Search, names: Sequence[str]) -> PodPlan | None:
    """The member's plan without evictions (any of ``names``), or None."""
    plan, _ = plan_pod(
        search.request,
        cluster=search.cluster,
        names=names,
        reasons=[],
        inventory=search.devices.inventory,
        allocator_nodes=search.allocator_nodes,
    )
    return plan if isinstance(plan, PodPlan) and plan.node is not None else None


def unplaced_reason(unplaced: Unplaced, answer: NoPreemption) -> str:
    """The FailedScheduling message with preemption's answer appended, as upstream's."""
    return f"{unplaced.reason} preemption: {answer.reason}."
