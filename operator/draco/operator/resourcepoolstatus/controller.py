"""The pool status request controller in the operator's one shape: its Kopf handler
(`handlers.py`), fed by the informer of ResourcePoolStatusRequests, hands unanswered
requests to :class:`~draco.operator.resourcepoolstatus.service.PoolStatusService`, whose
worker answers them over the allocation's inventory, and whose sweep deletes old ones.

It is built with the allocation's inventory (``inventory``: what
`AllocationService.current_inventory` answers), which the composition root
(`operator.root.build_controllers`) hands it from the allocation controller built before
it: the controllers stay independent of each other (no import between them), and nothing
is looked up at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

from draco.allocator.inventory import Inventory
from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.operator.resourcepoolstatus.handlers import PoolStatusHandlers
from draco.operator.resourcepoolstatus.service import FIELD_MANAGER, QUEUE_NAME, PoolStatusService
from draco.runtime.health import Health
from draco.runtime.workqueue import WorkQueue

__all__ = ["PoolStatusController"]

log = get_logger(__name__)


class PoolStatusController:
    """Built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "resourcepoolstatus"

    def __init__(
        self,
        *,
        kube: Kube,
        informers: Informers,
        options: OperatorOptions,
        health: Health,
        inventory: Callable[[], Awaitable[Inventory]],
    ) -> None:
        del options  # (the inventory covers the whole cluster whatever --namespace says)
        self.informers = informers
        self.health = health
        self.service = PoolStatusService(
            kube=kube.with_field_manager(FIELD_MANAGER),
            requests=informers.pool_status_requests,
            queue=WorkQueue(QUEUE_NAME),
            inventory=inventory,
        )
        self.handlers = PoolStatusHandlers(self.service)

    async def start(self) -> None:
        service = self.service
        self.handlers.follow(self.informers)
        service.runner = asyncio.create_task(service.queue.run(service.sync), name=QUEUE_NAME)
        service.sweeper = asyncio.create_task(service.sweep_forever(), name=f"{QUEUE_NAME}-sweep")
        self.health.watch("resourcepoolstatus-workers", service.runner)
        log.info("Pool status requests started", requests=len(self.informers.pool_status_requests))

    async def stop(self) -> None:
        service = self.service
        if service.sweeper is not None:
            service.sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await service.sweeper
        await service.queue.stop(service.runner)
