"""The pod wait timer in the operator's one shape: its Kopf handler (`handlers.py`), fed by
the pod informer, hands every pod event to :class:`~draco.operator.podwait.tracker.PodWaits`,
which observes ``draco_pod_wait_seconds``. No queue, no workers, no writes.
"""

from __future__ import annotations

from typing import Final

from draco.kube.client import Kube
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.operator.podwait.handlers import PodWaitHandlers
from draco.operator.podwait.tracker import PodWaits
from draco.runtime.health import Health

__all__ = ["PodWaitController"]


class PodWaitController:
    """Built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "pod-wait"

    def __init__(self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health) -> None:
        del kube, health
        self.informers = informers
        self.waits = PodWaits()
        self.handlers = PodWaitHandlers(self.waits, namespaces=options.namespaces)

    async def start(self) -> None:
        self.handlers.follow(self.informers)

    async def stop(self) -> None:
        """Nothing runs: the handler stops with the informers."""
