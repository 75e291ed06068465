"""kube-scheduler's InterPodAffinity plugin (Kubernetes 1.37), as draco runs it before it
pins a pod to a node.

PreFilter reads the placed pods once and keeps topology pairs (key, value of a node label):

- where an existing pod's required anti-affinity term selects the incoming pod (the
  index of pods with such terms keeps this cheap for every other pod);
- where a pod matches *all* of the incoming pod's required affinity terms (one pair per
  term whose key its node carries);
- where a pod matches one of the incoming pod's required anti-affinity terms.

Filter then answers a node from its labels alone, in upstream's order and words: it
must carry every affinity term's key and have each term's pair ("didn't match pod
affinity rules"), unless no pod anywhere matches the terms and the pod matches them
itself (the first pod of a group that wants to be together may go anywhere with the
keys); none of its anti-affinity pairs ("didn't match pod anti-affinity rules"); none of
the existing pods' pairs ("didn't satisfy existing pods anti-affinity rules").

Score sums per topology pair the weights of the incoming pod's preferred terms that
select a placed pod (anti-affinity negative), and of the placed pods' terms that select
the incoming pod: required affinity at ``hardPodAffinityWeight`` 1, preferred affinity,
preferred anti-affinity negative. A node scores the pairs its labels carry; the scores are
spread over 0..100 between the lowest and the highest (all 0 when equal).

Which pods count, as upstream: every pod placed on a node that exists (bound, or pinned by
draco and about to be bound: kube-scheduler's assumed pods), terminating pods included;
not pods left on a deleted node (the scheduler's snapshot lists existing nodes only), nor
the incoming pod itself. Namespaces: a term without namespaces and namespace selector
means its pod's namespace (`draco.scheduling.podinfo`); the incoming pod's namespace
selector stands for the known namespaces whose labels it matches (upstream lists them),
``{}`` for every namespace; an existing pod's term is matched against the labels of the
incoming pod's namespace (none when it is not known). ``matchLabelKeys`` and
``mismatchLabelKeys`` are already merged into the selectors by `draco.scheduling.podinfo`.

Not ported: preemption's AddPod/RemovePod (draco's preemption takes pods off in the cluster state instead, `scheduling/without.py`), the alpha
InterPodAffinityHostnameFastPath gate (off by default in 1.37: it checks hostname terms
against the node's own pods rather than by hostname label value, which answers the same
unless two nodes share a hostname label), the deferred-resize skip of the alpha
InPlacePodVerticalScalingSchedulerPreemption gate, and ``ignorePreferredTermsOfExistingPods``
(false in the default profile).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from draco.scheduling.cluster import AffinityTermIndex, ClusterState, TermKind, term_index
from draco.scheduling.framework import MAX_NODE_SCORE
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import AffinityTerm, PodInfo

__all__ = [
    "HARD_POD_AFFINITY_WEIGHT",
    "NAME",
    "REASON_AFFINITY",
    "REASON_ANTI_AFFINITY",
    "REASON_EXISTING_ANTI_AFFINITY",
    "prepare_filter",
    "prepare_score",
]

NAME: Final = "InterPodAffinity"
#: ``InterPodAffinityArgs.hardPodAffinityWeight`` of the default profile.
HARD_POD_AFFINITY_WEIGHT: Final = 1
REASON_AFFINITY: Final = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY: Final = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY: Final = "node(s) didn't satisfy existing pods anti-affinity rules"

Pair = tuple[str, str]


class _Namespaces:
    """Namespace labels, each read once per pod."""

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster
        self._labels: dict[str, Mapping[str, str] | None] = {}

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        if namespace not in self._labels:
            self._labels[namespace] = self._cluster.namespace_labels(namespace)
        return self._labels[namespace]


def _own_term_selects(term: AffinityTerm, other: PodInfo, namespaces: _Namespaces) -> bool:
    """Whether the incoming pod's ``term`` selects the placed pod ``other``."""
    if other.namespace not in term.namespaces:
        selector = term.namespace_selector
        if selector is None:
            return False
        if not selector.is_everything:
            labels = namespaces.labels(other.namespace)
            if labels is None or not selector.matches(labels):
                return False
    return term.selector.matches(other.labels)


def _is_self(pod: PodInfo, other: PodInfo) -> bool:
    return bool(pod.uid) and other.uid == pod.uid


def _placed(pod: PodInfo, cluster: ClusterState) -> Iterator[tuple[PodInfo, NodeInfo]]:
    """Every placed pod on an existing node, with its node."""
    for name in cluster.node_names():
        node = cluster.node(name)
        if node is None:
            continue
        for other in cluster.pods_on(name):
            if not _is_self(pod, other):
                yield other, node


def _placed_for(
    pod: PodInfo, terms: Sequence[AffinityTerm], cluster: ClusterState
) -> Iterator[tuple[PodInfo, NodeInfo]]:
    """The placed pods ``terms`` may select: only the pods of the namespaces they name when
    none has a namespace selector (upstream walks them all; the others cannot match)."""
    if any(term.namespace_selector is not None for term in terms):
        yield from _placed(pod, cluster)
        return
    for namespace in sorted(set().union(*(term.namespaces for term in terms))):
        yield from _on_nodes(pod, cluster.pods_in(namespace), cluster)


def _on_nodes(
    pod: PodInfo, pods: Iterable[PodInfo], cluster: ClusterState
) -> Iterator[tuple[PodInfo, NodeInfo]]:
    """``pods`` that sit on an existing node, with their node."""
    for other in pods:
        node = None if other.node is None else cluster.node(other.node)
        if node is not None and not _is_self(pod, other):
            yield other, node


# --- filter -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _AffinityFilter:
    affinity: tuple[AffinityTerm, ...]
    affinity_pairs: frozenset[Pair]
    #: No placed pod matches the affinity terms and the pod matches them itself.
    first_of_group: bool
    anti_affinity: tuple[AffinityTerm, ...]
    anti_affinity_pairs: frozenset[Pair]
    #: The existing pods' anti-affinity: topology key -> values refused.
    refused: Mapping[str, frozenset[str]]

    def unfit(self, node: NodeInfo) -> str | None:
        labels = node.labels
        if self.affinity:
            found = True
            for term in self.affinity:
                value = labels.get(term.topology_key)
                if value is None:
                    return REASON_AFFINITY
                if (term.topology_key, value) not in self.affinity_pairs:
                    found = False
            if not found and not self.first_of_group:
                return REASON_AFFINITY
        if self.anti_affinity_pairs:
            for term in self.anti_affinity:
                value = labels.get(term.topology_key)
                if value is not None and (term.topology_key, value) in self.anti_affinity_pairs:
                    return REASON_ANTI_AFFINITY
        for key, values in self.refused.items():
            if labels.get(key) in values:
                return REASON_EXISTING_ANTI_AFFINITY
        return None


def _existing_anti_affinity(
    pod: PodInfo, namespace_labels: Mapping[str, str], cluster: ClusterState
) -> dict[str, frozenset[str]]:
    """Per topology key, the values where a placed pod's required anti-affinity refuses ``pod``."""
    refused: dict[str, set[str]] = {}
    if (index := term_index(cluster)) is not None:
        # Each distinct term once, with the nodes of the pods that carry it.
        for term, nodes in index.affinity_terms("required_anti", exclude_uid=pod.uid):
            if not term.matches(pod, namespace_labels):
                continue
            for name in nodes:
                node = cluster.node(name)
                value = None if node is None else node.labels.get(term.topology_key)
                if value is not None:
                    refused.setdefault(term.topology_key, set()).add(value)
        return {key: frozenset(values) for key, values in refused.items()}
    # The pods of one template share their terms (one object): match each term once.
    matched: dict[int, bool] = {}
    for other, node in _on_nodes(pod, cluster.pods_with_required_anti_affinity(), cluster):
        for term in other.affinity.required_anti:
            value = node.labels.get(term.topology_key)
            if value is None:
                continue
            hit = matched.get(id(term))
            if hit is None:
                hit = matched[id(term)] = term.matches(pod, namespace_labels)
            if hit:
                refused.setdefault(term.topology_key, set()).add(value)
    return {key: frozenset(values) for key, values in refused.items()}


def _incoming_pairs(
    pod: PodInfo, cluster: ClusterState, namespaces: _Namespaces
) -> tuple[set[Pair], set[Pair]]:
    """The pairs of the pods matching all of ``pod``'s required affinity terms, and of those
    matching one of its required anti-affinity terms."""
    affinity, anti_affinity = pod.affinity.required, pod.affinity.required_anti
    affinity_pairs: set[Pair] = set()
    anti_affinity_pairs: set[Pair] = set()
    for other, node in _placed_for(pod, affinity + anti_affinity, cluster):
        if affinity and all(_own_term_selects(term, other, namespaces) for term in affinity):
            for term in affinity:
                value = node.labels.get(term.topology_key)
                if value is not None:
                    affinity_pairs.add((term.topology_key, value))
        for term in anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is not None and _own_term_selects(term, other, namespaces):
                anti_affinity_pairs.add((term.topology_key, value))
    return affinity_pairs, anti_affinity_pairs


def prepare_filter(pod: PodInfo, cluster: ClusterState) -> _AffinityFilter | None:
    """PreFilter; None when no node can fail the rule (the fast path of a pod without terms
    that no placed pod's anti-affinity selects)."""
    refused = _existing_anti_affinity(pod, cluster.namespace_labels(pod.namespace) or {}, cluster)
    affinity, anti_affinity = pod.affinity.required, pod.affinity.required_anti
    if not refused and not affinity and not anti_affinity:
        return None
    namespaces = _Namespaces(cluster)
    affinity_pairs, anti_affinity_pairs = _incoming_pairs(pod, cluster, namespaces)
    if not refused and not affinity and not anti_affinity_pairs:
        return None
    matches_itself = bool(affinity) and all(_own_term_selects(term, pod, namespaces) for term in affinity)
    return _AffinityFilter(
        affinity=affinity,
        affinity_pairs=frozenset(affinity_pairs),
        first_of_group=not affinity_pairs and matches_itself,
        anti_affinity=anti_affinity,
        anti_affinity_pairs=frozenset(anti_affinity_pairs),
        refused=refused,
    )


# --- score ------------------------------------------------------------------------------


class _TopologyScore:
    """Summed weights per topology key and value."""

    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, int]] = {}

    def add(self, node: NodeInfo, key: str, weight: int) -> None:
        value = node.labels.get(key)
        if value is not None:
            values = self.by_key.setdefault(key, {})
            values[value] = values.get(value, 0) + weight

    def of(self, node: NodeInfo) -> int:
        labels = node.labels
        return sum(values.get(labels[key], 0) for key, values in self.by_key.items() if key in labels)


def _incoming_preferences(pod: PodInfo, cluster: ClusterState, topology: _TopologyScore) -> None:
    preferred, preferred_anti = pod.affinity.preferred, pod.affinity.preferred_anti
    if not preferred and not preferred_anti:
        return
    namespaces = _Namespaces(cluster)
    terms = [weighted.term for weighted in (*preferred, *preferred_anti)]
    for other, node in _placed_for(pod, terms, cluster):
        for weighted in preferred:
            if _own_term_selects(weighted.term, other, namespaces):
                topology.add(node, weighted.term.topology_key, weighted.weight)
        for weighted in preferred_anti:
            if _own_term_selects(weighted.term, other, namespaces):
                topology.add(node, weighted.term.topology_key, -weighted.weight)


def _existing_preferences(pod: PodInfo, cluster: ClusterState, topology: _TopologyScore) -> None:
    namespace_labels = cluster.namespace_labels(pod.namespace) or {}
    if (index := term_index(cluster)) is not None:
        _indexed_preferences(pod, index, cluster, namespace_labels, topology)
        return
    for other, node in _on_nodes(pod, cluster.pods_with_affinity(), cluster):
        for term in other.affinity.required:
            if term.matches(pod, namespace_labels):
                topology.add(node, term.topology_key, HARD_POD_AFFINITY_WEIGHT)
        for weighted in other.affinity.preferred:
            if weighted.term.matches(pod, namespace_labels):
                topology.add(node, weighted.term.topology_key, weighted.weight)
        for weighted in other.affinity.preferred_anti:
            if weighted.term.matches(pod, namespace_labels):
                topology.add(node, weighted.term.topology_key, -weighted.weight)


def _indexed_preferences(
    pod: PodInfo,
    index: AffinityTermIndex,
    state: ClusterState,
    namespace_labels: Mapping[str, str],
    topology: _TopologyScore,
) -> None:
    """:func:`_existing_preferences` over the term index: each distinct term once, its
    weight times the number of its pods on each node (the sums are the same)."""
    kinds: tuple[tuple[TermKind, int], ...] = (("required", 1), ("preferred", 1), ("preferred_anti", -1))
    for kind, sign in kinds:
        for entry, nodes in index.affinity_terms(kind, exclude_uid=pod.uid):
            term: AffinityTerm = entry if kind == "required" else entry.term
            if not term.matches(pod, namespace_labels):
                continue
            weight = HARD_POD_AFFINITY_WEIGHT if kind == "required" else sign * entry.weight
            for name, count in nodes.items():
                node = state.node(name)
                if node is not None:
                    topology.add(node, term.topology_key, weight * count)


def _normalised(raw: Sequence[int]) -> list[int]:
    """upstream's NormalizeScore: min-max onto 0..100, truncated; all 0 when all equal."""
    lowest, highest = min(raw, default=0), max(raw, default=0)
    spread = highest - lowest
    if spread <= 0:
        return [0] * len(raw)
    return [int(float(MAX_NODE_SCORE) * ((score - lowest) / spread)) for score in raw]


def prepare_score(pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]) -> list[int] | None:
    """PreScore, Score and NormalizeScore over ``nodes``; None when no pair got a weight."""
    topology = _TopologyScore()
    _incoming_preferences(pod, cluster, topology)
    _existing_preferences(pod, cluster, topology)
    if not topology.by_key:
        return None
    return _normalised([topology.of(node) for node in nodes])
