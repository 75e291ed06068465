"""The DeviceClass status controller in the operator's one shape: its Kopf handlers
(`handlers.py`), fed by the informers of classes, slices and claims, hand changes to
:class:`~draco.operator.deviceclassstatus.service.ClassStatusService`, whose workers write
the status.

The status describes the whole cluster, so it is kept only by an operator that serves
every namespace: the composition root (`operator.root`) leaves this controller out when
``--namespace`` is given (it would see only some claims).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.deviceclassstatus.handlers import ClassStatusHandlers
from draco.operator.deviceclassstatus.metrics import ClassCollector
from draco.operator.deviceclassstatus.service import FIELD_MANAGER, QUEUE_NAME, WORKERS, ClassStatusService
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.runtime.health import Health
from draco.runtime.metrics import REGISTRY
from draco.runtime.workqueue import WorkQueue

__all__ = ["ClassStatusController"]

log = get_logger(__name__)


class ClassStatusController:
    """Built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "deviceclass-status"

    def __init__(self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health) -> None:
        del options  # (the root decides whether this controller runs at all)
        self.informers = informers
        self.health = health
        queue: WorkQueue[str] = WorkQueue(QUEUE_NAME)
        self.service = ClassStatusService(kube=kube.with_field_manager(FIELD_MANAGER), queue=queue)
        self.handlers = ClassStatusHandlers(self.service)
        self.collector = ClassCollector(informers.classes.values)

    async def start(self) -> None:
        service = self.service
        await self.handlers.follow(self.informers)
        service.runner = asyncio.create_task(
            service.queue.run(service.sync, workers=WORKERS), name=QUEUE_NAME
        )
        self.health.watch("deviceclass-status-workers", service.runner)
        REGISTRY.register(self.collector)
        log.info(
            "DeviceClass status started",
            classes=len(service.classes),
            slices=len(service.slices),
            allocated_claims=len(service.claims),
        )

    async def stop(self) -> None:
        with contextlib.suppress(KeyError):
            REGISTRY.unregister(self.collector)
        service = self.service
        await service.queue.stop(service.runner)
