"""The cluster as the placement rules read it, with some pods gone and others placed; pure.

Preemption (`draco.scheduling.preemption`) asks whether a pod would fit were some pods
evicted, and a group's preemption whether its next member fits once the members before
it are placed: the same :class:`~draco.scheduling.cluster.ClusterState` questions, over
the real state with those pods taken away or added, without copying the cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from draco.api.bodies import ObjView
from draco.scheduling.cluster import ClusterState, ImageState, workload_selectors
from draco.scheduling.labels import LabelSelector
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo

__all__ = ["Without"]


class Without:
    """``base`` as the rules read it with the pods whose UIDs are in :attr:`removed` gone
    from their nodes and :attr:`added` placed (a group's members placed before the next)."""

    def __init__(self, base: ClusterState) -> None:
        self.base = base
        self.removed: dict[str, PodInfo] = {}
        self.added: list[PodInfo] = []

    def _gone(self, pods: Iterable[PodInfo]) -> list[PodInfo]:
        return [p for p in pods if p.uid not in self.removed]

    def node_names(self) -> Collection[str]:
        return self.base.node_names()

    def node(self, name: str) -> NodeInfo | None:
        return self.base.node(name)

    def pods_on(self, node: str) -> Collection[PodInfo]:
        return [*self._gone(self.base.pods_on(node)), *(p for p in self.added if p.node == node)]

    def pods_in(self, namespace: str) -> Collection[PodInfo]:
        return [
            *self._gone(self.base.pods_in(namespace)),
            *(p for p in self.added if p.namespace == namespace),
        ]

    def pods_with_affinity(self) -> Collection[PodInfo]:
        return [*self._gone(self.base.pods_with_affinity()), *(p for p in self.added if not p.affinity.empty)]

    def pods_with_required_anti_affinity(self) -> Collection[PodInfo]:
        return [
            *self._gone(self.base.pods_with_required_anti_affinity()),
            *(p for p in self.added if p.affinity.required_anti),
        ]

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.base.namespace_labels(namespace)

    def _changed(self, node: str) -> tuple[list[PodInfo], list[PodInfo]]:
        return (
            [p for p in self.removed.values() if p.node == node],
            [p for p in self.added if p.node == node],
        )

    def requested(self, node: str) -> Mapping[str, int]:
        gone, came = self._changed(node)
        if not gone and not came:
            return self.base.requested(node)
        requested = dict(self.base.requested(node))
        for pods, sign in ((gone, -1), (came, 1)):
            for pod in pods:
                for name, amount in pod.requests.items():
                    requested[name] = requested.get(name, 0) + sign * amount
                requested["pods"] = requested.get("pods", 0) + sign
        return requested

    def requested_nonzero(self, node: str) -> tuple[int, int]:
        cpu, memory = self.base.requested_nonzero(node)
        gone, came = self._changed(node)
        for pods, sign in ((gone, -1), (came, 1)):
            for pod in pods:
                cpu += sign * pod.nonzero_milli_cpu
                memory += sign * pod.nonzero_memory
        return cpu, memory

    def image_state(self, name: str) -> ImageState | None:
        return self.base.image_state(name)

    def service_selectors(self, namespace: str) -> Collection[Mapping[str, str]]:
        selectors = workload_selectors(self.base)
        return selectors.service_selectors(namespace) if selectors is not None else ()

    def controller_selector(self, namespace: str, kind: str, name: str) -> LabelSelector | None:
        selectors = workload_selectors(self.base)
        return selectors.controller_selector(namespace, kind, name) if selectors is not None else None

    def persistent_volume_claim(self, namespace: str, name: str) -> ObjView | None:
        return self.base.persistent_volume_claim(namespace, name)

    def persistent_volume(self, name: str) -> ObjView | None:
        return self.base.persistent_volume(name)

    def persistent_volumes(self) -> Iterable[ObjView]:
        return self.base.persistent_volumes()

    def storage_class(self, name: str) -> ObjView | None:
        return self.base.storage_class(name)

    def csi_node(self, name: str) -> ObjView | None:
        return self.base.csi_node(name)

    def csi_driver(self, name: str) -> ObjView | None:
        return self.base.csi_driver(name)

    def csi_storage_capacities(self) -> Iterable[ObjView]:
        return self.base.csi_storage_capacities()

    def volume_attachments(self, node: str) -> Iterable[ObjView]:
        return self.base.volume_attachments(node)
