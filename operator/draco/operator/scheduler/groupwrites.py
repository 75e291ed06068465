"""The writes of a group's placement (`gangs.py`): every member's claims, then the binding
conditions of all, then every member pinned and un-gated; a group released whole; what a
group is told (Events on its members and its PodGroup, the PodGroup's condition).

The order is the single pod's (`writes.py`, `allocation.py`), widened to the group: no
member's gate comes off before every member's claims are written and their devices bound,
so a group is never partly released by a failure on the way; a failure there releases what
this attempt wrote (the group holds nothing) and the group is decided again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from draco.api import summarize_claim_status
from draco.api.bodies import ReferenceBody, ResourceClaimBody, ResourceClaimStatusBody, key_of, meta_of
from draco.api.constants import (
    POD_GROUP_PLACED_REASON,
    POD_GROUP_SCHEDULED_CONDITION,
    POD_GROUP_TIMED_OUT_REASON,
    POD_GROUP_UNSCHEDULABLE_REASON,
)
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube.client import RESOURCE_CLAIMS, ConflictError, NotFoundError
from draco.logs import get_logger
from draco.operator.informers import POD_GROUPS
from draco.operator.scheduler.messages import REASON_SCHEDULED, placed_event
from draco.operator.scheduler.outcome import Outcome
from draco.scheduling.groups import GroupPlan, GroupPolicy, GroupRef, MemberChoice
from draco.scheduling.podclaims import bound_by_draco, group_reference, is_group_reference
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.wakeups import CLAIMS_ONLY

if TYPE_CHECKING:
    from draco.operator.scheduler.allocation import AllocationService

__all__ = ["REASON_GROUP_RELEASED", "GroupMember", "GroupWrites"]

log = get_logger(__name__)

#: Upstream's reasons: no node fits (on members and on the PodGroup), allocated and placed.
REASON_FAILED_SCHEDULING: Final = "FailedScheduling"
#: draco's: a group held devices past its timeout and was released.
REASON_GROUP_RELEASED: Final = "GroupReleased"
#: How many claims of a group are written at once.
WRITE_CONCURRENCY: Final = 32


class GroupMember(Protocol):
    """What the writes read of a member (`gangs._Member`)."""

    key: str
    pod: PodBody
    info: PodInfo
    claims: list[ResourceClaimBody]
    unrecorded: dict[str, str | None] | None
    group_claims: frozenset[str]


@dataclass
class GroupWrites:
    service: AllocationService
    #: The last message told about each group (told again only when it changes).
    told: dict[str, str] = field(default_factory=dict)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    # --- placing ------------------------------------------------------------------------------

    async def commit(  # size: the whole order of a group's writes in one place, failures included
        self,
        ref: GroupRef,
        policy: GroupPolicy,
        members: Sequence[GroupMember],
        plan: GroupPlan,
        held: Sequence[str],
        *,
        waits_on: frozenset[str],
        left: float,
    ) -> Outcome:
        """Write the claims of every chosen member, wait for their binding conditions,
        then pin and un-gate them all (the promises of the decision end here)."""
        service = self.service
        by_key = {m.key: m for m in members}
        chosen = [(by_key[c.key], c) for c in plan.chosen]
        try:
            written = await self._write_claims(ref, policy, chosen)
        except BaseException:
            service.view.abandon(held)
            self._withdraw(chosen)
            await self.release(ref, members, policy)
            raise
        service.view.abandon(held)  # what was written left the in-flight hold already
        again: float | None = None
        for member, _choice in chosen:
            claims = [written[key_of(c)] for c in member.claims if key_of(c) in written]
            binding = await service.writes.check_binding(member.pod, claims)
            if binding is None:
                continue
            self._withdraw(chosen)
            if binding[0] == "binding_failed":
                await self.release(ref, members, policy)
                return Outcome("binding_failed", again=binding[1], waits_on=waits_on, interest=CLAIMS_ONLY)
            again = binding[1] if again is None else min(again, binding[1] or again)
        if again is not None:
            return Outcome(
                "waiting", again=max(min(again, left), 0.0), waits_on=waits_on, interest=CLAIMS_ONLY
            )
        failed = await self._pin_all(ref, chosen, written)
        for failure in plan.left:
            service.enqueue(failure.key)  # beyond the count: placed alone, later
        if failed:
            return Outcome("conflict", again=0.0, waits_on=waits_on)
        self.told.pop(ref.key, None)
        message = (
            f"{len(chosen)} pod(s) placed together: "
            + ", ".join(f"{m.key.partition('/')[2]} on {c.node}" for m, c in chosen[:8])
            + (f" and {len(chosen) - 8} more" if len(chosen) > 8 else "")
        )
        if plan.domain is not None:
            message += f" (in {plan.domain.label})"
        self._in_background(self._tell_group(ref, REASON_SCHEDULED, message, "True", POD_GROUP_PLACED_REASON))
        log.info(
            "Placed group", group=ref.key, pods=len(chosen), domain=plan.domain.label if plan.domain else None
        )
        return Outcome("allocated")

    async def _write_claims(
        self, ref: GroupRef, policy: GroupPolicy, chosen: Sequence[tuple[GroupMember, MemberChoice]]
    ) -> dict[str, ResourceClaimBody]:
        """Every claim of the chosen members written once per claim (concurrently across
        claims): the allocation with the first member that chose it, a reservation per
        member (a claim of the group: one reservation, the PodGroup's)."""
        allocations = {key: value for _, choice in chosen for key, value in choice.allocations.items()}
        plan: dict[str, list[tuple[GroupMember, MemberChoice, Any]]] = {}
        bodies: dict[str, ResourceClaimBody] = {}
        for member, choice in chosen:
            for claim in member.claims:
                key = key_of(claim)
                bodies.setdefault(key, claim)
                plan.setdefault(key, []).append((member, choice, allocations.pop(key, None)))
        group = group_reference(ref.name, policy.uid) if policy.uid and ref.convention == "draco" else None
        written: dict[str, ResourceClaimBody] = {}
        limit = asyncio.Semaphore(WRITE_CONCURRENCY)

        async def write(key: str) -> None:
            async with limit:
                current = bodies[key]
                for member, choice, allocation in plan[key]:
                    reference = group if key in member.group_claims else None
                    current = await self.service.writes.write_claim(
                        current, member.pod, allocation, node=choice.node, reference=reference
                    )
                written[key] = current

        try:
            async with asyncio.TaskGroup() as tasks:
                for key in plan:
                    tasks.create_task(write(key))
        except BaseExceptionGroup as group_error:
            raise _first(group_error) from None
        return written

    async def _pin_all(
        self,
        ref: GroupRef,
        chosen: Sequence[tuple[GroupMember, MemberChoice]],
        written: Mapping[str, ResourceClaimBody],
    ) -> list[str]:
        """Pin and un-gate every chosen member, at once; the keys of those that failed."""
        service = self.service
        answers = await asyncio.gather(
            *(service.writes.pin(m.pod, c.node, statuses=m.unrecorded) for m, c in chosen),
            return_exceptions=True,
        )
        failed: list[str] = []
        for (member, choice), answer in zip(chosen, answers, strict=True):
            service.view.withdraw_promise(member.key)
            if isinstance(answer, BaseException):
                if not isinstance(answer, KubeError):
                    raise answer
                failed.append(member.key)
                log.warning(
                    "Could not un-gate a pod of a placed group",
                    group=ref.key,
                    pod=member.key,
                    error=str(answer),
                )
                continue
            service.gated_pods.pop(member.key, None)
            service.waiters.forget(member.key)
            service.pods.assume(answer)  # counted as placed by its group at once
            service.view.upsert_pod(answer, info=dataclasses.replace(member.info, node=choice.node))
            claims = [written.get(key_of(c), c) for c in member.claims]
            self._in_background(
                service.writes.event(
                    member.pod, *placed_event(member.pod, choice.node, claims), type_="Normal"
                )
            )
        return failed

    def _withdraw(self, chosen: Sequence[tuple[GroupMember, MemberChoice]]) -> None:
        for member, _ in chosen:
            self.service.view.withdraw_promise(member.key)

    # --- releasing ----------------------------------------------------------------------------

    async def release(
        self,
        ref: GroupRef,
        members: Sequence[GroupMember],
        policy: GroupPolicy,
        *,
        timed_out: float | None = None,
    ) -> None:
        """Give back every device the gated members hold: their reservations removed, and a
        claim that only they (or their group) held deallocated."""
        uids = {str(meta_of(m.pod).get("uid", "")) for m in members}
        seen: set[str] = set()
        released = 0
        for member in members:
            for claim in member.claims:
                key = key_of(claim)
                if key in seen:
                    continue
                seen.add(key)
                if await self._release_claim(key, claim, uids, policy.uid):
                    released += 1
        if timed_out is not None:
            message = (
                f"{ref.describe()} held devices for {timed_out:g}s without all its pods placed; "
                f"released {released} claim(s), the group is placed again after its backoff"
            )
            log.warning("Released group after its timeout", group=ref.key, claims=released)
            for member in members:
                self._in_background(self.service.writes.event(member.pod, REASON_GROUP_RELEASED, message))
            self._in_background(
                self._tell_group(ref, REASON_GROUP_RELEASED, message, "False", POD_GROUP_TIMED_OUT_REASON)
            )
        elif released:
            log.info(
                "Released the devices of a group that cannot be placed whole", group=ref.key, claims=released
            )

    async def _release_claim(
        self, key: str, claim: ResourceClaimBody, uids: set[str], group_uid: str
    ) -> bool:
        service = self.service
        for _attempt in range(3):
            current = service.claim_informer.get(key) or claim
            status: ResourceClaimStatusBody = {**(current.get("status") or {})}
            reserved = list(status.get("reservedFor") or [])
            ours = [r for r in reserved if _ours(r, uids, group_uid)]
            if not status.get("allocation") or not ours:
                return False
            others = [r for r in reserved if not _ours(r, uids, group_uid)]
            try:
                if not others:
                    await service.writes.deallocate(current)
                else:
                    status["reservedFor"] = others
                    body: ResourceClaimBody = {
                        **current,
                        "status": summarize_claim_status(
                            status, deleting=bool(meta_of(current).get("deletionTimestamp"))
                        ),
                    }
                    service.view.commit(await service.kube.replace_status(RESOURCE_CLAIMS, body))
                return True
            except ConflictError:
                fresh = await service.kube.get_or_none(
                    RESOURCE_CLAIMS,
                    str(meta_of(claim).get("name")),
                    namespace=meta_of(claim).get("namespace"),
                )
                if fresh is None:
                    return False
                service.claim_informer.assume(cast(ResourceClaimBody, fresh))
            except NotFoundError:
                return False
        return False

    # --- telling ------------------------------------------------------------------------------

    async def tell(self, ref: GroupRef, gated: Sequence[PodBody], message: str, policy: GroupPolicy) -> None:
        """Say why the group waits, on each gated member and on the PodGroup (once per
        message: a group that keeps waiting for the same reason is not told again)."""
        if self.told.get(ref.key) == message:
            return
        self.told[ref.key] = message
        log.info("Group waits", group=ref.key, reason=message)
        await asyncio.gather(
            *(self.service.writes.event(pod, REASON_FAILED_SCHEDULING, message) for pod in gated),
            *(self.service.writes.mark_unschedulable(pod, message) for pod in gated if bound_by_draco(pod)),
            self._tell_group(ref, REASON_FAILED_SCHEDULING, message, "False", POD_GROUP_UNSCHEDULABLE_REASON),
        )
        del policy

    async def _tell_group(
        self, ref: GroupRef, reason: str, message: str, status: str, condition_reason: str
    ) -> None:
        """An Event on the draco PodGroup, and its ``PodGroupInitiallyScheduled`` condition
        (once True it stays True, as upstream's)."""
        if ref.convention != "draco":
            return
        service = self.service
        obj = service.pod_groups.get(ref.key)
        if obj is None:
            return
        try:
            await service.kube.emit_event(
                obj, reason=reason, message=message, type="Normal" if status == "True" else "Warning"
            )
        except Exception as exc:  # an Event is best effort; the state is in the objects
            log.warning("Could not record event", group=ref.key, reason=reason, error=str(exc))
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
            await service.kube.patch(
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


def _ours(ref: ReferenceBody, uids: set[str], group_uid: str) -> bool:
    if is_group_reference(ref):
        return bool(group_uid) and ref.get("uid") == group_uid
    return ref.get("resource") == "pods" and str(ref.get("uid", "")) in uids


def _first(error: BaseExceptionGroup[Any]) -> BaseException:
    """The error to raise for a failed batch of writes: a conflict when any write
    conflicted (the group is decided again), else the first."""
    flat: list[BaseException] = []

    def walk(group: BaseExceptionGroup[Any]) -> None:
        for exc in group.exceptions:
            if isinstance(exc, BaseExceptionGroup):
                walk(exc)
            else:
                flat.append(exc)

    walk(error)
    for exc in flat:
        if isinstance(exc, ConflictError | NotFoundError):
            return exc
    return flat[0]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
