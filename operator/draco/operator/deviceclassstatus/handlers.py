"""DeviceClass status's reactions, as Kopf event handlers (fed by the operator's informers:
`draco.operator.feed`), bound to the service they hand changes to
(:class:`~draco.operator.deviceclassstatus.service.ClassStatusService`), which queues the
classes whose counts or validity it may change; its workers write their status.

- a DeviceClass added, changed or gone: that class (judged again: compiled, validated);
- a ResourceSlice added, changed or gone: the classes that may select its devices;
- a claim's allocation made or released: the classes of the devices it holds.
"""

from __future__ import annotations

from typing import Any, Final

import kopf

from draco.api.bodies import Obj
from draco.api.constants import GROUP, PLURAL_DEVICE_CLASSES, PLURAL_RESOURCE_CLAIMS, PLURAL_RESOURCE_SLICES
from draco.operator import feed
from draco.operator.deviceclassstatus.service import ClassStatusService
from draco.operator.informers import Informers

__all__ = ["ClassStatusHandlers"]

_ID: Final = "deviceclass-status"


class ClassStatusHandlers:
    """DeviceClass status's Kopf event handlers, on a registry of their own."""

    def __init__(self, service: ClassStatusService) -> None:
        self.service = service
        self.registry = kopf.OperatorRegistry()
        on = feed.on_event(self.registry)
        on(GROUP, PLURAL_DEVICE_CLASSES, id=f"{_ID}/class")(self.class_changed)
        on(GROUP, PLURAL_RESOURCE_SLICES, id=f"{_ID}/slice")(self.slice_changed)
        on(GROUP, PLURAL_RESOURCE_CLAIMS, id=f"{_ID}/claim")(self.claim_changed)

    def class_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.service.on_class(body, deleted=type == "DELETED")

    def slice_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.service.on_slice(body, deleted=type == "DELETED")

    def claim_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.service.on_claim(body, deleted=type == "DELETED")

    async def follow(self, informers: Informers) -> None:
        """Subscribe the handlers after filling the service from the caches: the slices
        first (building every slice's device records takes seconds with 10,000+ devices:
        in a thread; slice changes meanwhile are held by the informer and handed over
        after), then classes and claims as their caches hold them now, then their changes
        (nothing is awaited between a cache read and its subscription)."""
        service = self.service

        async def prime_slices(slices: list[Obj]) -> None:
            await service.offload.run(lambda _stop: service.prime_slices(slices))

        await feed.subscribe_primed(informers.slices, self.registry, prime=prime_slices)
        service.prime(
            classes=list(informers.classes.values()), slices=[], claims=list(informers.claims.values())
        )
        feed.subscribe(informers.classes, self.registry)
        feed.subscribe(informers.claims, self.registry)
