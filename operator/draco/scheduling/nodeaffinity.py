"""NodeAffinity: the pod's node selector and required node affinity refuse the nodes they
do not match (the filter); nodes matching its preferred terms score higher (the score).

The filter: every label of ``spec.nodeSelector`` must be present with the same value, and
the required terms (ORed; the requirements of a term ANDed; a term with no requirement
matches nothing; ``matchExpressions`` with In/NotIn/Exists/DoesNotExist/Gt/Lt on labels,
``matchFields`` on ``metadata.name`` only) must match, the allocator's semantics for slice
selectors. The score: a node scores the sum of the weights of the
``preferredDuringSchedulingIgnoredDuringExecution`` terms it matches (a term with weight 0
or without any requirement never counts), normalised against the highest; a pod without
preferred terms scores every node alike and the score answers None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from draco.allocator.nodeselect import node_selector_matches
from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import MAX_NODE_SCORE
from draco.scheduling.nodefit import REASON_SELECTOR, NodeInfo
from draco.scheduling.normalize import default_normalize
from draco.scheduling.podinfo import PodInfo

__all__ = ["NAME", "node_affinity_score", "preferred_weight", "required_matches", "required_unfit"]

NAME: Final = "NodeAffinity"


def required_matches(pod: PodInfo, node: NodeInfo) -> bool:
    """``spec.nodeSelector`` and the required node affinity (upstream's
    ``RequiredNodeAffinity``: never ``nodeName``)."""
    if any(node.labels.get(key) != value for key, value in pod.node_selector.items()):
        return False
    if pod.required_node_affinity is None:
        return True
    selector = {"nodeSelectorTerms": list(pod.required_node_affinity)}
    return node_selector_matches(selector, name=node.name, labels=node.labels)


def required_unfit(pod: PodInfo, node: NodeInfo) -> str | None:
    """The Filter."""
    return None if required_matches(pod, node) else REASON_SELECTOR


def preferred_weight(pod: PodInfo, node: NodeInfo) -> int:
    """The summed weights of the preferred terms ``node`` matches."""
    return sum(
        weight
        for weight, term in pod.preferred_node_affinity
        if weight and node_selector_matches({"nodeSelectorTerms": [term]}, name=node.name, labels=node.labels)
    )


def node_affinity_score(pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]) -> list[int] | None:
    if not pod.preferred_node_affinity:
        return None
    raw = [preferred_weight(pod, node) for node in nodes]
    return default_normalize(raw, maximum=MAX_NODE_SCORE, reverse=False)
