"""A pod as kube-scheduler's placement rules read it, parsed once per pod version.

The rules of kube-scheduler's profile (`draco.scheduling.profile`) look at two kinds of
pod: the one being placed, and every pod already on a node (bound, or pinned by draco and
about to be bound). Both are a :class:`PodInfo`, the one model of a pod the rules read:
labels, namespace, what the node-only rules check (``nodeName``, ``nodeSelector``, node
affinity, tolerations), the pod (anti-) affinity terms with their selectors compiled,
topology spread constraints, host ports, volumes, and resource requests for every resource
name (`draco.scheduling.requests`: upstream's ``resource.PodRequests``; cpu in
millicores, everything else in units).

What the API server may or may not have done before the scheduler sees a pod differs by
version, and the parse absorbs it: ``matchLabelKeys``/``mismatchLabelKeys`` of pod
affinity terms and ``matchLabelKeys`` of spread constraints are merged into the term's
selector (as kube-apiserver does at creation from 1.31/1.34 on, and kube-scheduler did
itself before); merging a key twice adds an equal requirement, so a pod the API server
already merged reads the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from draco.api.bodies import NodeSelectorTermBody, TolerationBody, meta_of, object_key
from draco.api.constants import DISRUPTION_TARGET_CONDITION, PREEMPTION_BY_SCHEDULER_REASON
from draco.api.corebodies import PodBody, PodSpecBody
from draco.scheduling.labels import NOTHING, LabelSelector, Requirement, label_selector
from draco.scheduling.requests import PodRequests, pod_requests, total_requests

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "AffinityTerm",
    "ControllerRef",
    "HostPort",
    "PodAffinity",
    "PodInfo",
    "PodInfoParser",
    "SpreadConstraint",
    "WeightedAffinityTerm",
    "pod_info",
    "requested_resources",
]


#: What scoring assumes for a container that requests no cpu / memory (upstream's
#: ``DefaultMilliCPURequest`` and ``DefaultMemoryRequest``); filtering never does.
DEFAULT_MILLI_CPU_REQUEST: Final = 100
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A ``PodAffinityTerm``: pods matching ``selector`` in ``namespaces`` (or in namespaces
    whose labels match ``namespace_selector``), counted per value of ``topology_key``.

    ``namespaces`` empty and ``namespace_selector`` None means the owning pod's namespace
    (filled in at parse time, so ``namespaces`` is never empty then); an empty
    ``namespace_selector`` (``{}``) means every namespace."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str

    def matches_namespace(self, namespace: str, namespace_labels: Mapping[str, str] | None) -> bool:
        if namespace in self.namespaces:
            return True
        if self.namespace_selector is None or namespace_labels is None:
            return False
        return self.namespace_selector.matches(namespace_labels)

    def matches(self, pod: PodInfo, namespace_labels: Mapping[str, str] | None) -> bool:
        """Whether ``pod`` (in a namespace labelled ``namespace_labels``) is selected."""
        return self.matches_namespace(pod.namespace, namespace_labels) and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """``spec.affinity.podAffinity`` and ``podAntiAffinity``, compiled."""

    required: tuple[AffinityTerm, ...] = ()
    preferred: tuple[WeightedAffinityTerm, ...] = ()
    required_anti: tuple[AffinityTerm, ...] = ()
    preferred_anti: tuple[WeightedAffinityTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.required or self.preferred or self.required_anti or self.preferred_anti)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A ``TopologySpreadConstraint``; ``matchLabelKeys`` already merged into ``selector``.

    ``node_affinity_policy`` / ``node_taints_policy`` are ``Honor`` or ``Ignore`` with
    upstream's defaults filled in (Honor / Ignore)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: LabelSelector
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port with ``hostPort`` set; ``ip`` is ``0.0.0.0`` when not given."""

    ip: str
    protocol: str
    port: int


@dataclass(frozen=True, slots=True)
class ControllerRef:
    """The owner reference marked ``controller: true`` (PodTopologySpread's system default
    constraints select a pod's siblings through its ReplicationController, ReplicaSet or
    StatefulSet)."""

    api_version: str
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The node it is bound or pinned to; None for the pod being placed.
    node: str | None = None
    #: ``metadata.deletionTimestamp`` is set.
    terminating: bool = False
    affinity: PodAffinity = PodAffinity()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    #: ``spec.volumes`` as written (the volume rules read what they need).
    volumes: tuple[Mapping[str, Any], ...] = ()
    #: Effective requests for every resource the pod names (cpu in millicores).
    requests: Mapping[str, int] = field(default_factory=dict)
    #: cpu and memory as scoring counts them (a container without a request counts
    #: :data:`DEFAULT_MILLI_CPU_REQUEST` / :data:`DEFAULT_MEMORY_REQUEST`).
    nonzero_milli_cpu: int = 0
    nonzero_memory: int = 0
    #: Container images (ImageLocality).
    images: tuple[str, ...] = ()
    priority: int = 0
    #: ``spec.preemptionPolicy`` is ``Never``: the pod evicts nobody (`draco.scheduling.preemption`).
    never_preempts: bool = False
    #: ``status.startTime`` as written (RFC 3339, UTC: its text sorts as its time); empty
    #: when not started. Preemption prefers the nodes whose victims started last.
    started: str = ""
    #: Its ``DisruptionTarget`` condition says it was preempted (being evicted for a pod
    #: of higher priority): as good as gone, whether or not its deletion was written yet.
    preempted: bool = False
    controller: ControllerRef | None = None
    #: What the node-only rules read (NodeName, NodeAffinity, TaintToleration,
    #: NodeUnschedulable): ``spec.nodeName``, ``spec.nodeSelector``, the required node
    #: selector terms (None: no required node affinity), the preferred terms with their
    #: weights, ``spec.tolerations``.
    node_name: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_node_affinity: tuple[NodeSelectorTermBody, ...] | None = None
    preferred_node_affinity: tuple[tuple[int, NodeSelectorTermBody], ...] = ()
    tolerations: Sequence[TolerationBody] = ()
    #: draco's own: the nodes kube-scheduler refused this pod's line on before
    #: (`draco.scheduling.refusal`); only the pod being placed has any.
    avoid: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return object_key(self.namespace, self.name)

    @property
    def placement_key(self) -> str:
        """Equal for pods that the node-only rules answer alike on every node (what the
        view caches those answers by)."""
        return json.dumps(
            [
                self.node_selector,
                self.required_node_affinity,
                self.tolerations,
                self.node_name,
                sorted(self.avoid),
            ],
            sort_keys=True,
            default=str,
        )


# --- requests ---------------------------------------------------------------------------


def requested_resources(spec: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective requests, every resource name (upstream's ``PodRequests``
    without options, `requests.total_requests`)."""
    return total_requests(pod_requests(cast(PodSpecBody, spec)))


def _nonzero(requests: PodRequests, total: Mapping[str, int]) -> tuple[int, int]:
    """cpu and memory as scoring counts them: a container without a request counts the
    defaults, unless pod-level requests set that resource (upstream's
    ``getNonMissingContainerRequests``)."""
    defaults = {"cpu": DEFAULT_MILLI_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST}
    if requests.pod_level:
        defaults = {name: amount for name, amount in defaults.items() if name not in total}
    counted = total_requests(requests, missing=defaults) if defaults else total
    return counted.get("cpu", 0), counted.get("memory", 0)


# --- affinity and spread ----------------------------------------------------------------


def _label_key_requirements(
    labels: Mapping[str, str], match: Sequence[str] | None, mismatch: Sequence[str] | None
) -> list[Requirement]:
    extra = [Requirement(str(k), "In", frozenset({labels[k]})) for k in match or () if k in labels]
    extra += [Requirement(str(k), "NotIn", frozenset({labels[k]})) for k in mismatch or () if k in labels]
    return extra


def _affinity_term(body: Mapping[str, Any], *, namespace: str, labels: Mapping[str, str]) -> AffinityTerm:
    selector_body = body.get("labelSelector")
    selector = label_selector(selector_body)
    if selector_body is not None:
        selector = selector.with_requirements(
            _label_key_requirements(labels, body.get("matchLabelKeys"), body.get("mismatchLabelKeys"))
        )
    namespaces = frozenset(str(n) for n in body.get("namespaces") or [])
    ns_selector_body = body.get("namespaceSelector")
    ns_selector = None if ns_selector_body is None else label_selector(ns_selector_body)
    if not namespaces and ns_selector is None:
        namespaces = frozenset({namespace})
    return AffinityTerm(
        selector=selector,
        namespaces=namespaces,
        namespace_selector=ns_selector,
        topology_key=str(body.get("topologyKey") or ""),
    )


def _terms(
    section: Mapping[str, Any] | None, *, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[AffinityTerm, ...], tuple[WeightedAffinityTerm, ...]]:
    if not section:
        return (), ()
    required = tuple(
        _affinity_term(t, namespace=namespace, labels=labels)
        for t in section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    )
    preferred = tuple(
        WeightedAffinityTerm(
            weight=int(w.get("weight") or 0),
            term=_affinity_term(w.get("podAffinityTerm") or {}, namespace=namespace, labels=labels),
        )
        for w in section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    )
    return required, preferred


def _pod_affinity(spec: Mapping[str, Any], *, namespace: str, labels: Mapping[str, str]) -> PodAffinity:
    affinity = spec.get("affinity") or {}
    required, preferred = _terms(affinity.get("podAffinity"), namespace=namespace, labels=labels)
    required_anti, preferred_anti = _terms(
        affinity.get("podAntiAffinity"), namespace=namespace, labels=labels
    )
    return PodAffinity(
        required=required, preferred=preferred, required_anti=required_anti, preferred_anti=preferred_anti
    )


def _spread(spec: Mapping[str, Any], *, labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    constraints = []
    for body in spec.get("topologySpreadConstraints") or []:
        selector_body = body.get("labelSelector")
        selector = label_selector(selector_body)
        if selector_body is not None:
            selector = selector.with_requirements(
                _label_key_requirements(labels, body.get("matchLabelKeys"), None)
            )
        else:
            selector = NOTHING
        min_domains = body.get("minDomains")
        constraints.append(
            SpreadConstraint(
                max_skew=int(body.get("maxSkew") or 1),
                topology_key=str(body.get("topologyKey") or ""),
                when_unsatisfiable=str(body.get("whenUnsatisfiable") or "DoNotSchedule"),
                selector=selector,
                min_domains=None if min_domains is None else int(min_domains),
                node_affinity_policy=str(body.get("nodeAffinityPolicy") or "Honor"),
                node_taints_policy=str(body.get("nodeTaintsPolicy") or "Ignore"),
            )
        )
    return tuple(constraints)


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Host ports of the containers and of the sidecars (restartable init containers),
    which run for the pod's life too."""
    ports = []
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for container in [*(spec.get("containers") or []), *sidecars]:
        for port in container.get("ports") or []:
            host_port = int(port.get("hostPort") or 0)
            if host_port <= 0:
                continue
            ports.append(
                HostPort(
                    ip=str(port.get("hostIP") or "0.0.0.0"),
                    protocol=str(port.get("protocol") or "TCP"),
                    port=host_port,
                )
            )
    return tuple(ports)


def _controller(metadata: Mapping[str, Any]) -> ControllerRef | None:
    """The first owner reference with ``controller: true`` (as ``metav1.GetControllerOf``)."""
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("controller"):
            return ControllerRef(
                api_version=str(owner.get("apiVersion") or ""),
                kind=str(owner.get("kind") or ""),
                name=str(owner.get("name") or ""),
            )
    return None


def pod_info(
    pod: PodBody | Mapping[str, Any], *, node: str | None = None, avoid: frozenset[str] = frozenset()
) -> PodInfo:
    """The placement record of ``pod`` (JSON); ``node``: where it is bound or pinned;
    ``avoid``: the nodes kube-scheduler refused its line on before. (:class:`PodInfoParser`
    does the same for many pods, sharing what they share.)"""
    return _UNCACHED.parse(pod, node=node, avoid=avoid)


class PodInfoParser:
    """:func:`pod_info` for a stream of pods, sharing what pods of one template share.

    The operator's pod cache holds each spec field once per distinct value (every pod of
    a Deployment points at one ``containers`` list), so the parsed parts are memoised by
    the identity of the objects they come from (the memo keeps those objects alive, so an
    identity is never reused while it is cached). At 20,000 pods this keeps one requests
    map, one affinity and one spread tuple per template, and each pod update costs a few
    dictionary lookups instead of quantity parsing. ``limit`` 0: nothing is memoised."""

    __slots__ = ("_limit", "_memo")

    def __init__(self, *, limit: int = 8192) -> None:
        self._memo: dict[tuple[str, int, int], tuple[object, object, object]] = {}
        self._limit = limit

    def _cached(self, kind: str, first: object, second: object, make: Any) -> Any:
        if not self._limit:
            return make()
        key = (kind, id(first), id(second))
        hit = self._memo.get(key)
        if hit is not None and hit[0] is first and hit[1] is second:
            return hit[2]
        value = make()
        if len(self._memo) >= self._limit:
            self._memo.clear()
        self._memo[key] = (first, second, value)
        return value

    def parse(
        self,
        pod: PodBody | Mapping[str, Any],
        *,
        node: str | None = None,
        avoid: frozenset[str] = frozenset(),
    ) -> PodInfo:
        metadata: Mapping[str, Any] = meta_of(pod)
        spec: Mapping[str, Any] = pod.get("spec") or {}
        namespace = str(metadata.get("namespace") or "")
        labels: Mapping[str, str] = metadata.get("labels") or _NO_LABELS
        containers = spec.get("containers") or ()
        inits = spec.get("initContainers") or ()
        overhead_and_level = (spec.get("overhead"), spec.get("resources"))
        if overhead_and_level == (None, None):
            requests, nonzero, images = self._cached(
                "requests",
                containers,
                inits,
                lambda: _interned_parts(spec),
            )
        else:
            requests, nonzero, images = _interned_parts(spec)
        affinity_body = spec.get("affinity") or _NO_LABELS
        affinity = (
            _NO_AFFINITY
            if not (affinity_body.get("podAffinity") or affinity_body.get("podAntiAffinity"))
            else self._cached(
                f"affinity/{namespace}",
                affinity_body,
                labels,
                lambda: _pod_affinity(spec, namespace=namespace, labels=labels),
            )
        )
        node_affinity = affinity_body.get("nodeAffinity")
        required, preferred = (
            (None, ())
            if not node_affinity
            else self._cached("node-affinity", node_affinity, None, lambda: _node_affinity(node_affinity))
        )
        constraints = spec.get("topologySpreadConstraints")
        spread = (
            ()
            if not constraints
            else self._cached("spread", constraints, labels, lambda: _spread(spec, labels=labels))
        )
        return PodInfo(
            uid=str(metadata.get("uid") or ""),
            namespace=namespace,
            name=str(metadata.get("name") or ""),
            labels=labels,
            node=node,
            terminating=metadata.get("deletionTimestamp") is not None,
            affinity=affinity,
            spread=spread,
            host_ports=_host_ports(spec) if containers and _any_host_port(spec) else (),
            volumes=tuple(spec.get("volumes") or ()),
            requests=requests,
            nonzero_milli_cpu=nonzero[0],
            nonzero_memory=nonzero[1],
            images=images,
            priority=int(spec.get("priority") or 0),
            never_preempts=spec.get("preemptionPolicy") == "Never",
            started=str((pod.get("status") or {}).get("startTime") or ""),
            preempted=_preempted(pod),
            controller=_controller(metadata),
            node_name=spec.get("nodeName") or None,
            node_selector=spec.get("nodeSelector") or _NO_LABELS,
            required_node_affinity=required,
            preferred_node_affinity=preferred,
            tolerations=spec.get("tolerations") or (),
            avoid=avoid,
        )


def _node_affinity(
    node_affinity: Mapping[str, Any],
) -> tuple[tuple[NodeSelectorTermBody, ...] | None, tuple[tuple[int, NodeSelectorTermBody], ...]]:
    """The required node selector terms (None: no required node affinity) and the
    preferred terms with their weights."""
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or None
    terms = None if required is None else tuple(required.get("nodeSelectorTerms") or [])
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    return terms, tuple(
        (int(p.get("weight") or 0), cast(NodeSelectorTermBody, p.get("preference") or {})) for p in preferred
    )


def _preempted(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == DISRUPTION_TARGET_CONDITION
        and c.get("status") == "True"
        and c.get("reason") == PREEMPTION_BY_SCHEDULER_REASON
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


_NO_LABELS: Final[Mapping[str, Any]] = {}
_NO_AFFINITY: Final = PodAffinity()
_UNCACHED: Final = PodInfoParser(limit=0)


def _any_host_port(spec: Mapping[str, Any]) -> bool:
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        for port in container.get("ports") or ():
            if port.get("hostPort"):
                return True
    return False


def _interned_parts(spec: Mapping[str, Any]) -> tuple[Mapping[str, int], tuple[int, int], tuple[str, ...]]:
    images = tuple(
        str(c.get("image"))
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        if c.get("image")
    )
    requests = pod_requests(cast(PodSpecBody, spec))
    total = total_requests(requests)
    return total, _nonzero(requests, total), images
