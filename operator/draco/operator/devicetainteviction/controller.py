"""The device-taint-eviction controller in the operator's one shape: the informers of
ResourceSlices, DeviceTaintRules, ResourceClaims and Pods feed
:class:`~draco.operator.devicetainteviction.service.EvictionService`.
Off with `draco operator --no-device-taint-eviction` (the composition root leaves it out).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

from draco.api.bodies import ResourceClaimBody, meta_of
from draco.api.corebodies import PodBody
from draco.kube.client import Kube, Obj
from draco.kube.informer import ChangeType
from draco.logs import get_logger
from draco.operator.devicetainteviction.service import FIELD_MANAGER, QUEUE_NAME, EvictionService, Item
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions, serves_namespace
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

    def _served(self, obj: Mapping[str, Any]) -> bool:
        return serves_namespace(meta_of(obj).get("namespace") or "", self.options.namespaces)

    def _on_slice(self, type_: ChangeType, obj: Obj) -> None:
        self.service.on_slice(obj, deleted=type_ == "DELETED")

    def _on_rule(self, type_: ChangeType, obj: Obj) -> None:
        self.service.on_rule(obj, deleted=type_ == "DELETED")

    def _on_claim(self, type_: ChangeType, obj: ResourceClaimBody) -> None:
        if self._served(obj):
            self.service.on_claim(obj, deleted=type_ == "DELETED")

    def _on_pod(self, type_: ChangeType, obj: PodBody) -> None:
        if self._served(obj):
            self.service.on_pod(obj, deleted=type_ == "DELETED")

    async def start(self) -> None:
        service, informers = self.service, self.informers
        # Everything is known before a worker runs (a pool seen in part could look
        # tainted): the caches now, then every change, nothing awaited in between.
        service.prime(
            slices=list(informers.slices.values()),
            rules=list(informers.taint_rules.values()),
            claims=[c for c in informers.claims.values() if self._served(c)],
            pods=[p for p in informers.pods.values() if self._served(p)],
        )
        informers.slices.subscribe(self._on_slice, replay=False)
        informers.taint_rules.subscribe(self._on_rule, replay=False)
        informers.claims.subscribe(self._on_claim, replay=False)
        informers.pods.subscribe(self._on_pod, replay=False)
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
