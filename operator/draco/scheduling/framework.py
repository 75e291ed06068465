"""kube-scheduler's default profile, run by draco before it chooses a pod's node.

draco pins a pod to the node where it allocated the pod's devices, and kube-scheduler
then binds it there or nowhere: so draco must only choose a node that kube-scheduler's
default profile accepts, and among those prefer what its scores prefer. This module is
that profile's shape: each rule of kube-scheduler is a module of this package with

- ``prepare_filter(pod, needs, cluster)`` (PreFilter): ``None`` when the rule has nothing
  to check for this pod (the fast path for plain pods), a :class:`Refusal` when no node
  can take it, else a :class:`NodeFilter` whose ``unfit(node)`` (Filter) answers one node
  with ``None`` or the reason in kube-scheduler's words;
- ``prepare_score(pod, needs, cluster, nodes)`` (PreScore): ``None`` when the rule scores
  every node alike for this pod, else a :class:`NodeScore` whose ``scores()`` are the
  rule's normalised scores (0 to :data:`MAX_NODE_SCORE`) of ``nodes`` in order, and whose
  ``weight`` is the plugin's weight in the default profile.

:data:`FILTERS` and :data:`SCORES` list them in the default profile's order
(:data:`PROFILE_ORDER`): a rule module adds itself with :func:`register` when it is
imported, at its place in that order whatever order the modules are imported in. The node
checks draco already made per pod shape (node name, selector, required node affinity,
taints: `draco.scheduling.nodefit`) stay where they are, cached per shape; this adds the
rules that depend on the other pods, on volumes and on every resource name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from draco.scheduling.cluster import ClusterState
from draco.scheduling.nodefit import NodeInfo, PodNeeds
from draco.scheduling.podinfo import PodInfo

__all__ = [
    "FILTERS",
    "MAX_NODE_SCORE",
    "PROFILE_ORDER",
    "REFUSED",
    "SCORES",
    "ComputedScores",
    "FilterRule",
    "NodeFilter",
    "NodeScore",
    "PreparedPod",
    "Refusal",
    "ScoreRule",
    "prepare",
    "register",
    "total_scores",
]

#: upstream's ``framework.MaxNodeScore``: every rule's scores are normalised to 0..100.
MAX_NODE_SCORE: Final = 100
#: The rule name :meth:`PreparedPod.unfit_rule` gives when a PreFilter refused every node.
REFUSED: Final = "PreFilter"


@dataclass(frozen=True, slots=True)
class Refusal:
    """PreFilter's answer that no node can take the pod (``reason``: the scheduler's words)."""

    reason: str


class NodeFilter(Protocol):
    def unfit(self, node: NodeInfo) -> str | None:
        """None when ``node`` passes this rule; else why not, in kube-scheduler's words."""
        ...


class NodeScore(Protocol):
    #: The plugin's weight in kube-scheduler's default profile.
    weight: int

    def scores(self) -> Sequence[int]:
        """Normalised scores (0..MAX_NODE_SCORE) of the nodes it was prepared for, in order."""
        ...


@dataclass(slots=True)
class ComputedScores:
    """A :class:`NodeScore` whose scores were computed when it was prepared."""

    weight: int
    values: Sequence[int]

    def scores(self) -> Sequence[int]:
        return self.values


FilterRule = Callable[[PodInfo, PodNeeds, ClusterState], NodeFilter | Refusal | None]
ScoreRule = Callable[[PodInfo, PodNeeds, ClusterState, Sequence[NodeInfo]], NodeScore | None]

#: (name, PreFilter) of the default profile's filter plugins draco runs here, in order.
FILTERS: Final[list[tuple[str, FilterRule]]] = []
#: (name, PreScore) of the default profile's score plugins draco runs here.
SCORES: Final[list[tuple[str, ScoreRule]]] = []

#: kube-scheduler 1.37's default profile, its plugins in the order it runs them
#: (``getDefaultPlugins`` of its config API, DynamicResources where the DRA gate puts it);
#: the queue-sort, preemption and bind plugins are left out.
PROFILE_ORDER: Final = (
    "NodeName",
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
)


_Rule = TypeVar("_Rule", FilterRule, ScoreRule)


def _place(registry: list[tuple[str, _Rule]], name: str, rule: _Rule) -> None:
    kept = [(other, r) for other, r in registry if other != name]
    kept.append((name, rule))
    kept.sort(key=lambda entry: PROFILE_ORDER.index(entry[0]))
    registry[:] = kept


def register(name: str, *, prefilter: FilterRule | None = None, prescore: ScoreRule | None = None) -> None:
    """Add plugin ``name``'s PreFilter and PreScore to :data:`FILTERS` and :data:`SCORES`
    at its place in :data:`PROFILE_ORDER` (registering a name again replaces it)."""
    if name not in PROFILE_ORDER:
        raise ValueError(f"{name} is not a plugin of the default profile")
    if prefilter is not None:
        _place(FILTERS, name, prefilter)
    if prescore is not None:
        _place(SCORES, name, prescore)


@dataclass(slots=True)
class PreparedPod:
    """The filters prepared for one pod: ``refusal`` when one refused every node."""

    filters: list[tuple[str, NodeFilter]] = field(default_factory=list)
    refusal: Refusal | None = None

    @property
    def trivial(self) -> bool:
        """No rule has anything to check: every node passes."""
        return self.refusal is None and not self.filters

    def unfit(self, node: NodeInfo) -> str | None:
        refused = self.unfit_rule(node)
        return None if refused is None else refused[1]

    def unfit_rule(self, node: NodeInfo) -> tuple[str, str] | None:
        """(rule name, reason) of the first rule that refuses ``node``; None if none does."""
        if self.refusal is not None:
            return REFUSED, self.refusal.reason
        for name, rule in self.filters:
            reason = rule.unfit(node)
            if reason is not None:
                return name, reason
        return None


def prepare(
    pod: PodInfo,
    needs: PodNeeds,
    cluster: ClusterState,
    *,
    filters: Sequence[tuple[str, FilterRule]] | None = None,
) -> PreparedPod:
    """Run every filter's PreFilter for ``pod``; stop at the first refusal."""
    prepared = PreparedPod()
    for name, rule in FILTERS if filters is None else filters:
        answer = rule(pod, needs, cluster)
        if answer is None:
            continue
        if isinstance(answer, Refusal):
            prepared.refusal = answer
            prepared.filters.clear()
            return prepared
        prepared.filters.append((name, answer))
    return prepared


def total_scores(
    pod: PodInfo,
    needs: PodNeeds,
    cluster: ClusterState,
    nodes: Sequence[NodeInfo],
    *,
    scores: Sequence[tuple[str, ScoreRule]] | None = None,
) -> list[int]:
    """The weighted sum of every score rule's normalised scores, per node of ``nodes``."""
    totals = [0] * len(nodes)
    for _, rule in SCORES if scores is None else scores:
        prepared = rule(pod, needs, cluster, nodes)
        if prepared is None:
            continue
        for index, value in enumerate(prepared.scores()):
            totals[index] += value * prepared.weight
    return totals
