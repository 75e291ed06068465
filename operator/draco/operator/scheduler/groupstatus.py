"""What a group of pods is told (`gangs.py`): why it waits, on each gated member and on its
PodGroup (``FailedScheduling``, once per message), that it was placed or released, and a
draco PodGroup's ``PodGroupInitiallyScheduled`` condition (once True it stays True, as
upstream's)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.api.bodies import Obj, meta_of
from draco.api.constants import (
    POD_GROUP_PLACED_REASON,
    POD_GROUP_SCHEDULED_CONDITION,
    POD_GROUP_TIMED_OUT_REASON,
    POD_GROUP_UNSCHEDULABLE_REASON,
)
from draco.api.corebodies import PodBody
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.informers import POD_GROUPS
from draco.operator.scheduler.executor import REASON_FAILED_SCHEDULING
from draco.operator.scheduler.messages import REASON_SCHEDULED
from draco.operator.scheduler.writes import ClaimWrites, emit
from draco.scheduling.groups import GroupRef
from draco.scheduling.podclaims import bound_by_draco

__all__ = ["REASON_GROUP_RELEASED", "GroupStatus"]

log = get_logger(__name__)

#: draco's: a group held devices past its timeout and was released.
REASON_GROUP_RELEASED: Final = "GroupReleased"


@dataclass
class GroupStatus:
    writes: ClaimWrites
    #: draco's PodGroups, by ``namespace/name``.
    pod_groups: Informer[Obj]
    #: The last message told about each group (told again only when it changes).
    told: dict[str, str] = field(default_factory=dict)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    async def waits(self, ref: GroupRef, gated: Sequence[PodBody], message: str) -> None:
        """Say why the group waits, on each gated member and on the PodGroup (once per
        message: a group that keeps waiting for the same reason is not told again)."""
        if self.told.get(ref.key) == message:
            return
        self.told[ref.key] = message
        log.info("Group waits", group=ref.key, reason=message)
        await asyncio.gather(
            *(self.writes.event(pod, REASON_FAILED_SCHEDULING, message) for pod in gated),
            *(self.writes.mark_unschedulable(pod, message) for pod in gated if bound_by_draco(pod)),
            self._tell_group(ref, REASON_FAILED_SCHEDULING, message, "False", POD_GROUP_UNSCHEDULABLE_REASON),
        )

    def placed(self, ref: GroupRef, message: str) -> None:
        """The group was placed (told in the background)."""
        self.told.pop(ref.key, None)
        self._in_background(self._tell_group(ref, REASON_SCHEDULED, message, "True", POD_GROUP_PLACED_REASON))

    def released(self, ref: GroupRef, members: Sequence[PodBody], message: str) -> None:
        """The group held devices past its timeout and was released (told in the background)."""
        for pod in members:
            self._in_background(self.writes.event(pod, REASON_GROUP_RELEASED, message))
        self._in_background(
            self._tell_group(ref, REASON_GROUP_RELEASED, message, "False", POD_GROUP_TIMED_OUT_REASON)
        )

    def forget(self, ref: GroupRef) -> None:
        self.told.pop(ref.key, None)

    async def _tell_group(
        self, ref: GroupRef, reason: str, message: str, status: str, condition_reason: str
    ) -> None:
        """An Event on the draco PodGroup, and its ``PodGroupInitiallyScheduled`` condition."""
        if ref.convention != "draco":
            return
        obj = self.pod_groups.get(ref.key)
        if obj is None:
            return
        await emit(self.writes.kube, obj, reason, message, type_="Normal" if status == "True" else "Warning")
        conditions = list((obj.get("status") or {}).get("conditions") or [])
        current = next((c for c in conditions if c.get("type") == POD_GROUP_SCHEDULED_CONDITION), None)
        if current is not None and (
            current.get("status") == "True"
            or (current.get("status"), current.get("reason"), current.get("message"))
            == (status, condition_reason, message)
        ):
            return
        condition = {
            "type": POD_GROUP_SCHEDULED_CONDITION,
            "status": status,
            "reason": condition_reason,
            "message": message[:32768],
            "lastTransitionTime": _now(),
            "observedGeneration": meta_of(obj).get("generation") or 0,
        }
        if current is not None and current.get("status") == status:
            condition["lastTransitionTime"] = (
                current.get("lastTransitionTime") or condition["lastTransitionTime"]
            )
        kept = [c for c in conditions if c.get("type") != POD_GROUP_SCHEDULED_CONDITION]
        try:
            await self.writes.kube.patch(
                POD_GROUPS,
                ref.name,
                {"status": {"conditions": [*kept, condition]}},
                namespace=ref.namespace,
                subresource="status",
            )
        except Exception as exc:  # what the condition says, the Events say too
            log.warning("Could not write the PodGroup's condition", group=ref.key, error=str(exc))

    def _in_background(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
