"""What kube-scheduler's placement rules read of the cluster, as one interface.

The rules (`draco.scheduling.framework`) are pure functions of a pod and a
:class:`ClusterState`. In the operator the state is the allocation's
`draco.scheduling.view.ClusterView`, kept current by watches; in `draco simulate` and in
unit tests it is a :class:`Snapshot` built from lists of objects. Both answer the same
questions: the nodes; the pods placed on each node (bound, or pinned by draco and about
to be bound, which kube-scheduler's cache counts as assumed); the placed pods of a
namespace and those carrying pod (anti-)affinity terms (the indexes the inter-pod rules
need to stay cheap for pods without such terms); namespaces' labels (namespace
selectors); the summed requests per node (every resource, plus scoring's non-zero cpu and
memory); how many nodes hold each container image, and its size (ImageLocality); and the
storage objects the volume rules read, as JSON bodies (CSIStorageCapacities and
VolumeAttachments included: VolumeBinding and NodeVolumeLimits read them). Apart, as
:class:`WorkloadSelectors`: the selectors of Services and workload controllers (the
topology spread kube-scheduler applies by default to a pod that declares none).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, cast, runtime_checkable

from draco.api.bodies import ObjView
from draco.scheduling.labels import LabelSelector
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo

__all__ = [
    "AffinityTermIndex",
    "ClusterState",
    "ImageState",
    "Snapshot",
    "TermKind",
    "WorkloadSelectors",
    "term_index",
    "workload_selectors",
]


class ImageState(NamedTuple):
    """An image as the scheduler's cache sums it up over the nodes (``ImageStateSummary``):
    its size (as the first node that listed the name reported it) and on how many nodes."""

    size: int
    nodes: int


class ClusterState(Protocol):
    def node_names(self) -> Collection[str]: ...

    def node(self, name: str) -> NodeInfo | None: ...

    def pods_on(self, node: str) -> Collection[PodInfo]:
        """Pods placed on ``node`` that still occupy it (not Succeeded or Failed)."""
        ...

    def pods_in(self, namespace: str) -> Collection[PodInfo]:
        """Placed pods of ``namespace`` (any node)."""
        ...

    def pods_with_affinity(self) -> Collection[PodInfo]:
        """Placed pods with any pod affinity or anti-affinity term, required or preferred."""
        ...

    def pods_with_required_anti_affinity(self) -> Collection[PodInfo]: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """The namespace's labels; None when the namespace is not known."""
        ...

    def requested(self, node: str) -> Mapping[str, int]:
        """The summed requests (:attr:`PodInfo.requests`) of the pods on ``node``, and
        under ``pods`` their number."""
        ...

    def requested_nonzero(self, node: str) -> tuple[int, int]:
        """Milli-cpu and memory of the pods on ``node`` as scoring counts them
        (:attr:`PodInfo.nonzero_milli_cpu`, :attr:`PodInfo.nonzero_memory`), summed."""
        ...

    def image_state(self, name: str) -> ImageState | None:
        """The image listed as ``name`` in some node's ``status.images``; None when none does."""
        ...

    # --- storage (JSON bodies of core/v1 and storage.k8s.io/v1 objects)

    def persistent_volume_claim(self, namespace: str, name: str) -> ObjView | None: ...

    def persistent_volume(self, name: str) -> ObjView | None: ...

    def persistent_volumes(self) -> Iterable[ObjView]: ...

    def storage_class(self, name: str) -> ObjView | None: ...

    def csi_node(self, name: str) -> ObjView | None: ...

    def csi_driver(self, name: str) -> ObjView | None: ...

    def csi_storage_capacities(self) -> Iterable[ObjView]: ...

    def volume_attachments(self, node: str) -> Iterable[ObjView]:
        """The VolumeAttachments whose ``spec.nodeName`` is ``node``."""
        ...


#: The kinds of pod affinity terms :class:`AffinityTermIndex` aggregates.
TermKind = Literal["required", "required_anti", "preferred", "preferred_anti"]


@runtime_checkable
class AffinityTermIndex(Protocol):
    """Placed pods' affinity terms aggregated by term, for a :class:`ClusterState` that
    keeps them so (the operator's view): the pods of one template share their terms (one
    object), so the inter-pod rules evaluate each distinct term once instead of walking
    every pod. A state without it is walked pod by pod (`draco.scheduling.interpodaffinity`)."""

    def affinity_terms(
        self, kind: TermKind, *, exclude_uid: str = ""
    ) -> Iterable[tuple[Any, Mapping[str, int]]]:
        """Each distinct term of ``kind`` (an ``AffinityTerm``, or a ``WeightedAffinityTerm``
        for the preferred kinds) with how many placed pods carry it on each node; the pod
        ``exclude_uid`` is not counted."""
        ...


@runtime_checkable
class WorkloadSelectors(Protocol):
    """What PodTopologySpread's system default constraints select a pod's siblings by. A
    :class:`ClusterState` that also answers these gets them applied; one that does not
    leaves pods without constraints unscored by spreading (`draco.scheduling.topologyspread`)."""

    def service_selectors(self, namespace: str) -> Collection[Mapping[str, str]]:
        """``spec.selector`` of each Service of ``namespace`` that has one."""
        ...

    def controller_selector(self, namespace: str, kind: str, name: str) -> LabelSelector | None:
        """The compiled ``spec.selector`` of ReplicationController, ReplicaSet or
        StatefulSet (``kind``) ``namespace/name``; None when it is not known."""
        ...


def term_index(cluster: object) -> AffinityTermIndex | None:
    """``cluster`` when it is an :class:`AffinityTermIndex` (decided once per class, see
    `_class_is`), else None."""
    return cast(AffinityTermIndex, cluster) if _class_is(type(cluster), AffinityTermIndex) else None


def workload_selectors(cluster: object) -> WorkloadSelectors | None:
    """``cluster`` when it answers :class:`WorkloadSelectors` (decided once per class, see
    `_class_is`), else None."""
    return cast(WorkloadSelectors, cluster) if _class_is(type(cluster), WorkloadSelectors) else None


_CLASS_IS: dict[tuple[type, type], bool] = {}


def _class_is(cls: type, protocol: type) -> bool:
    """`isinstance` against a runtime-checkable Protocol walks its members on every call
    (tens of microseconds, asked by several rules for every pod placed); these protocols
    have methods only, so the answer is the class's, and is kept."""
    found = _CLASS_IS.get((cls, protocol))
    if found is None:
        found = _CLASS_IS[(cls, protocol)] = issubclass(cls, protocol)
    return found


@dataclass
class Snapshot:
    """A :class:`ClusterState` and :class:`WorkloadSelectors` over plain collections
    (tests, `draco simulate`).

    ``pods`` are the placed pods (each with its ``node``; :meth:`place` adds one later);
    objects are JSON bodies keyed by name (``claims`` by ``namespace/name``); ``services``
    are selectors per namespace, ``controllers`` compiled selectors keyed
    ``namespace/kind/name``."""

    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    pods: Iterable[PodInfo] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    claims: Mapping[str, ObjView] = field(default_factory=dict)
    volumes: Mapping[str, ObjView] = field(default_factory=dict)
    storage_classes: Mapping[str, ObjView] = field(default_factory=dict)
    csi_nodes: Mapping[str, ObjView] = field(default_factory=dict)
    csi_drivers: Mapping[str, ObjView] = field(default_factory=dict)
    services: Mapping[str, Collection[Mapping[str, str]]] = field(default_factory=dict)
    controllers: Mapping[str, LabelSelector] = field(default_factory=dict)
    storage_capacities: Iterable[ObjView] = ()
    attachments: Iterable[ObjView] = ()
    _by_node: dict[str, list[PodInfo]] = field(init=False, default_factory=lambda: defaultdict(list))
    _by_namespace: dict[str, list[PodInfo]] = field(init=False, default_factory=lambda: defaultdict(list))
    _requested: dict[str, dict[str, int]] = field(init=False, default_factory=dict)
    _nonzero: dict[str, tuple[int, int]] = field(init=False, default_factory=dict)
    _images: dict[str, ImageState] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.pods = tuple(self.pods)
        self.storage_capacities = tuple(self.storage_capacities)
        self.attachments = tuple(self.attachments)
        for pod in self.pods:
            self._count(pod)
        for info in self.nodes.values():
            for image, size in info.images.items():
                known = self._images.get(image)
                self._images[image] = (
                    ImageState(size, 1) if known is None else known._replace(nodes=known.nodes + 1)
                )

    def _count(self, pod: PodInfo) -> None:
        if pod.node is None:
            raise ValueError(f"pod {pod.key} is not placed on a node")
        self._by_node[pod.node].append(pod)
        self._by_namespace[pod.namespace].append(pod)
        requested = self._requested.setdefault(pod.node, {})
        for name, amount in pod.requests.items():
            requested[name] = requested.get(name, 0) + amount
        requested["pods"] = requested.get("pods", 0) + 1
        cpu, memory = self._nonzero.get(pod.node, (0, 0))
        self._nonzero[pod.node] = (cpu + pod.nonzero_milli_cpu, memory + pod.nonzero_memory)

    def place(self, pod: PodInfo) -> None:
        """Count ``pod`` on ``pod.node`` from now on, as if it had been listed placed
        (`draco simulate` places each pod it simulates before it takes the next)."""
        self._count(pod)
        self.pods = (*self.pods, pod)

    def unplace(self, pod: PodInfo) -> None:
        """Undo :meth:`place` (a group's member whose group did not fit whole)."""
        if pod.node is None or pod not in self.pods:
            return
        self._by_node[pod.node].remove(pod)
        self._by_namespace[pod.namespace].remove(pod)
        requested = self._requested[pod.node]
        for name, amount in pod.requests.items():
            requested[name] -= amount
        requested["pods"] -= 1
        cpu, memory = self._nonzero[pod.node]
        self._nonzero[pod.node] = (cpu - pod.nonzero_milli_cpu, memory - pod.nonzero_memory)
        self.pods = tuple(p for p in self.pods if p is not pod)

    def node_names(self) -> Collection[str]:
        return self.nodes.keys()

    def node(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)

    def pods_on(self, node: str) -> Collection[PodInfo]:
        return self._by_node.get(node, [])

    def pods_in(self, namespace: str) -> Collection[PodInfo]:
        return self._by_namespace.get(namespace, [])

    def pods_with_affinity(self) -> Collection[PodInfo]:
        return [pod for pod in self.pods if not pod.affinity.empty]

    def pods_with_required_anti_affinity(self) -> Collection[PodInfo]:
        return [pod for pod in self.pods if pod.affinity.required_anti]

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.namespaces.get(namespace)

    def requested(self, node: str) -> Mapping[str, int]:
        return self._requested.get(node, {})

    def requested_nonzero(self, node: str) -> tuple[int, int]:
        return self._nonzero.get(node, (0, 0))

    def image_state(self, name: str) -> ImageState | None:
        return self._images.get(name)

    def service_selectors(self, namespace: str) -> Collection[Mapping[str, str]]:
        return self.services.get(namespace, ())

    def controller_selector(self, namespace: str, kind: str, name: str) -> LabelSelector | None:
        return self.controllers.get(f"{namespace}/{kind}/{name}")

    def persistent_volume_claim(self, namespace: str, name: str) -> ObjView | None:
        return self.claims.get(f"{namespace}/{name}")

    def persistent_volume(self, name: str) -> ObjView | None:
        return self.volumes.get(name)

    def persistent_volumes(self) -> Iterable[ObjView]:
        return self.volumes.values()

    def storage_class(self, name: str) -> ObjView | None:
        return self.storage_classes.get(name)

    def csi_node(self, name: str) -> ObjView | None:
        return self.csi_nodes.get(name)

    def csi_driver(self, name: str) -> ObjView | None:
        return self.csi_drivers.get(name)

    def csi_storage_capacities(self) -> Iterable[ObjView]:
        return self.storage_capacities

    def volume_attachments(self, node: str) -> Iterable[ObjView]:
        return [a for a in self.attachments if (a.get("spec") or {}).get("nodeName") == node]
