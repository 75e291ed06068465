"""The DeviceClass status controller in the operator's one shape: the informers of
classes, slices and claims feed :class:`~draco.operator.deviceclassstatus.service.ClassStatusService`,
whose workers write the status.

The status describes the whole cluster, so it is kept only by an operator that serves
every namespace: the composition root (`operator.root`) leaves this controller out when
``--namespace`` is given (it would see only some claims).
"""

from __future__ import annotations

import asyncio
from typing import Final

from draco.kube.client import Kube, Obj
from draco.kube.informer import ChangeType
from draco.logs import get_logger
from draco.operator.deviceclassstatus.service import FIELD_MANAGER, QUEUE_NAME, WORKERS, ClassStatusService
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.runtime.health import Health
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

    def _on_class(self, type_: ChangeType, obj: Obj) -> None:
        self.service.on_class(obj, deleted=type_ == "DELETED")

    def _on_slice(self, type_: ChangeType, obj: Obj) -> None:
        self.service.on_slice(obj, deleted=type_ == "DELETED")

    async def start(self) -> None:
        service, informers = self.service, self.informers

        async def prime_slices(slices: list[Obj]) -> None:
            # Building every slice's device records takes seconds with 10,000+ devices: in
            # a thread (nothing else touches the service until it is subscribed; slice
            # changes meanwhile are held by the informer and handed over afterwards).
            await service.offload.run(lambda _stop: service.prime_slices(slices))

        await informers.slices.subscribe_primed(self._on_slice, prime_slices)
        # Classes and claims: the caches now, then every change (nothing awaited between).
        service.prime(
            classes=list(informers.classes.values()), slices=[], claims=list(informers.claims.values())
        )
        informers.classes.subscribe(self._on_class, replay=False)
        informers.claims.subscribe(service.on_claim_change, replay=False)
        service.runner = asyncio.create_task(
            service.queue.run(service.sync, workers=WORKERS), name=QUEUE_NAME
        )
        self.health.watch("deviceclass-status-workers", service.runner)
        log.info(
            "DeviceClass status started",
            classes=len(service.classes),
            slices=len(service.slices),
            allocated_claims=len(service.claims),
        )

    async def stop(self) -> None:
        service = self.service
        await service.queue.stop(service.runner)
