"""The shape of kube-scheduler's profile as draco runs it before it chooses a pod's node.

draco pins a pod to the node where it allocated the pod's devices, and kube-scheduler
then binds it there or nowhere: so draco must only choose a node that kube-scheduler's
default profile accepts, and among those prefer what its scores prefer. A profile is a
table of :class:`Plugin` entries (`draco.scheduling.profile` holds the default one), as
kube-scheduler's registry is: each a name, its extension points, and its score's weight.
A plugin's extension points are functions of its rule module:

- ``node_check(pod, node)``: a Filter that reads only the node's record (name, labels,
  taints) and the pod's own node-only fields; pods with the same
  :attr:`PodInfo.placement_key` get the same answers, so the caller caches them per kind
  of pod (the operator's view does: `ClusterView.static_fit`);
- ``prefilter(pod, cluster)`` (PreFilter): ``None`` when the rule has nothing to check for
  this pod (the fast path for plain pods), a :class:`Refusal` when no node can take it,
  else a :class:`NodeFilter` whose ``unfit(node)`` (Filter) answers one node with ``None``
  or the reason in kube-scheduler's words;
- ``score(pod, cluster, nodes)`` (PreScore and Score): ``None`` when the rule scores every
  node alike for this pod, else the rule's normalised scores (0 to :data:`MAX_NODE_SCORE`)
  of ``nodes`` in order, which count ``weight`` times;
- ``devices``: DynamicResources, whose Filter is the allocator's search over the devices
  (`draco.scheduling.plan` runs it on the nodes the other filters and the scores put
  first) and whose score is the prioritized-list score (`draco.scheduling.prioritizedlist`).

Nothing here is registered by importing a module: the table names every rule, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from draco.scheduling.cluster import ClusterState
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo

__all__ = [
    "MAX_NODE_SCORE",
    "REFUSED",
    "FilterRule",
    "NodeCheck",
    "NodeFilter",
    "Plugin",
    "PreparedPod",
    "Refusal",
    "ScoreRule",
    "node_unfit",
    "prepare",
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


NodeCheck = Callable[[PodInfo, NodeInfo], str | None]
FilterRule = Callable[[PodInfo, ClusterState], NodeFilter | Refusal | None]
ScoreRule = Callable[[PodInfo, ClusterState, Sequence[NodeInfo]], Sequence[int] | None]


@dataclass(frozen=True, slots=True)
class Plugin:
    """One plugin of a profile: its name in kube-scheduler's configuration, its extension
    points (see the module docstring) and its score's weight."""

    name: str
    node_check: NodeCheck | None = None
    prefilter: FilterRule | None = None
    score: ScoreRule | None = None
    weight: int = 0
    #: DynamicResources: the allocator's search filters, the prioritized list scores.
    devices: bool = False


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


def node_unfit(plugins: Sequence[Plugin], pod: PodInfo, node: NodeInfo) -> str | None:
    """The first node-only Filter of ``plugins`` that refuses ``node``, in its words."""
    for plugin in plugins:
        if plugin.node_check is not None:
            reason = plugin.node_check(pod, node)
            if reason is not None:
                return reason
    return None


def prepare(plugins: Sequence[Plugin], pod: PodInfo, cluster: ClusterState) -> PreparedPod:
    """Run every PreFilter of ``plugins`` for ``pod``; stop at the first refusal."""
    prepared = PreparedPod()
    for plugin in plugins:
        if plugin.prefilter is None:
            continue
        answer = plugin.prefilter(pod, cluster)
        if answer is None:
            continue
        if isinstance(answer, Refusal):
            prepared.refusal = answer
            prepared.filters.clear()
            return prepared
        prepared.filters.append((plugin.name, answer))
    return prepared


def total_scores(
    plugins: Sequence[Plugin], pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]
) -> list[int]:
    """The weighted sum of the scores of ``plugins``, per node of ``nodes``."""
    totals = [0] * len(nodes)
    for plugin in plugins:
        if plugin.score is None:
            continue
        scores = plugin.score(pod, cluster, nodes)
        if scores is None:
            continue
        for index, value in enumerate(scores):
            totals[index] += value * plugin.weight
    return totals
