"""DeviceClass status's reactions, as Kopf event handlers (fed by the operator's informers:
`draco.operator.feed`). Each hands the change to the service (`memo.class_status`,
:class:`~draco.operator.deviceclassstatus.service.ClassStatusService`), which queues the
classes whose counts or validity it may change; its workers write their status.

- a DeviceClass added, changed or gone: that class (judged again: compiled, validated);
- a ResourceSlice added, changed or gone: the classes that may select its devices;
- a claim's allocation made or released: the classes of the devices it holds.
"""

from __future__ import annotations

from typing import Any, Final

import kopf

from draco.api.constants import GROUP, PLURAL_DEVICE_CLASSES, PLURAL_RESOURCE_CLAIMS, PLURAL_RESOURCE_SLICES
from draco.kube.client import Obj
from draco.operator import feed
from draco.operator.deviceclassstatus.service import ClassStatusService
from draco.operator.informers import Informers

__all__ = ["HANDLERS", "follow"]

#: DeviceClass status's handlers (`ClassStatusController.start` subscribes them).
HANDLERS: Final = kopf.OperatorRegistry()


def _service(memo: kopf.Memo) -> ClassStatusService:
    service: ClassStatusService = memo.class_status
    return service


@kopf.on.event(GROUP, PLURAL_DEVICE_CLASSES, id="deviceclass-status/class", registry=HANDLERS)
def class_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    _service(memo).on_class(body, deleted=type == "DELETED")


@kopf.on.event(GROUP, PLURAL_RESOURCE_SLICES, id="deviceclass-status/slice", registry=HANDLERS)
def slice_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    _service(memo).on_slice(body, deleted=type == "DELETED")


@kopf.on.event(GROUP, PLURAL_RESOURCE_CLAIMS, id="deviceclass-status/claim", registry=HANDLERS)
def claim_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    _service(memo).on_claim(body, deleted=type == "DELETED")


async def follow(informers: Informers, memo: kopf.Memo) -> None:
    """Subscribe the handlers after filling the service from the caches: the slices first
    (building every slice's device records takes seconds with 10,000+ devices: in a
    thread; slice changes meanwhile are held by the informer and handed over after), then
    classes and claims as their caches hold them now, then their changes (nothing is
    awaited between a cache read and its subscription)."""
    service = _service(memo)

    async def prime_slices(slices: list[Obj]) -> None:
        await service.offload.run(lambda _stop: service.prime_slices(slices))

    await feed.subscribe_primed(informers.slices, HANDLERS, memo=memo, prime=prime_slices)
    service.prime(classes=list(informers.classes.values()), slices=[], claims=list(informers.claims.values()))
    feed.subscribe(informers.classes, HANDLERS, memo=memo)
    feed.subscribe(informers.claims, HANDLERS, memo=memo)
