"""Device quota's reactions, as Kopf event handlers (fed by the operator's informers:
`draco.operator.feed`). Each puts the namespace to count again on the controller's queue
(`memo.quota`, :class:`~draco.operator.resourcequota.controller.QuotaController`):

- a ResourceQuota whose entries are not counted as its spec says, or whose shared
  ``requests.*`` entries show less than the claims and pods count (`QuotaController.due`);
- a claim added or removed in a namespace with a quota of device quota's entries (a
  claim's spec never changes: neither does what it counts);
- a DeviceClass whose extended resource name appeared, changed or went: it decides which
  entries its claims count (every such namespace).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import kopf

from draco.api.constants import GROUP, PLURAL_DEVICE_CLASSES, PLURAL_RESOURCE_CLAIMS
from draco.operator import feed
from draco.operator.informers import Informers
from draco.operator.options import serves_namespace

if TYPE_CHECKING:
    from draco.operator.resourcequota.controller import QuotaController

__all__ = ["HANDLERS", "follow"]

#: Device quota's handlers (`QuotaController.start` subscribes them).
HANDLERS: Final = kopf.OperatorRegistry()


def _controller(memo: kopf.Memo) -> QuotaController:
    controller: QuotaController = memo.quota
    return controller


@kopf.on.event("v1", "resourcequotas", id="resourcequota/quota", registry=HANDLERS)
def quota_changed(type: str | None, body: Any, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    if (
        type != "DELETED"
        and serves_namespace(namespace or "", controller.options.namespaces)
        and controller.due(body)
    ):
        controller.queue.add(namespace or "")


@kopf.on.event(GROUP, PLURAL_RESOURCE_CLAIMS, id="resourcequota/claim", registry=HANDLERS)
def claim_changed(type: str | None, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    if type == "MODIFIED":
        return  # a claim's spec never changes: what it counts neither
    controller = _controller(memo)
    if controller.limited(namespace or ""):
        controller.queue.add(namespace or "")


@kopf.on.event(GROUP, PLURAL_DEVICE_CLASSES, id="resourcequota/class", registry=HANDLERS)
def class_changed(memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    if controller.names_changed():  # not a status write (the class status controller's)
        for namespace in controller.limited_namespaces():
            controller.queue.add(namespace)


def follow(informers: Informers, memo: kopf.Memo) -> None:
    """Subscribe the handlers: every quota as cached now (``type=None``), then changes;
    claims' and classes' changes only."""
    feed.subscribe(informers.quotas, HANDLERS, memo=memo, listing=True)
    feed.subscribe(informers.claims, HANDLERS, memo=memo)
    feed.subscribe(informers.classes, HANDLERS, memo=memo)
