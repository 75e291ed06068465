"""TaintToleration: a node's ``NoSchedule``/``NoExecute`` taints the pod does not tolerate
refuse it (the filter); fewer ``PreferNoSchedule`` taints the pod does not tolerate score
higher (the score).

The filter reads the node's ``spec.taints`` (NodeUnschedulable answers for the taint of a
cordoned node: `nodefit.unschedulable_unfit`) and names the first taint the pod does not
tolerate. For the score only the pod's tolerations that can match ``PreferNoSchedule``
count (an empty effect matches every effect); each node's count of intolerable
``PreferNoSchedule`` taints is normalised against the highest count among the nodes,
reversed (none: 100). When no node has such a taint every node scores alike, and the score
answers None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from draco.api.tolerations import tolerates_any
from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import MAX_NODE_SCORE
from draco.scheduling.nodefit import NodeInfo, NodeTaint, taint_text
from draco.scheduling.normalize import default_normalize
from draco.scheduling.podinfo import PodInfo

__all__ = [
    "NAME",
    "PREFER_NO_SCHEDULE",
    "intolerable_taints",
    "taint_toleration_score",
    "taint_unfit",
    "untolerated_taint",
]

NAME: Final = "TaintToleration"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
_BLOCKING_EFFECTS: Final = ("NoSchedule", "NoExecute")


def untolerated_taint(pod: PodInfo, node: NodeInfo, *, cordon: bool = True) -> NodeTaint | None:
    """The first NoSchedule/NoExecute taint of the node the pod does not tolerate
    (``cordon``: the unschedulable taint of a cordoned node too)."""
    taints = node.taints if cordon or not node.unschedulable else node.taints[:-1]
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not tolerates_any(
            pod.tolerations, key=taint.key, value=taint.value, effect=taint.effect
        ):
            return taint
    return None


def taint_unfit(pod: PodInfo, node: NodeInfo) -> str | None:
    """The Filter: the first of the node's taints the pod does not tolerate, if any."""
    taint = untolerated_taint(pod, node, cordon=False)
    return None if taint is None else f"node(s) had untolerated taint {{{taint_text(taint)}}}"


def intolerable_taints(pod: PodInfo, node: NodeInfo) -> int:
    """How many of the node's ``PreferNoSchedule`` taints the pod does not tolerate."""
    tolerations = [
        t for t in pod.tolerations if (t.get("effect") or PREFER_NO_SCHEDULE) == PREFER_NO_SCHEDULE
    ]
    return sum(
        1
        for taint in node.taints
        if taint.effect == PREFER_NO_SCHEDULE
        and not tolerates_any(tolerations, key=taint.key, value=taint.value, effect=taint.effect)
    )


def taint_toleration_score(
    pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]
) -> list[int] | None:
    if not any(taint.effect == PREFER_NO_SCHEDULE for node in nodes for taint in node.taints):
        return None
    raw = [intolerable_taints(pod, node) for node in nodes]
    return default_normalize(raw, maximum=MAX_NODE_SCORE, reverse=True)
