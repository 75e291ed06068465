"""Device quota's work: count a namespace's claims into ``status.used`` (and
``status.hard``) of device quota's entries of its ResourceQuotas,
``<class>.deviceclass.resource.draco.dev/devices``, as kube-controller-manager's quota
controller does for the entries it knows (`draco.api.quota` counts).

kube-controller-manager leaves entries it has no evaluator for as it finds them: it starts
from the quota's ``status.used``, overwrites what it counted itself, drops what is no
longer in ``spec.hard`` and writes the whole status with the resourceVersion it read. So
the two never undo each other's numbers; a write of one made between the other's read and
write is a conflict, and the loser reads again. Both write ``status.hard`` as
``spec.hard`` says.

The shared entries, ``requests.deviceclass.resource.draco.dev/<class>`` and
``requests.<extendedResourceName>`` (Kubernetes 1.35's extended-resource quota), are
kube-controller-manager's too: its pod evaluator counts the pods' requests there and it
writes that count alone, on its own resync or when a pod goes. This service writes the
pods (counted the same way, from the pod cache) plus the claims, and counts again when it
sees such an entry below its count (`undercounted`); kube-controller-manager never reacts to
``status.used``, so after one of its writes there is one of this service's, and the two
do not loop. Until the correction lands (a watch event and a write: well under a second on
a healthy cluster), the entry shows the pods alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

from draco.api.bodies import meta_of
from draco.api.quota import (
    QuotaNames,
    draco_entries,
    namespace_usage,
    recount_due,
    status_patch,
    undercounted,
)
from draco.errors import NotFoundError
from draco.kube.client import RESOURCE_QUOTAS, Kube
from draco.logs import get_logger
from draco.operator.informers import Informers
from draco.operator.options import serves_namespace
from draco.runtime.workqueue import WorkQueue

__all__ = ["BY_NAMESPACE", "RESYNC_SECONDS", "QuotaService"]

log = get_logger(__name__)

#: Objects by namespace, on the claim, pod and quota informers.
BY_NAMESPACE: Final = "namespace"
#: How often every namespace with device quota's entries is counted again.
RESYNC_SECONDS: Final = 300.0


def namespace_of(obj: Mapping[str, Any]) -> list[str]:
    """The index of objects by namespace."""
    return [str(meta_of(obj).get("namespace") or "")]


class QuotaService:
    """Counts namespaces put on ``queue`` (see the module docstring)."""

    def __init__(
        self, *, kube: Kube, informers: Informers, queue: WorkQueue[str], namespaces: tuple[str, ...]
    ) -> None:
        self.kube = kube
        self.informers = informers
        self.queue = queue
        #: The namespaces the operator serves; empty means all of them.
        self.namespaces = namespaces
        #: The classes' extended resource names as last seen (rebuilt from the cache).
        self._names = QuotaNames()

    def serves(self, namespace: str) -> bool:
        return serves_namespace(namespace, self.namespaces)

    def names(self) -> QuotaNames:
        """The extended resources the DeviceClasses name, as the class cache holds them."""
        return QuotaNames.of(self.informers.classes.values())

    def served_quotas(self) -> list[Any]:
        """The ResourceQuotas of the namespaces this operator serves (what the metrics show)."""
        return [
            q
            for q in list(self.informers.quotas.values())
            if self.serves(str(meta_of(q).get("namespace") or ""))
        ]

    def names_changed(self) -> bool:
        """Whether the classes' extended resource names differ from when this was last asked."""
        names = self.names()
        changed = names != self._names
        self._names = names
        return changed

    def limited(self, namespace: str) -> bool:
        """Whether the namespace has a quota with one of device quota's entries (served by us)."""
        if not self.serves(namespace):
            return False
        names = self.names()
        return any(draco_entries(q, names) for q in self.informers.quotas.by_index(BY_NAMESPACE, namespace))

    def limited_namespaces(self) -> set[str]:
        """The namespaces served with a quota of device quota's entries."""
        names = self.names()
        return {
            namespace
            for q in self.informers.quotas.values()
            if draco_entries(q, names) and self.serves(namespace := namespace_of(q)[0])
        }

    def usage(self, namespace: str, names: QuotaNames) -> dict[str, int]:
        """What the namespace's claims (and, in the shared entries, pods) count now."""
        return namespace_usage(
            self.informers.claims.by_index(BY_NAMESPACE, namespace),
            names=names,
            pods=self.informers.pods.by_index(BY_NAMESPACE, namespace),
        )

    def due(self, quota: Mapping[str, Any]) -> bool:
        """Whether a quota as it is now must be counted again: its entries are not counted
        as its spec says, or a shared entry shows less than the claims and pods count."""
        names = self.names()
        if recount_due(quota, names):
            return True
        if not any(names.shared(str(e)) for e in (quota.get("spec") or {}).get("hard") or {}):
            return False
        return undercounted(quota, self.usage(namespace_of(quota)[0], names), names)

    def quota_changed(self, quota: Mapping[str, Any], namespace: str) -> None:
        """A ResourceQuota changed: count its namespace when the quota is due."""
        if self.serves(namespace) and self.due(quota):
            self.queue.add(namespace)

    def claim_changed(self, namespace: str) -> None:
        """A claim added or removed: its namespace is counted again, if it has a quota."""
        if self.limited(namespace):
            self.queue.add(namespace)

    def class_changed(self) -> None:
        """A DeviceClass changed: when the extended resource names changed (not a status
        write, the class status controller's), every limited namespace is counted again."""
        if self.names_changed():
            for namespace in self.limited_namespaces():
                self.queue.add(namespace)

    async def sync(self, namespace: str) -> float | None:
        """Count the namespace's claims; write each quota's status where it differs."""
        names = self.names()
        quotas = [
            q
            for q in self.informers.quotas.by_index(BY_NAMESPACE, namespace)
            if draco_entries(q, names) or recount_due(q, names)
        ]
        if not quotas:
            return None
        usage = self.usage(namespace, names)
        for quota in quotas:
            patch = status_patch(quota, usage, names)
            if patch is None:
                continue
            meta = meta_of(quota)
            patch["metadata"] = {"resourceVersion": meta.get("resourceVersion")}
            try:
                written = await self.kube.patch(
                    RESOURCE_QUOTAS, str(meta.get("name")), patch, namespace=namespace, subresource="status"
                )
            except NotFoundError:
                continue
            self.informers.quotas.assume(written)
            log.info(
                "Counted device quota",
                quota=f"{namespace}/{meta.get('name')}",
                used=patch["status"].get("used"),
            )
        return None

    async def resync(self) -> None:
        """Every RESYNC_SECONDS, every namespace with device quota's entries, counted again."""
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            for namespace in self.limited_namespaces():
                self.queue.add(namespace)
