"""The operator's watches: one :class:`~draco.kube.informer.Informer` per kind it reads,
all over the process's one API client, started together before any controller.

Every kind goes through an informer, none through Kopf's watches: what the controllers
know of the cluster (which devices exist, which nodes, which claims hold what) must end
up equal to the API's whatever happens while the operator starts or reconnects, and only
the informer reports as deleted what vanished between a LIST and its WATCH or across a
re-list after a 410 (see `draco.kube.informer`). A slice or a node that a Kopf watch
missed the deletion of stayed in the allocation view until a restart, and its devices
could be chosen.

:meth:`Informers.start` is the sync barrier: it returns once every kind has been listed
(each watch then goes on from its LIST's resourceVersion), so a controller started after
it sees a complete cluster from its first event. Controllers subscribe in their ``start``
(``subscribe`` hands them the cache first as ``ADDED``).

The caches keep what the controllers read, not whole objects: pods, claims and slices
without ``managedFields`` (half of a claim's memory once two managers wrote it); Nodes
without their images, conditions and the rest of a status the operator never reads (a
Node's status is most of its size, and a cluster has thousands).
A consumer gets the whole object of a watch event and the cached form of a deletion found
by a re-list or of a replay, so it must read only what the cache keeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from draco.kube.client import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Obj,
)
from draco.kube.informer import Informer, Source
from draco.operator.stores import without_managed_fields

__all__ = ["Informers", "trim_node", "without_managed_fields"]

#: What a cached Node keeps of its status: what the fit checks and the capacity advertiser read.
_NODE_STATUS: Final = ("allocatable", "capacity")


def trim_node(node: Obj) -> Obj:
    """A Node as the cache keeps it: metadata without managedFields, the spec (taints,
    unschedulable), and of the status only allocatable and capacity."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return {
        "apiVersion": node.get("apiVersion", "v1"),
        "kind": node.get("kind", "Node"),
        "metadata": {k: v for k, v in meta.items() if k not in ("managedFields", "annotations")},
        "spec": node.get("spec") or {},
        "status": {k: status[k] for k in _NODE_STATUS if k in status},
    }


@dataclass(frozen=True)
class Informers:
    """One informer per kind the operator reads (every namespace: see `OperatorOptions`)."""

    pods: Informer
    claims: Informer
    templates: Informer
    classes: Informer
    slices: Informer
    taint_rules: Informer
    nodes: Informer

    @classmethod
    def over(cls, source: Source) -> Informers:
        return cls(
            pods=Informer(source, PODS, trim=without_managed_fields),
            claims=Informer(source, RESOURCE_CLAIMS, trim=without_managed_fields),
            templates=Informer(source, RESOURCE_CLAIM_TEMPLATES, trim=without_managed_fields),
            classes=Informer(source, DEVICE_CLASSES),
            slices=Informer(source, RESOURCE_SLICES, trim=without_managed_fields),
            taint_rules=Informer(source, DEVICE_TAINT_RULES),
            nodes=Informer(source, NODES, trim=trim_node),
        )

    def __iter__(self) -> Iterator[Informer]:
        yield from (
            self.classes,
            self.slices,
            self.taint_rules,
            self.nodes,
            self.templates,
            self.claims,
            self.pods,
        )

    async def start(self) -> None:
        """List every kind (concurrently), then watch each from its LIST: the sync barrier."""
        await asyncio.gather(*(informer.start() for informer in self))

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [task for informer in self for task in informer.tasks]

    async def stop(self) -> None:
        for informer in self:
            await informer.stop()
