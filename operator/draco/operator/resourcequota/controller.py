"""The device quota controller in the operator's one shape (its Kopf handlers in
`handlers.py`, fed by the informers of quotas and claims): it keeps ``status.used`` (and
``status.hard``) of draco's entries of ResourceQuotas, ``<class>.deviceclass.resource.draco.dev/devices``,
equal to what the namespace's claims count (`draco.api.quota`), as kube-controller-manager's
quota controller does for the entries it knows.

kube-controller-manager leaves entries it has no evaluator for as it finds them: it starts
from the quota's ``status.used``, overwrites what it counted itself, drops what is no
longer in ``spec.hard`` and writes the whole status with the resourceVersion it read. So
the two never undo each other's numbers; a write of one made between the other's read and
write is a conflict, and the loser reads again. Both write ``status.hard`` as
``spec.hard`` says.

The shared entries, ``requests.deviceclass.resource.draco.dev/<class>`` and
``requests.<extendedResourceName>`` (Kubernetes 1.35's extended-resource quota), are
kube-controller-manager's too: its pod evaluator counts the pods' requests there and it
writes that count alone, on its own resync or when a pod goes. This controller writes the
pods (counted the same way, from the pod cache) plus the claims, and counts again when it
sees such an entry below its count (`undercounted`); kube-controller-manager never reacts to
``status.used``, so after one of its writes there is one of this controller's, and the two
do not loop. Until the correction lands (a watch event and a write: well under a second on
a healthy cluster), the entry shows the pods alone.

A namespace is counted again when one of its claims is added or removed (a claim's spec
never changes), when device quota's entries of one of its quotas change (`recount_due`), when
a shared entry shows less than it counts, when a DeviceClass changes (what its extended
resource is named), and every five minutes (kube-controller-manager's default resync): the
webhook charges a claim at admission, and only a recount takes back the charge of a claim
whose creation failed after that. Other changes of ``status.used`` (the webhook's charges,
the counts of this controller) start no count: the claim being admitted may not be in the
cache yet, and counting without it would give back what was just charged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Final

import kopf

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
from draco.operator.options import OperatorOptions, serves_namespace
from draco.operator.resourcequota.handlers import follow
from draco.operator.resourcequota.metrics import QuotaCollector
from draco.runtime.health import Health
from draco.runtime.metrics import REGISTRY
from draco.runtime.workqueue import WorkQueue

__all__ = ["QuotaController"]

log = get_logger(__name__)

QUEUE_NAME: Final = "resource_quota"
FIELD_MANAGER: Final = "draco-resourcequota"
#: Objects by namespace, on the claim and quota informers.
BY_NAMESPACE: Final = "namespace"
#: How often every namespace with draco's entries is counted again.
RESYNC_SECONDS: Final = 300.0
WORKERS: Final = 2


def _namespace(obj: Mapping[str, Any]) -> list[str]:
    return [str(meta_of(obj).get("namespace") or "")]


class QuotaController:
    """Built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "resourcequota"

    def __init__(
        self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health, memo: kopf.Memo
    ) -> None:
        self.kube = kube.with_field_manager(FIELD_MANAGER)
        self.memo = memo
        memo.quota = self  # what the handlers hand changes to
        self.informers = informers
        self.options = options
        self.health = health
        self.queue: WorkQueue[str] = WorkQueue(QUEUE_NAME)
        self.runner: asyncio.Task[None] | None = None
        self.resync: asyncio.Task[None] | None = None
        #: The classes' extended resource names as last seen (rebuilt from the cache).
        self._names = QuotaNames()
        self.collector = QuotaCollector(self._served_quotas, names=self.names)

    def names(self) -> QuotaNames:
        """The extended resources the DeviceClasses name, as the class cache holds them."""
        return QuotaNames.of(self.informers.classes.values())

    def names_changed(self) -> bool:
        """Whether the classes' extended resource names differ from when this was last asked."""
        names = self.names()
        changed = names != self._names
        self._names = names
        return changed

    def _served_quotas(self) -> list[Any]:
        return [
            q
            for q in list(self.informers.quotas.values())
            if serves_namespace(str(meta_of(q).get("namespace") or ""), self.options.namespaces)
        ]

    def limited(self, namespace: str) -> bool:
        """Whether the namespace has a quota with one of device quota's entries (served by us)."""
        if not serves_namespace(namespace, self.options.namespaces):
            return False
        names = self.names()
        return any(draco_entries(q, names) for q in self.informers.quotas.by_index(BY_NAMESPACE, namespace))

    def usage(self, namespace: str, names: QuotaNames) -> dict[str, int]:
        """What the namespace's claims (and, in the shared entries, pods) count now."""
        return namespace_usage(
            self.informers.claims.by_index(BY_NAMESPACE, namespace),
            names=names,
            pods=self.informers.pods.by_index(BY_NAMESPACE, namespace),
        )

    def due(self, quota: Mapping[str, Any]) -> bool:
        """Whether a quota as it is now must be counted again (see the module docstring)."""
        names = self.names()
        if recount_due(quota, names):
            return True
        if not any(names.shared(str(e)) for e in (quota.get("spec") or {}).get("hard") or {}):
            return False
        return undercounted(quota, self.usage(_namespace(quota)[0], names), names)

    def limited_namespaces(self) -> set[str]:
        """The namespaces served with a quota of device quota's entries."""
        names = self.names()
        return {
            namespace
            for q in self.informers.quotas.values()
            if draco_entries(q, names)
            and serves_namespace(namespace := _namespace(q)[0], self.options.namespaces)
        }

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

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            for namespace in self.limited_namespaces():
                self.queue.add(namespace)

    async def start(self) -> None:
        informers = self.informers
        informers.quotas.add_index(BY_NAMESPACE, _namespace)
        informers.claims.add_index(BY_NAMESPACE, _namespace)
        informers.pods.add_index(BY_NAMESPACE, _namespace)
        self._names = self.names()
        follow(informers, self.memo)
        self.runner = asyncio.create_task(self.queue.run(self.sync, workers=WORKERS), name=QUEUE_NAME)
        self.resync = asyncio.create_task(self._resync(), name=f"{QUEUE_NAME}-resync")
        self.health.watch("resourcequota-workers", self.runner)
        REGISTRY.register(self.collector)
        names = self.names()
        log.info(
            "Device quota started",
            quotas=sum(1 for q in informers.quotas.values() if draco_entries(q, names)),
        )

    async def stop(self) -> None:
        with contextlib.suppress(KeyError):
            REGISTRY.unregister(self.collector)
        if self.resync is not None:
            self.resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.resync
        await self.queue.stop(self.runner)
