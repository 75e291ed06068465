"""The pod wait timer's reaction, as a Kopf event handler (fed by the operator's pod
informer: `draco.operator.feed`): every pod event of a served namespace goes to
`memo.pod_waits` (:class:`~draco.operator.podwait.tracker.PodWaits`).
"""

from __future__ import annotations

from typing import Any, Final

import kopf

from draco.operator import feed
from draco.operator.informers import Informers
from draco.operator.options import serves_namespace
from draco.operator.podwait.tracker import PodWaits

__all__ = ["HANDLERS", "follow"]

#: The timer's handler (`PodWaitController.start` subscribes it).
HANDLERS: Final = kopf.OperatorRegistry()


@kopf.on.event("v1", "pods", id="pod-wait/pod", registry=HANDLERS)
def pod_changed(type: str | None, body: Any, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    if serves_namespace(namespace or "", memo.namespaces):
        waits: PodWaits = memo.pod_waits
        waits.pod_event(type, body)


def follow(informers: Informers, memo: kopf.Memo) -> None:
    """Subscribe the handler: every pod as cached now (``type=None``: the waiting ones are
    timed from their creation), then changes."""
    feed.subscribe(informers.pods, HANDLERS, memo=memo, listing=True)
