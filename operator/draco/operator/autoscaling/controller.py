"""The autoscaling controller (`--autoscaling`, docs/autoscaling.md), in the operator's one
shape: built with what it needs, started once the informers are synced, stopped at the end.

Its service (`service.DemandService`) is what the allocation reports the pods it cannot
place to (`reports`, handed to the allocation controller at construction by the
composition root); the scale-down protection (`protection.Protection`) runs beside it.
"""

from __future__ import annotations

import asyncio
from typing import Final

from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.autoscaling.handlers import AutoscalingHandlers
from draco.operator.autoscaling.protection import Protection
from draco.operator.autoscaling.service import DemandService
from draco.operator.autoscaling.templates import Templates
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.runtime.health import Health
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.demand import DemandReports

__all__ = ["FIELD_MANAGER", "AutoscalingController"]

log = get_logger(__name__)

#: Who the autoscaling controller's writes are from (managedFields).
FIELD_MANAGER: Final = "draco-autoscaling"
QUEUE_NAME: Final = "autoscaling"
WORKERS: Final = 4


class AutoscalingController:
    name: Final = "autoscaling"

    def __init__(self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health) -> None:
        self.informers = informers
        self.health = health
        kube = kube.with_field_manager(FIELD_MANAGER)
        namespace = options.autoscaling_namespace
        self.service = DemandService(
            kube=kube,
            informers=informers,
            namespace=namespace,
            queue=WorkQueue(QUEUE_NAME),
            templates=Templates(kube=kube, namespace=namespace),
            provisioning_requests=options.autoscaling_provisioning_requests,
        )
        self.protection = Protection(kube=kube, informers=informers)
        self._protecting: asyncio.Task[None] | None = None
        self.handlers = AutoscalingHandlers(self.service, protection=self.protection)

    @property
    def reports(self) -> DemandReports:
        """Where the allocation reports the pods it cannot place."""
        return self.service

    async def start(self) -> None:
        service = self.service
        self.handlers.follow(self.informers)
        await service.sweep()  # what a previous operator left
        service.runner = asyncio.create_task(
            service.queue.run(service.sync, workers=WORKERS), name=QUEUE_NAME
        )
        service.sweeper = asyncio.create_task(service.sweep_forever(), name="autoscaling-sweep")
        self._protecting = asyncio.create_task(self.protection.run(), name="autoscaling-protection")
        self.health.watch("autoscaling-workers", service.runner)
        self.protection.poke()
        log.info(
            "Autoscaling started",
            namespace=service.namespace,
            provisioning_requests=service.provisioning_requests,
        )

    async def stop(self) -> None:
        service = self.service
        await service.queue.stop(service.runner)
        for task in (service.sweeper, self._protecting):
            if task is not None:
                task.cancel()
