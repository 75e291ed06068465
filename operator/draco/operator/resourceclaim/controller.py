"""The claim lifecycle controller in the operator's one shape: its Kopf handlers
(`handlers.py`), fed by the informers of pods and claims (upstream's `pod:` and `claim:`
keys), of templates, DeviceClasses and ResourceQuotas (a pod whose claim could not be
created is retried the moment what it waited for appears, or its namespace's quota
changes), hand changes to :class:`~draco.operator.resourceclaim.lifecycle.Lifecycle`,
whose workers do the work.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Final

from draco.api.bodies import ResourceClaimBody, meta_of
from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.informers import Informers
from draco.operator.metrics import ClaimsCollector
from draco.operator.options import OperatorOptions, serves_namespace
from draco.operator.resourceclaim.handlers import LifecycleHandlers
from draco.operator.resourceclaim.lifecycle import Lifecycle
from draco.runtime.health import Health
from draco.runtime.metrics import REGISTRY
from draco.runtime.workqueue import WorkQueue

__all__ = ["LIFECYCLE_READY", "LifecycleController"]

log = get_logger(__name__)

#: The readiness condition of the lifecycle: it has been handed every pod and claim.
LIFECYCLE_READY: Final = "lifecycle-listed"
#: Upstream's queue name for the resourceclaim controller.
LIFECYCLE_QUEUE: Final = "resource_claim"


class LifecycleController:
    """Built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "lifecycle"

    def __init__(self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health) -> None:
        self.informers = informers
        self.options = options
        self.health = health
        queue: WorkQueue[str] = WorkQueue(LIFECYCLE_QUEUE)
        # The process's own client: its field manager is the operator's.
        self.lifecycle = Lifecycle(
            kube,
            informers=informers,
            queue=queue,
            namespaces=options.namespaces,
            node_label=options.claims_node_label,
        )
        self.handlers = LifecycleHandlers(self.lifecycle)
        self.collector = ClaimsCollector(self._served_claims)
        self.runner: asyncio.Task[None] | None = None
        health.require(LIFECYCLE_READY)

    def _served_claims(self) -> Iterator[ResourceClaimBody]:
        """The claims of the namespaces served (what the ``resource_claims`` gauge counts)."""
        namespaces = self.options.namespaces
        for claim in self.informers.claims.values():
            if serves_namespace(meta_of(claim).get("namespace") or "", namespaces):
                yield claim

    async def start(self) -> None:
        lifecycle = self.lifecycle
        REGISTRY.register(self.collector)
        self.handlers.follow(self.informers)
        await lifecycle.prime()
        self.runner = asyncio.create_task(
            lifecycle.queue.run(lifecycle.sync, workers=self.options.workers), name="draco-lifecycle-workers"
        )
        self.health.watch("lifecycle-workers", self.runner)
        self.health.mark_ready(LIFECYCLE_READY)

    async def stop(self) -> None:
        await self.lifecycle.queue.stop(self.runner)
        with contextlib.suppress(KeyError):
            REGISTRY.unregister(self.collector)
