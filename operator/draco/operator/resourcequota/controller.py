"""The device quota controller in the operator's one shape: its Kopf handlers
(`handlers.py`), fed by the informers of quotas, claims and classes, hand changes to
:class:`~draco.operator.resourcequota.service.QuotaService`, whose workers keep
``status.used`` of device quota's entries of ResourceQuotas equal to what the namespace's
claims (and, in the shared entries, pods) count.

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
from typing import Final

from draco.api.quota import draco_entries
from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.operator.resourcequota.handlers import QuotaHandlers
from draco.operator.resourcequota.metrics import QuotaCollector
from draco.operator.resourcequota.service import BY_NAMESPACE, QuotaService, namespace_of
from draco.runtime.health import Health
from draco.runtime.metrics import REGISTRY
from draco.runtime.workqueue import WorkQueue

__all__ = ["QuotaController"]

log = get_logger(__name__)

QUEUE_NAME: Final = "resource_quota"
FIELD_MANAGER: Final = "draco-resourcequota"
WORKERS: Final = 2


class QuotaController:
    """Built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "resourcequota"

    def __init__(self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health) -> None:
        self.informers = informers
        self.health = health
        self.queue: WorkQueue[str] = WorkQueue(QUEUE_NAME)
        self.service = QuotaService(
            kube=kube.with_field_manager(FIELD_MANAGER),
            informers=informers,
            queue=self.queue,
            namespaces=options.namespaces,
        )
        self.handlers = QuotaHandlers(self.service)
        self.runner: asyncio.Task[None] | None = None
        self.resync: asyncio.Task[None] | None = None
        self.collector = QuotaCollector(self.service.served_quotas, names=self.service.names)

    async def start(self) -> None:
        informers = self.informers
        informers.quotas.add_index(BY_NAMESPACE, namespace_of)
        informers.claims.add_index(BY_NAMESPACE, namespace_of)
        informers.pods.add_index(BY_NAMESPACE, namespace_of)
        self.service.names_changed()  # the names as the classes are cached now
        self.handlers.follow(informers)
        self.runner = asyncio.create_task(self.queue.run(self.service.sync, workers=WORKERS), name=QUEUE_NAME)
        self.resync = asyncio.create_task(self.service.resync(), name=f"{QUEUE_NAME}-resync")
        self.health.watch("resourcequota-workers", self.runner)
        REGISTRY.register(self.collector)
        names = self.service.names()
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
