"""The pod wait timer's reaction, as a Kopf event handler (fed by the operator's pod
informer: `draco.operator.feed`), bound to what it hands pod events to: every pod event of
a served namespace goes to :class:`~draco.operator.podwait.tracker.PodWaits`.
"""

from __future__ import annotations

from typing import Any

import kopf

from draco.operator import feed
from draco.operator.informers import Informers
from draco.operator.options import serves_namespace
from draco.operator.podwait.tracker import PodWaits

__all__ = ["PodWaitHandlers"]


class PodWaitHandlers:
    """The timer's Kopf event handler, on a registry of its own; ``namespaces``: the
    namespaces the operator serves (empty: all)."""

    def __init__(self, waits: PodWaits, *, namespaces: tuple[str, ...]) -> None:
        self.waits = waits
        self.namespaces = namespaces
        self.registry = kopf.OperatorRegistry()
        feed.on_event(self.registry)("v1", "pods", id="pod-wait/pod")(self.pod_changed)

    def pod_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if serves_namespace(namespace or "", self.namespaces):
            self.waits.pod_event(type, body)

    def follow(self, informers: Informers) -> None:
        """Subscribe the handler: every pod as cached now (``type=None``: the waiting ones are
        timed from their creation), then changes."""
        feed.subscribe(informers.pods, self.registry, listing=True)
