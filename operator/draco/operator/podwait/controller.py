"""The pod wait timer in the operator's one shape: its Kopf handler (`handlers.py`), fed by
the pod informer, hands every pod event to :class:`~draco.operator.podwait.tracker.PodWaits`,
which observes ``draco_pod_wait_seconds``. No queue, no workers, no writes.
"""

from __future__ import annotations

from typing import Final

import kopf

from draco.kube.client import Kube
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.operator.podwait.handlers import follow
from draco.operator.podwait.tracker import PodWaits
from draco.runtime.health import Health

__all__ = ["PodWaitController"]


class PodWaitController:
    """Built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "pod-wait"

    def __init__(
        self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health, memo: kopf.Memo
    ) -> None:
        del kube, options, health
        self.informers = informers
        self.memo = memo
        self.waits = PodWaits()
        memo.pod_waits = self.waits  # what the handler hands pod events to

    async def start(self) -> None:
        follow(self.informers, self.memo)

    async def stop(self) -> None:
        """Nothing runs: the handler stops with the informers."""
