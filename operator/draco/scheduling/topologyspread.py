"""kube-scheduler's PodTopologySpread plugin (Kubernetes 1.37), as draco runs it before it
pins a pod to a node.

Filter, for the pod's ``whenUnsatisfiable: DoNotSchedule`` constraints: a node without a
constraint's topology key is refused ("(missing required label)"); else placing the pod
there must keep ``matching pods in the node's domain + 1 if the pod matches its own selector
- the fewest matching pods in any eligible domain`` within ``maxSkew``. The fewest is 0
while there are fewer eligible domains than ``minDomains`` (1 when unset). Eligible domains
are the topology values of the nodes that carry every hard constraint's key and pass the
constraint's ``nodeAffinityPolicy`` (Honor: the pod's node selector and required node
affinity) and ``nodeTaintsPolicy`` (Honor: no NoSchedule/NoExecute taint the pod does not
tolerate); only pods on such nodes count.

Score, for ``whenUnsatisfiable: ScheduleAnyway``: a node scores the matching pods of its
domain times ``log(number of domains among the feasible nodes + 2)`` (the pods on the node
itself and the number of feasible nodes for ``kubernetes.io/hostname``) plus ``maxSkew -
1``, summed over the constraints and rounded; the fewest pods score best: ``100 * (max +
min - score) / max``. With ``requireAllTopologies`` (the pod declares constraints), feasible
nodes missing a key score 0 and are left out of the counts.

A matching pod, as upstream counts it: placed on a node that exists, in the incoming pod's
namespace, not terminating, its labels selected by the constraint (``matchLabelKeys``
already merged by `draco.scheduling.podinfo`). Kept from 1.37 as it is: a selector without
requirements (``labelSelector: {}``) counts no pod although the incoming pod matches it
(``countPodsMatchSelector`` tests ``Empty()``; fixed upstream after 1.37).

System default constraints (the default profile's ``defaultingType: System``): a pod that
declares no constraint is scored as if it had ``kubernetes.io/hostname`` maxSkew 3 and
``topology.kubernetes.io/zone`` maxSkew 5, ScheduleAnyway, selecting the pods that match
the selectors of its namespace's Services that select it and of its controlling
ReplicationController, ReplicaSet or StatefulSet (none of them: no default constraint);
nodes without a zone label are then still scored. They never filter. The selectors come
from a cluster state that also answers `draco.scheduling.cluster.WorkloadSelectors`; a
state that does not leaves such pods unscored by spreading, which changes preferences,
never feasibility.

Not ported: preemption's AddPod/RemovePod (draco's preemption takes pods off in the cluster state instead, `scheduling/without.py`), the deferred-resize
skip of the alpha InPlacePodVerticalScalingSchedulerPreemption gate, and custom
``defaultConstraints`` (draco emulates the default profile only).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from draco.scheduling.cluster import ClusterState, workload_selectors
from draco.scheduling.framework import MAX_NODE_SCORE
from draco.scheduling.labels import LabelSelector, Requirement
from draco.scheduling.nodeaffinity import required_matches
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo, SpreadConstraint
from draco.scheduling.tainttoleration import untolerated_taint

__all__ = [
    "NAME",
    "REASON_MISSING_LABEL",
    "REASON_SKEW",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "default_selector",
    "prepare_filter",
    "prepare_score",
]

NAME: Final = "PodTopologySpread"
#: The plugin's score weight in the default profile.
REASON_SKEW: Final = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL: Final = REASON_SKEW + " (missing required label)"

HOSTNAME: Final = "kubernetes.io/hostname"
ZONE: Final = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE: Final = "DoNotSchedule"
SCHEDULE_ANYWAY: Final = "ScheduleAnyway"
HONOR: Final = "Honor"

#: (topologyKey, maxSkew) of the default profile's system default constraints.
SYSTEM_DEFAULT_CONSTRAINTS: Final = ((HOSTNAME, 3), (ZONE, 5))

#: The controllers whose selector joins the default selector, by (apiVersion, kind) exactly.
_CONTROLLERS: Final = frozenset(
    {("v1", "ReplicationController"), ("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet")}
)
#: upstream's critical path before any domain is counted (math.MaxInt32).
_NO_DOMAIN: Final = 2**31 - 1


# --- what counts ------------------------------------------------------------------------


def _counts(constraint: SpreadConstraint, pod: PodInfo) -> bool:
    """Whether ``pod`` counts as matching (1.37's ``countPodsMatchSelector``)."""
    return not constraint.selector.is_everything and constraint.selector.matches(pod.labels)


def _namespace_pods(pod: PodInfo, cluster: ClusterState) -> dict[str, list[PodInfo]]:
    """The placed, non-terminating pods of ``pod``'s namespace by node (the pod itself never
    counts: kube-scheduler does not see the pod it is placing on any node)."""
    by_node: dict[str, list[PodInfo]] = defaultdict(list)
    for other in cluster.pods_in(pod.namespace):
        if other.terminating or other.node is None or (pod.uid and other.uid == pod.uid):
            continue
        by_node[other.node].append(other)
    return by_node


class _Inclusion:
    """``nodeAffinityPolicy`` and ``nodeTaintsPolicy`` of one pod's constraints."""

    def __init__(self, pod: PodInfo, constraints: Sequence[SpreadConstraint]) -> None:
        self._pod = pod
        has_affinity = bool(pod.node_selector) or pod.required_node_affinity is not None
        self._by_affinity = [has_affinity and c.node_affinity_policy == HONOR for c in constraints]
        self._by_taints = [c.node_taints_policy == HONOR for c in constraints]
        self._checks = any(self._by_affinity) or any(self._by_taints)

    def excluded(self, node: NodeInfo) -> list[bool] | None:
        """Per constraint, whether the policies leave ``node`` out; None when none does."""
        if not self._checks or (not node.taints and not any(self._by_affinity)):
            return None
        # upstream's RequiredNodeAffinity: node selector and required terms, never nodeName.
        affinity = not any(self._by_affinity) or required_matches(self._pod, node)
        taints = not node.taints or not any(self._by_taints) or untolerated_taint(self._pod, node) is None
        if affinity and taints:
            return None
        return [
            (by_affinity and not affinity) or (by_taints and not taints)
            for by_affinity, by_taints in zip(self._by_affinity, self._by_taints, strict=True)
        ]


def _has_keys(node: NodeInfo, constraints: Iterable[SpreadConstraint]) -> bool:
    return all(constraint.topology_key in node.labels for constraint in constraints)


# --- filter -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _SpreadFilter:
    constraints: tuple[SpreadConstraint, ...]
    #: Per constraint: matching pods per eligible domain.
    domains: tuple[dict[str, int], ...]
    #: Per constraint: the global minimum the skew is measured from.
    minimum: tuple[int, ...]
    #: Per constraint: 1 when the pod matches the constraint's selector.
    self_match: tuple[int, ...]

    def unfit(self, node: NodeInfo) -> str | None:
        for index, constraint in enumerate(self.constraints):
            value = node.labels.get(constraint.topology_key)
            if value is None:
                return REASON_MISSING_LABEL
            skew = self.domains[index].get(value, 0) + self.self_match[index] - self.minimum[index]
            if skew > constraint.max_skew:
                return REASON_SKEW
        return None


def _eligible_domains(
    constraints: Sequence[SpreadConstraint], pod: PodInfo, cluster: ClusterState
) -> tuple[list[dict[str, int]], dict[str, list[str | None]]]:
    """Every eligible domain per constraint (at 0), and each eligible node's domain per
    constraint (None where the node's policies leave it out)."""
    domains: list[dict[str, int]] = [{} for _ in constraints]
    eligible: dict[str, list[str | None]] = {}
    inclusion = _Inclusion(pod, constraints)
    keys = [constraint.topology_key for constraint in constraints]
    for name in cluster.node_names():
        node = cluster.node(name)
        if node is None:
            continue
        labels = node.labels
        try:
            values: list[str | None] = [labels[key] for key in keys]
        except KeyError:  # without every key the node has no domain (nor can it take the pod)
            continue
        excluded = inclusion.excluded(node)
        if excluded is not None:
            values = [None if out else value for value, out in zip(values, excluded, strict=True)]
        for counted, value in zip(domains, values, strict=True):
            if value is not None and value not in counted:
                counted[value] = 0
        eligible[name] = values
    return domains, eligible


def prepare_filter(pod: PodInfo, cluster: ClusterState) -> _SpreadFilter | None:
    """PreFilter: count the matching pods per eligible domain of each hard constraint."""
    constraints = tuple(c for c in pod.spread if c.when_unsatisfiable == DO_NOT_SCHEDULE)
    if not constraints:
        return None
    domains, eligible = _eligible_domains(constraints, pod, cluster)
    for node, pods in _namespace_pods(pod, cluster).items():
        values = eligible.get(node)
        if values is None:
            continue
        for index, constraint in enumerate(constraints):
            value = values[index]
            if value is not None:
                domains[index][value] += sum(1 for other in pods if _counts(constraint, other))
    minimum = []
    for constraint, counted in zip(constraints, domains, strict=True):
        min_domains = 1 if constraint.min_domains is None else constraint.min_domains
        minimum.append(0 if len(counted) < min_domains else min(counted.values(), default=_NO_DOMAIN))
    return _SpreadFilter(
        constraints=constraints,
        domains=tuple(domains),
        minimum=tuple(minimum),
        self_match=tuple(int(c.selector.matches(pod.labels)) for c in constraints),
    )


# --- score ------------------------------------------------------------------------------


def default_selector(pod: PodInfo, cluster: ClusterState) -> LabelSelector | None:
    """upstream's ``DefaultSelector``: the selectors of the Services of the pod's namespace
    that select it, and of its controlling ReplicationController, ReplicaSet or StatefulSet,
    ANDed; None when that selects by nothing (no system default constraint then), or when
    ``cluster`` does not answer :class:`WorkloadSelectors`."""
    selectors = workload_selectors(cluster)
    if selectors is None:
        return None
    merged: dict[str, str] = {}
    for service in selectors.service_selectors(pod.namespace):
        if all(pod.labels.get(key) == value for key, value in service.items()):
            merged.update(service)
    requirements = [Requirement(key, "In", frozenset({value})) for key, value in sorted(merged.items())]
    owner = pod.controller
    if owner is not None and (owner.api_version, owner.kind) in _CONTROLLERS:
        controller = selectors.controller_selector(pod.namespace, owner.kind, owner.name)
        if controller is not None and not controller.matches_nothing:
            requirements.extend(controller.requirements)
    return LabelSelector(requirements=tuple(requirements)) if requirements else None


def _soft_constraints(pod: PodInfo, cluster: ClusterState) -> tuple[SpreadConstraint, ...]:
    if pod.spread:
        return tuple(c for c in pod.spread if c.when_unsatisfiable == SCHEDULE_ANYWAY)
    selector = default_selector(pod, cluster)
    if selector is None:
        return ()
    return tuple(
        SpreadConstraint(
            max_skew=skew, topology_key=key, when_unsatisfiable=SCHEDULE_ANYWAY, selector=selector
        )
        for key, skew in SYSTEM_DEFAULT_CONSTRAINTS
    )


def _go_round(value: float) -> int:
    """Go's ``math.Round`` (half away from zero) of a non-negative value."""
    whole = math.floor(value)
    return int(whole) + (1 if value - whole >= 0.5 else 0)


def _normalised(raw: Sequence[int | None]) -> list[int]:
    """upstream's NormalizeScore: fewer matching pods score higher; ignored nodes (None) 0."""
    valid = [score for score in raw if score is not None]
    lowest = min(valid, default=0)
    highest = max([0, *valid])
    normalised = []
    for score in raw:
        if score is None:
            normalised.append(0)
        elif highest == 0:
            normalised.append(MAX_NODE_SCORE)
        else:
            normalised.append(MAX_NODE_SCORE * (highest + lowest - score) // highest)
    return normalised


def _domain_counts(
    pod: PodInfo,
    cluster: ClusterState,
    constraints: Sequence[SpreadConstraint],
    domains: list[dict[str, int]],
    by_node: dict[str, list[PodInfo]],
    *,
    require_all: bool,
) -> None:
    """Add the matching pods of every node (not only feasible ones) to the domains of the
    feasible nodes; a node's missing key reads as the value "" (upstream's map lookup)."""
    inclusion = _Inclusion(pod, constraints)
    for name, pods in by_node.items():
        node = cluster.node(name)
        if node is None or (require_all and not _has_keys(node, constraints)):
            continue
        excluded = inclusion.excluded(node)
        for index, constraint in enumerate(constraints):
            value = node.labels.get(constraint.topology_key, "")
            if (excluded is None or not excluded[index]) and value in domains[index]:
                domains[index][value] += sum(1 for other in pods if _counts(constraint, other))


def prepare_score(pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]) -> list[int] | None:
    """PreScore, Score and NormalizeScore of the soft constraints over ``nodes``."""
    constraints = _soft_constraints(pod, cluster)
    if not constraints or not cluster.node_names():
        return None
    # Only a pod's own constraints need every key; system defaults still score zone-less nodes.
    require_all = bool(pod.spread)
    ignored: set[str] = set()
    domains: list[dict[str, int]] = [{} for _ in constraints]
    for node in nodes:
        if require_all and not _has_keys(node, constraints):
            ignored.add(node.name)
            continue
        for index, constraint in enumerate(constraints):
            if constraint.topology_key != HOSTNAME:
                domains[index].setdefault(node.labels.get(constraint.topology_key, ""), 0)
    weights = [
        math.log((len(nodes) - len(ignored) if c.topology_key == HOSTNAME else len(domains[index])) + 2)
        for index, c in enumerate(constraints)
    ]
    by_node = _namespace_pods(pod, cluster)
    _domain_counts(pod, cluster, constraints, domains, by_node, require_all=require_all)
    raw: list[int | None] = []
    for node in nodes:
        if node.name in ignored:
            raw.append(None)
            continue
        score = 0.0
        for index, constraint in enumerate(constraints):
            value = node.labels.get(constraint.topology_key)
            if value is None:
                continue
            if constraint.topology_key == HOSTNAME:
                count = sum(1 for other in by_node.get(node.name, ()) if _counts(constraint, other))
            else:
                count = domains[index][value]
            score += count * weights[index] + (constraint.max_skew - 1)
        raw.append(_go_round(score))
    return _normalised(raw)
