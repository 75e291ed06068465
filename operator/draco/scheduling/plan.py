"""The placement decision for one pod, pure: which node, which devices, or why none.

Inputs: the pod (its :class:`PodInfo`), the cluster as the rules read
it (:class:`ClusterState`), the nodes its label, affinity and taint checks admit (by name:
the operator caches those per kind of pod), the claims already allocated to it (their
node selectors narrow the nodes) and the claims to allocate, the allocator's inventory,
the policy, and where kube-scheduler's sampling starts. Output: a
:class:`~draco.allocator.Placement` or a :class:`~draco.allocator.NoPlacement`, and how many
nodes the sampling examined. Nothing here writes or waits: the operator's allocation
(`draco.operator.scheduler`) marks the choice in flight and writes it, and `draco
simulate` prints it, from the same decision.

The order (`draco.scheduling.nodeorder`): kube-scheduler's profile
(`draco.scheduling.profile`) filters nodes as the sampling reaches them, its scores order
the sample, the search (`draco.allocator.place`) takes the first node of that order where
the claims fit. A pod with a prioritized list (``firstAvailable``) is searched on up to
:data:`PRIORITIZED_CANDIDATES` sampled nodes and gets the DynamicResources score added
(`draco.scheduling.prioritizedlist`), as kube-scheduler scores nodes by the alternatives
that fit there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from draco.allocator import NoPlacement, Placement, SearchBudget, place
from draco.allocator.inventory import Inventory
from draco.allocator.nodeselect import node_selector_matches
from draco.allocator.outcome import Node
from draco.allocator.place import device_prefilter
from draco.api.bodies import NodeSelectorBody, ResourceClaimBody
from draco.scheduling.cluster import ClusterState
from draco.scheduling.nodeorder import PlacementPolicy, Sample, sample_and_score
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.prioritizedlist import has_prioritized_lists, normalized, prioritized_list_score
from draco.scheduling.profile import DYNAMIC_RESOURCES, prepare

__all__ = [
    "ALLOCATED_SELECTOR_REASON",
    "PRIORITIZED_CANDIDATES",
    "Candidates",
    "Choice",
    "allocated_selectors",
    "candidates",
    "choose",
]

#: For a pod with a prioritized list, on how many sampled nodes that fit its claims the
#: prioritized-list score is compared (the search runs once per node compared).
PRIORITIZED_CANDIDATES: Final = 16
#: A node refused because a claim of the pod is allocated where the node is not.
ALLOCATED_SELECTOR_REASON: Final = "node(s) didn't match the node selector of an allocated claim"

AllocatorNodes = Callable[[Sequence[str]], list[Node]]


class _NodesByName(Sequence[Node]):
    """``names`` as the allocator's nodes, made as the search reaches them: it usually
    stops at the first few, and building every node of a large cluster per pod costs."""

    __slots__ = ("_make", "_names")

    def __init__(self, names: Sequence[str], make: AllocatorNodes) -> None:
        self._names = names
        self._make = make

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._make(self._names[index])
        return self._make([self._names[index]])[0]

    def __iter__(self) -> Iterator[Node]:
        for name in self._names:
            yield self._make([name])[0]


@dataclass(frozen=True, slots=True)
class Choice:
    """The decision, and how far the sampling went (``examined`` of ``count`` names)."""

    outcome: Placement | NoPlacement
    examined: int = 0
    count: int = 0


@dataclass(frozen=True, slots=True)
class Candidates:
    """Every node that admits the pod (best first by the policy), why each other node does
    not (one phrase per node), the rules that refused some node, and the sampling's reach."""

    names: list[str]
    reasons: list[str]
    refused_by: frozenset[str]
    examined: int = 0


def allocated_selectors(allocated: Sequence[ResourceClaimBody]) -> list[NodeSelectorBody]:
    """The node selectors of allocated claims (None = available everywhere, left out)."""
    found = (((c.get("status") or {}).get("allocation") or {}).get("nodeSelector") for c in allocated)
    return [s for s in found if s is not None]


def _matching(
    cluster: ClusterState, names: Sequence[str], selectors: Sequence[Mapping[str, Any]]
) -> list[str]:
    if not selectors:
        return list(names)
    kept = []
    for name in names:
        info = cluster.node(name)
        labels = info.labels if info is not None else {}
        if all(node_selector_matches(s, name=name, labels=labels) for s in selectors):
            kept.append(name)
    return kept


def choose(
    *,
    pod: PodInfo,
    cluster: ClusterState,
    names: Sequence[str],
    allocated: Sequence[ResourceClaimBody],
    pending: Sequence[ResourceClaimBody],
    inventory: Inventory,
    allocator_nodes: AllocatorNodes,
    policy: PlacementPolicy = "scheduler",
    start: int = 0,
    budget: SearchBudget | None = None,
) -> Choice:
    """The node and devices for ``pending`` among ``names`` (see the module docstring)."""
    names = _matching(cluster, names, allocated_selectors(allocated))
    if not names:
        return Choice(NoPlacement(explanation="", per_node={}))
    prepared = prepare(pod, cluster)
    if prepared.refusal is not None:
        return Choice(NoPlacement(explanation="", per_node={}))
    budget = budget or SearchBudget()

    def admits(name: str) -> bool:
        info = cluster.node(name)
        return info is not None and prepared.unfit(info) is None

    if policy == "first":
        outcome = place(
            inventory=inventory,
            nodes=allocator_nodes(names),
            claims=pending,
            policy="first",
            budget=budget,
            admits=lambda node: admits(node.name),
        )
        return Choice(outcome)
    devices = device_prefilter(inventory, pending)
    sample = sample_and_score(
        pod=pod,
        cluster=cluster,
        names=names,
        start=start,
        all_nodes=len(cluster.node_names()),
        feasible=lambda name: devices.may_fit(name) and admits(name),
        policy=policy,
        allocated_on_node=inventory.allocated_on_node,
    )
    if has_prioritized_lists(pending) and len(sample.scored) > 1:
        best = _best_prioritized(inventory, pending, sample, budget, allocator_nodes)
        if best is not None:
            return Choice(best, sample.examined, len(names))
    outcome = place(
        inventory=inventory,
        nodes=_NodesByName([*sample.scored, *sample.rest], allocator_nodes),
        claims=pending,
        policy="given",
        budget=budget,
        admits=lambda node: node.name in sample.scores or admits(node.name),
    )
    return Choice(outcome, sample.examined, len(names))


def _best_prioritized(
    inventory: Inventory,
    pending: Sequence[ResourceClaimBody],
    sample: Sample,
    budget: SearchBudget,
    allocator_nodes: AllocatorNodes,
) -> Placement | None:
    """Among the sampled nodes (the best-scored first, at most PRIORITIZED_CANDIDATES
    where the claims fit), the one whose total score with the prioritized-list score added
    is highest; None when no sampled node fits."""
    fits: list[Placement] = []
    for name in sample.scored:
        result = place(
            inventory=inventory, nodes=allocator_nodes([name]), claims=pending, policy="given", budget=budget
        )
        if isinstance(result, Placement):
            fits.append(result)
            if len(fits) >= PRIORITIZED_CANDIDATES:
                break
    if not fits:
        return None
    raw = [prioritized_list_score(pending, cast(Mapping[str, Any], fit.results.json())) for fit in fits]
    bonus = normalized(raw)
    totals = [
        sample.scores[fit.node] + DYNAMIC_RESOURCES.weight * extra
        for fit, extra in zip(fits, bonus, strict=True)
    ]
    best = max(range(len(fits)), key=lambda i: (totals[i], -i))
    return fits[best]


def candidates(
    *,
    pod: PodInfo,
    cluster: ClusterState,
    names: Sequence[str],
    reasons: Sequence[str],
    allocated: Sequence[ResourceClaimBody],
    allocated_on_node: Callable[[str], int] | None = None,
    policy: PlacementPolicy = "scheduler",
    start: int = 0,
) -> Candidates:
    """Every node of ``names`` that admits the pod by kube-scheduler's rules and its
    allocated claims, best first; ``reasons``: why the nodes left out of ``names`` fail."""
    selectors = allocated_selectors(allocated)
    prepared = prepare(pod, cluster)
    admitted: list[str] = []
    why = list(reasons)
    refused_by: set[str] = set()
    for name in names:
        info = cluster.node(name)
        if info is None:
            continue
        if selectors and not all(node_selector_matches(s, name=name, labels=info.labels) for s in selectors):
            why.append(ALLOCATED_SELECTOR_REASON)
            continue
        refused = prepared.unfit_rule(info)
        if refused is None:
            admitted.append(name)
        else:
            refused_by.add(refused[0])
            why.append(refused[1])
    if policy == "first" or len(admitted) < 2:
        return Candidates(admitted, why, frozenset(refused_by))
    sample = sample_and_score(
        pod=pod,
        cluster=cluster,
        names=admitted,
        start=start,
        all_nodes=len(cluster.node_names()),
        feasible=lambda _: True,
        policy=policy,
        allocated_on_node=allocated_on_node,
    )
    return Candidates([*sample.scored, *sample.rest], why, frozenset(refused_by), sample.examined)
