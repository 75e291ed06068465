"""In which order draco tries nodes for a pod: kube-scheduler's sampling and scoring.

kube-scheduler does not score every feasible node of a large cluster: it filters nodes
starting where its previous pod stopped (``nextStartNodeIndex``), stops once it has found
``numFeasibleNodesToFind`` of them (all nodes below 100; else an adaptive percentage,
50 % minus one per 125 nodes, at least 5 % and at least 100 nodes), scores those, and
binds the best. draco does the same with one difference that keeps it fast: whether a
node's devices can hold the pod's claims is decided by a search, so the sampling filter
uses the selection indexes' upper bound (`draco.allocator.place.device_prefilter`) and
the search then runs on the sampled nodes from the best score down, stopping at the
first that fits. That is the node kube-scheduler would bind among the same sample, since
a node whose search fails is one its DynamicResources filter would have removed. When no
sampled node fits, the nodes after the sample are tried in turn (filtered as they come).

The order is pure: the caller keeps the start index from one pod to the next (:class:`NodeOrder`).

Policies: ``scheduler`` (the default) orders the sample by kube-scheduler's default
scores (`profile.total_scores`); ``pack`` and ``spread`` put nodes with more (fewer)
allocated devices first and use the scores between equals; ``first`` skips sampling and
scoring and takes nodes by name (the fastest; it departs from kube-scheduler's
preferences, its filters still hold). Ties go to the node that comes first by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from draco.scheduling.cluster import ClusterState
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.profile import total_scores

__all__ = [
    "MIN_FEASIBLE_NODES",
    "MIN_FEASIBLE_PERCENTAGE",
    "NodeOrder",
    "PlacementPolicy",
    "Sample",
    "num_feasible_nodes_to_find",
    "sample_and_score",
]

PlacementPolicy = Literal["scheduler", "pack", "spread", "first"]

#: upstream's minFeasibleNodesToFind and minFeasibleNodesPercentageToFind.
MIN_FEASIBLE_NODES: Final = 100
MIN_FEASIBLE_PERCENTAGE: Final = 5


def num_feasible_nodes_to_find(all_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes kube-scheduler looks for before it scores (``percentage``
    0: its adaptive default)."""
    if all_nodes < MIN_FEASIBLE_NODES:
        return all_nodes
    if percentage <= 0:
        percentage = max(50 - all_nodes // 125, MIN_FEASIBLE_PERCENTAGE)
    return max(all_nodes * percentage // 100, MIN_FEASIBLE_NODES)


@dataclass(frozen=True, slots=True)
class Sample:
    """The nodes to try, best first: the scored sample, then every other node in the
    sampling's order, the unexamined first (the caller filters those as it reaches them;
    the examined ones failed and are there to be explained). ``examined``: how many nodes
    the sampling looked at (the start index moves on by that many)."""

    scored: list[str]
    rest: list[str]
    examined: int
    #: Total score of each scored node (policy key aside).
    scores: dict[str, int]


def sample_and_score(
    *,
    pod: PodInfo,
    cluster: ClusterState,
    names: Sequence[str],
    start: int,
    all_nodes: int,
    feasible: Callable[[str], bool],
    policy: PlacementPolicy = "scheduler",
    allocated_on_node: Callable[[str], int] | None = None,
    percentage: int = 0,
) -> Sample:
    """Sample ``names`` (the nodes that pass the per-shape checks, by name) from
    ``start`` until enough pass ``feasible``; order them by policy and score."""
    if not names:
        return Sample([], [], 0, {})
    wanted = num_feasible_nodes_to_find(all_nodes, percentage)
    count = len(names)
    start %= count
    sample: list[str] = []
    examined = 0
    for offset in range(count):
        name = names[(start + offset) % count]
        examined += 1
        if feasible(name):
            sample.append(name)
            if len(sample) >= wanted:
                break
    chosen = set(sample)
    rest = [names[(start + offset) % count] for offset in range(examined, count)]
    rest += [name for offset in range(examined) if (name := names[(start + offset) % count]) not in chosen]
    nodes: list[NodeInfo] = []
    for name in sample:
        info = cluster.node(name)
        if info is not None:
            nodes.append(info)
    totals = total_scores(pod, cluster, nodes) if len(nodes) > 1 else [0] * len(nodes)
    scores = {info.name: total for info, total in zip(nodes, totals, strict=True)}
    sign = {"pack": -1, "spread": 1}.get(policy, 0)
    allocated = allocated_on_node or (lambda _: 0)
    ordered = sorted(scores, key=lambda n: (sign * allocated(n), -scores[n], n))
    return Sample(ordered, rest, examined, scores)


@dataclass(slots=True)
class NodeOrder:
    """kube-scheduler's ``nextStartNodeIndex``, kept from one pod to the next."""

    start: int = 0

    def advance(self, examined: int, count: int) -> None:
        if count:
            self.start = (self.start + examined) % count
