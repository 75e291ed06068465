"""kube-scheduler's default profile as draco runs it: the plugin table.

One table (:data:`PROFILE`), as kube-scheduler's registry and its default plugin set are:
every plugin of the profile, its extension points (`draco.scheduling.framework`), its score's
weight, in the order draco runs the filters. Callers that place pods (the operator's
allocation, `draco simulate`) read the profile from here and nothing else; a rule is in the
profile exactly when it is in this table.

The order is kube-scheduler 1.37's (``getDefaultPlugins`` of its config API, DynamicResources
where the DRA gate puts it; the queue-sort, preemption and bind plugins are left out), with
one difference in how the reason for a refused node is chosen: the four node-only Filters run
first, cached per kind of pod, as NodeName, NodeAffinity, TaintToleration, NodeUnschedulable,
so a node that fails two of them is counted under the first of those (upstream runs
NodeUnschedulable and TaintToleration before NodeAffinity). Before them draco skips the
nodes kube-scheduler refused the pod's line on (`draco.scheduling.refusal`), which is no
plugin of upstream's. DynamicResources' Filter is the allocator's search, run after the
scores on the nodes they put first (`draco.scheduling.plan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from draco.scheduling import (
    hostports,
    imagelocality,
    interpodaffinity,
    nodeaffinity,
    nodefit,
    noderesources,
    nodevolumelimits,
    tainttoleration,
    topologyspread,
    volumebinding,
    volumerestrictions,
    volumezone,
)
from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import Plugin, PreparedPod
from draco.scheduling.framework import node_unfit as _node_unfit
from draco.scheduling.framework import prepare as _prepare
from draco.scheduling.framework import total_scores as _total_scores
from draco.scheduling.nodefit import REASON_REFUSED, NodeInfo
from draco.scheduling.podinfo import PodInfo

__all__ = [
    "DYNAMIC_RESOURCES",
    "PROFILE",
    "PreparedPod",
    "node_unfit",
    "plugin",
    "prepare",
    "total_scores",
]

#: kube-scheduler's default profile (see the module docstring).
PROFILE: Final[tuple[Plugin, ...]] = (
    Plugin("NodeName", node_check=nodefit.node_name_unfit),
    Plugin(
        nodeaffinity.NAME,
        node_check=nodeaffinity.required_unfit,
        score=nodeaffinity.node_affinity_score,
        weight=2,
    ),
    Plugin(
        tainttoleration.NAME,
        node_check=tainttoleration.taint_unfit,
        score=tainttoleration.taint_toleration_score,
        weight=3,
    ),
    Plugin("NodeUnschedulable", node_check=nodefit.unschedulable_unfit),
    Plugin(hostports.NAME, prefilter=hostports.host_ports_filter),
    Plugin(noderesources.FIT, prefilter=noderesources.fit_filter, score=noderesources.fit_score, weight=1),
    Plugin(volumerestrictions.NAME, prefilter=volumerestrictions.volume_restrictions_filter),
    Plugin(nodevolumelimits.NAME, prefilter=nodevolumelimits.volume_limits_filter),
    Plugin(
        volumebinding.NAME,
        prefilter=volumebinding.volume_binding_filter,
        score=volumebinding.volume_binding_score,
        weight=1,
    ),
    Plugin(volumezone.NAME, prefilter=volumezone.volume_zone_filter),
    Plugin(
        topologyspread.NAME,
        prefilter=topologyspread.prepare_filter,
        score=topologyspread.prepare_score,
        weight=2,
    ),
    Plugin(
        interpodaffinity.NAME,
        prefilter=interpodaffinity.prepare_filter,
        score=interpodaffinity.prepare_score,
        weight=2,
    ),
    Plugin("DynamicResources", devices=True, weight=2),
    Plugin(noderesources.BALANCED_ALLOCATION, score=noderesources.balanced_score, weight=1),
    Plugin(imagelocality.NAME, score=imagelocality.image_locality_score, weight=1),
)


def plugin(name: str) -> Plugin:
    """The profile's plugin ``name``."""
    for entry in PROFILE:
        if entry.name == name:
            return entry
    raise KeyError(f"{name} is not a plugin of the profile")


#: DynamicResources (its weight scales the prioritized-list score).
DYNAMIC_RESOURCES: Final = plugin("DynamicResources")


def node_unfit(pod: PodInfo, node: NodeInfo) -> str | None:
    """Why the node-only rules refuse ``node`` for ``pod`` (None: they admit it): the
    nodes the pod's line was refused on first, then the profile's node-only Filters."""
    if node.name in pod.avoid:
        return REASON_REFUSED
    return _node_unfit(PROFILE, pod, node)


def prepare(pod: PodInfo, cluster: ClusterState) -> PreparedPod:
    """Every PreFilter of the profile for ``pod`` (stopping at the first refusal)."""
    return _prepare(PROFILE, pod, cluster)


def total_scores(pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]) -> list[int]:
    """The profile's weighted score of each node of ``nodes`` for ``pod``."""
    return _total_scores(PROFILE, pod, cluster, nodes)
