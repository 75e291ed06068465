"""How long each pod that waited for draco took to be allocated and to be bound.

``draco_pod_wait_seconds{until}``, a histogram observed once per pod and stage, from the
pod's ``creationTimestamp``: ``until="allocated"`` when draco let go of it (its gate
removed, or it is bound by draco itself), ``until="bound"`` when it got its node
(``spec.nodeName``). Upstream's ``scheduler_pod_scheduling_sli_duration_seconds`` times one
scheduler's queue; this times what the user waits for, draco's part and the binding after it.

Only pods seen waiting are timed (the gate is there from creation, so every pod draco
places is, but for those already placed when the operator started). What is kept is one
creation time per such pod until it is bound or gone. The clock is the wall clock (the
creation time is the API server's), at a second's precision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

from prometheus_client import Histogram

from draco.api.bodies import meta_of
from draco.api.corebodies import PodBody
from draco.runtime.metrics import REGISTRY
from draco.scheduling.devicetaints import parse_time
from draco.scheduling.podclaims import waits_for_draco

__all__ = ["POD_WAIT", "PodWaits"]

POD_WAIT: Final = Histogram(
    "draco_pod_wait_seconds",
    "How long pods waited for their devices from their creation: until draco allocated them "
    "(until=allocated) and until they were bound to their node (until=bound).",
    ["until"],
    # upstream's scheduler_pod_scheduling_sli_duration_seconds: 10 ms doubling to ~87 min
    buckets=tuple(0.01 * 2**i for i in range(20)),
    registry=REGISTRY,
)
for _until in ("allocated", "bound"):
    POD_WAIT.labels(until=_until)


@dataclass
class PodWaits:
    """The pods being timed, by UID (see the module docstring)."""

    clock: Callable[[], float] = time.time
    #: Pods seen waiting for draco and not bound yet: their creation time.
    created: dict[str, float] = field(default_factory=dict)
    #: Of those, the ones already counted as allocated.
    allocated: set[str] = field(default_factory=set)

    def pod_event(self, type_: str | None, pod: Mapping[str, Any]) -> None:
        meta = meta_of(pod)
        uid = str(meta.get("uid") or "")
        if type_ == "DELETED" or meta.get("deletionTimestamp"):
            self._forget(uid)
            return
        body = cast(PodBody, pod)
        if waits_for_draco(body):
            if uid not in self.created and (created := parse_time(meta.get("creationTimestamp"))) is not None:
                self.created[uid] = created.timestamp()
            return
        created_at = self.created.get(uid)
        if created_at is None:
            return
        waited = max(0.0, self.clock() - created_at)
        if uid not in self.allocated:
            POD_WAIT.labels(until="allocated").observe(waited)
            self.allocated.add(uid)
        if (body.get("spec") or {}).get("nodeName"):
            POD_WAIT.labels(until="bound").observe(waited)
            self._forget(uid)

    def _forget(self, uid: str) -> None:
        self.created.pop(uid, None)
        self.allocated.discard(uid)
