"""NodeAffinity's score: prefer nodes matching the pod's preferred node affinity terms.

A node scores the sum of the weights of the
``preferredDuringSchedulingIgnoredDuringExecution`` terms it matches (a term with weight 0
or without any requirement never counts; ``matchFields`` know ``metadata.name``), then the
scores are normalised against the highest, and weigh 2 in the default profile. A pod
without preferred terms scores every node alike: the rule answers None. The filter half
(selector and required terms) is `draco.scheduling.nodefit`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from draco.allocator.nodeselect import node_selector_matches
from draco.scheduling import framework
from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import MAX_NODE_SCORE, ComputedScores
from draco.scheduling.nodefit import NodeInfo, PodNeeds
from draco.scheduling.normalize import default_normalize
from draco.scheduling.podinfo import PodInfo

__all__ = ["NAME", "WEIGHT", "node_affinity_score", "preferred_weight"]

NAME: Final = "NodeAffinity"
#: The score's weight in the default profile.
WEIGHT: Final = 2


def preferred_weight(needs: PodNeeds, node: NodeInfo) -> int:
    """The summed weights of the preferred terms ``node`` matches."""
    return sum(
        weight
        for weight, term in needs.preferred_affinity
        if weight and node_selector_matches({"nodeSelectorTerms": [term]}, name=node.name, labels=node.labels)
    )


def node_affinity_score(
    pod: PodInfo, needs: PodNeeds, cluster: ClusterState, nodes: Sequence[NodeInfo]
) -> framework.NodeScore | None:
    if not needs.preferred_affinity:
        return None
    raw = [preferred_weight(needs, node) for node in nodes]
    return ComputedScores(
        weight=WEIGHT,
        values=default_normalize(raw, maximum=MAX_NODE_SCORE, reverse=False),
    )


framework.register(NAME, prescore=node_affinity_score)
