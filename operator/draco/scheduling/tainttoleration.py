"""TaintToleration's score: prefer nodes with fewer ``PreferNoSchedule`` taints the pod
does not tolerate.

Only the pod's tolerations that can match that effect count (an empty effect matches every
effect). Each node's count of intolerable ``PreferNoSchedule`` taints is normalised against
the highest count among the nodes, reversed (none: 100), and weighs 3 in the default
profile. The filter half (``NoSchedule``/``NoExecute``) is `draco.scheduling.nodefit`'s.
When no node has such a taint every node scores alike, and the rule answers None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from draco.api.tolerations import tolerates_any
from draco.scheduling import framework
from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import MAX_NODE_SCORE, ComputedScores
from draco.scheduling.nodefit import NodeInfo, PodNeeds
from draco.scheduling.normalize import default_normalize
from draco.scheduling.podinfo import PodInfo

__all__ = ["NAME", "PREFER_NO_SCHEDULE", "WEIGHT", "intolerable_taints", "taint_toleration_score"]

NAME: Final = "TaintToleration"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
#: The score's weight in the default profile.
WEIGHT: Final = 3


def intolerable_taints(needs: PodNeeds, node: NodeInfo) -> int:
    """How many of the node's ``PreferNoSchedule`` taints the pod does not tolerate."""
    tolerations = [
        t for t in needs.tolerations if (t.get("effect") or PREFER_NO_SCHEDULE) == PREFER_NO_SCHEDULE
    ]
    return sum(
        1
        for taint in node.taints
        if taint.effect == PREFER_NO_SCHEDULE
        and not tolerates_any(tolerations, key=taint.key, value=taint.value, effect=taint.effect)
    )


def taint_toleration_score(
    pod: PodInfo, needs: PodNeeds, cluster: ClusterState, nodes: Sequence[NodeInfo]
) -> framework.NodeScore | None:
    if not any(taint.effect == PREFER_NO_SCHEDULE for node in nodes for taint in node.taints):
        return None
    raw = [intolerable_taints(needs, node) for node in nodes]
    return ComputedScores(
        weight=WEIGHT,
        values=default_normalize(raw, maximum=MAX_NODE_SCORE, reverse=True),
    )


framework.register(NAME, prescore=taint_toleration_score)
