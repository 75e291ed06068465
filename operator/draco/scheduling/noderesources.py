"""NodeResourcesFit and NodeResourcesBalancedAllocation: does the node have room, and how
full would it be?

The filter (NodeResourcesFit) compares, for every resource the pod requests, the pod's
effective request (:attr:`PodInfo.requests`) with what the node's ``status.allocatable``
leaves beside the requests of the pods already on it (:meth:`ClusterState.requested`):

- ``pods``: the pods on the node plus this one must not exceed allocatable ``pods``
  ("Too many pods"), whatever the pod requests;
- ``cpu``, ``memory``, ``ephemeral-storage`` when the pod requests a non-zero amount;
- every other name kube-scheduler counts as a scalar resource (``hugepages-*``,
  ``attachable-volumes-*``, and any name with a ``/``: extended resources such as
  ``nvidia.com/gpu`` or ``deviceclass.resource.draco.dev/<class>``, prefixed native ones)
  when requested non-zero; a name the node does not list has nothing allocatable, so it is
  "Insufficient <name>". (kube-scheduler 1.37 leaves a name the node lacks to its DRA
  plugin when a DeviceClass maps it; draco advertises every mapped name on the nodes whose
  devices serve it, so the two agree wherever a device could serve the pod.)

Names the pod does not request are never compared. Reasons are upstream's words; the
first one found is returned (pods, then cpu, memory, ephemeral storage, then the scalar
names in order), where kube-scheduler lists them all.

The scores are the default profile's: NodeResourcesFit's ``LeastAllocated`` over cpu and
memory (weight 1 each), with requests counted as scoring counts them (a container without
a cpu or memory request counts 100m / 200Mi: :attr:`PodInfo.nonzero_milli_cpu`); and
NodeResourcesBalancedAllocation over cpu and memory with the actual requests, scoring how
much placing the pod improves (towards 100) or worsens (towards 50) the balance between the
two fractions, and skipped for a pod that requests neither.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from draco.scheduling import framework
from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import MAX_NODE_SCORE
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo

__all__ = [
    "BALANCED_ALLOCATION",
    "FIT",
    "REASON_TOO_MANY_PODS",
    "balanced_allocation_score",
    "balanced_score",
    "fit_filter",
    "fit_score",
    "insufficient",
    "least_allocated_score",
]

FIT: Final = "NodeResourcesFit"
BALANCED_ALLOCATION: Final = "NodeResourcesBalancedAllocation"

REASON_TOO_MANY_PODS: Final = "Too many pods"

_STANDARD: Final = ("cpu", "memory", "ephemeral-storage")
_SCALAR_PREFIXES: Final = ("hugepages-", "attachable-volumes-")
#: The resources the default scoring strategy and BalancedAllocation read.
_SCORED: Final = ("cpu", "memory")


def insufficient(name: str) -> str:
    """Upstream's reason for a node without room for ``name``."""
    return f"Insufficient {name}"


def _compared(name: str) -> bool:
    """Whether NodeResourcesFit compares ``name`` at all (the standard names and what
    upstream's ``IsScalarResourceName`` accepts; ``pods`` is compared apart)."""
    return name in _STANDARD or "/" in name or name.startswith(_SCALAR_PREFIXES)


class _Fit:
    """Filter: the pod's non-zero requests, each with its reason, in checking order."""

    __slots__ = ("_requested", "_wanted")

    def __init__(self, wanted: tuple[tuple[str, int, str], ...], cluster: ClusterState) -> None:
        self._wanted = wanted
        # Bound once: this runs for every pod on every candidate node.
        self._requested = cluster.requested

    def unfit(self, node: NodeInfo) -> str | None:
        requested = self._requested(node.name)
        allocatable = node.allocatable
        if requested.get("pods", 0) + 1 > allocatable.get("pods", 0):
            return REASON_TOO_MANY_PODS
        for name, amount, reason in self._wanted:
            if amount > allocatable.get(name, 0) - requested.get(name, 0):
                return reason
        return None


def _wanted(requests: Mapping[str, int]) -> tuple[tuple[str, int, str], ...]:
    standard = [name for name in _STANDARD if requests.get(name, 0) > 0]
    scalars = sorted(
        name for name, amount in requests.items() if amount > 0 and name not in _STANDARD and _compared(name)
    )
    return tuple((name, requests[name], insufficient(name)) for name in [*standard, *scalars])


def fit_filter(pod: PodInfo, cluster: ClusterState) -> framework.NodeFilter:
    """PreFilter of NodeResourcesFit: it runs for every pod (``pods`` is always checked)."""
    return _Fit(_wanted(pod.requests), cluster)


# --- scores ------------------------------------------------------------------------------


def least_allocated_score(pod: PodInfo, node: NodeInfo, cluster: ClusterState) -> int:
    """``LeastAllocated`` over cpu and memory, weight 1 each: the mean of each resource's
    free share after placing the pod (0 when over-committed), a resource the node does not
    report left out."""
    used_cpu, used_memory = cluster.requested_nonzero(node.name)
    total = weights = 0
    for name, requested in (
        ("cpu", used_cpu + pod.nonzero_milli_cpu),
        ("memory", used_memory + pod.nonzero_memory),
    ):
        capacity = node.allocatable.get(name, 0)
        if capacity == 0:
            continue
        total += 0 if requested > capacity else (capacity - requested) * MAX_NODE_SCORE // capacity
        weights += 1
    return total // weights if weights else 0


def _balance(fractions: Sequence[float]) -> int:
    """``(1 - std) * 100`` of the fractions (truncated, as upstream converts to int64)."""
    std = 0.0
    if len(fractions) == 2:
        std = math.fabs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) * (f - mean) for f in fractions) / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_allocation_score(pod: PodInfo, node: NodeInfo, cluster: ClusterState) -> int:
    """How placing the pod changes the node's cpu/memory balance, in 50..100 (75: no change)."""
    requested = cluster.requested(node.name)
    with_pod: list[float] = []
    without_pod: list[float] = []
    for name in _SCORED:
        capacity = node.allocatable.get(name, 0)
        if capacity == 0:
            continue
        used = requested.get(name, 0)
        with_pod.append(min(float(used + pod.requests.get(name, 0)) / float(capacity), 1.0))
        without_pod.append(min(float(used) / float(capacity), 1.0))
    half = MAX_NODE_SCORE // 2
    # Both balances are in 50..100, so the difference plus 50 is never negative.
    return half + (half + _balance(with_pod) - _balance(without_pod)) // 2


def fit_score(pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]) -> list[int]:
    return [least_allocated_score(pod, node, cluster) for node in nodes]


def _two_balance(cpu: float, memory: float) -> int:
    """:func:`_balance` of two fractions (the common case: cpu and memory both reported)."""
    return int((1 - math.fabs((cpu - memory) / 2)) * MAX_NODE_SCORE)


def balanced_score(pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]) -> list[int] | None:
    """Skipped (None) for a pod that requests no cpu and no memory, as upstream does so
    that such pods do not all pile onto the most balanced node.

    A node that reports both cpu and memory (nearly every node) is scored inline, the
    same arithmetic as :func:`balanced_allocation_score` without its general loop: this
    runs for every sampled node of every pod."""
    pod_cpu, pod_memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
    if not pod_cpu and not pod_memory:
        return None
    requested_of = cluster.requested
    half = MAX_NODE_SCORE // 2
    values: list[int] = []
    for node in nodes:
        allocatable = node.allocatable
        cpu_capacity, memory_capacity = allocatable.get("cpu", 0), allocatable.get("memory", 0)
        if not cpu_capacity or not memory_capacity:
            values.append(balanced_allocation_score(pod, node, cluster))
            continue
        requested = requested_of(node.name)
        used_cpu, used_memory = requested.get("cpu", 0), requested.get("memory", 0)
        with_pod = _two_balance(
            min((used_cpu + pod_cpu) / cpu_capacity, 1.0),
            min((used_memory + pod_memory) / memory_capacity, 1.0),
        )
        without_pod = _two_balance(min(used_cpu / cpu_capacity, 1.0), min(used_memory / memory_capacity, 1.0))
        values.append(half + (half + with_pod - without_pod) // 2)
    return values
