"""The device-taint-eviction controller in the operator's one shape: its Kopf handlers
(`handlers.py`), fed by the informers of ResourceSlices, DeviceTaintRules, ResourceClaims
and Pods, hand changes to :class:`~draco.operator.devicetainteviction.service.EvictionService`,
whose workers evict.
Off with `draco operator --no-device-taint-eviction` (the composition root leaves it out).
"""

from __future__ import annotations

import asyncio
from typing import Final

from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.devicetainteviction.handlers import EvictionHandlers
from draco.operator.devicetainteviction.service import FIELD_MANAGER, QUEUE_NAME, EvictionService, Item
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.runtime.health import Health
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.eviction import EvictionState

__all__ = ["EvictionController"]

log = get_logger(__name__)


class EvictionController:
    """Built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "device-taint-eviction"

    def __init__(self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health) -> None:
        self.informers = informers
        self.options = options
        self.health = health
        queue: WorkQueue[Item] = WorkQueue(QUEUE_NAME)
        # Pods are read from the pod informer (the state keeps no copy of them).
        self.service = EvictionService(
            kube=kube.with_field_manager(FIELD_MANAGER), queue=queue, state=EvictionState(pods=informers.pods)
        )
        self.handlers = EvictionHandlers(self.service, namespaces=options.namespaces)

    async def start(self) -> None:
        service, informers = self.service, self.informers
        self.handlers.follow(informers)
        service.runner = asyncio.create_task(
            service.queue.run(service.sync, workers=self.options.workers), name=QUEUE_NAME
        )
        self.health.watch("device-taint-eviction-workers", service.runner)
        log.info(
            "Device taint eviction started",
            rules=len(service.state.rules),
            allocated_claims=len(service.state.claims),
            pods=len(informers.pods),
            pending=len(service.state.pending),
        )

    async def stop(self) -> None:
        service = self.service
        await service.queue.stop(service.runner)
