"""The one executor of placement plans: what a plan (`draco.scheduling.podplan`) implies,
written in its order, for one pod or for a group of pods placed whole.

A plan is decided on the view; its devices and its pod's node are held there from the
decision on (:class:`Holds`: the next decision sees them taken, and nothing is written
yet). Then, for every pod of the plan:

1. each claim is written (`writes.ClaimWrites.write_claim`: the finalizer, then the
   allocation and the reservation in one status update with the resourceVersion decided
   on); a claim several members of a group name is written once per member, in order,
   the allocation with the first; what is written leaves the hold, and what is not is
   given back once the writes end;
2. when devices declare binding conditions, the pods wait until all are True
   (`draco.scheduling.bindingconditions`); a failure condition or the timeout clears the
   allocation and the pods start over;
3. the pods are pinned and un-gated (or bound), only once every claim of every pod is
   written and bound: a group is never partly released.

Preemption is beside it: a pod that fits nowhere may get a `draco.scheduling.preemption`
answer instead of its refusal, performed by `preemptions.Evictions` (the nomination, the
victims' evictions); the pod's plan comes once its victims are gone, and this executor
performs it as any other.

A write that fails undoes the plan in one place (:meth:`Executor._undo`): the holds are
given back and, for a group, every claim its members hold is released (a group holds
nothing unless it can be placed whole); a single pod's written claims stay written and
reserved for it (its next attempt finds them allocated and finishes). The refusal of a
pod that fits nowhere is a plan too (:meth:`Executor.refuse`): its Event, and what
upstream's PostFilter writes.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from draco.api.bodies import ResourceClaimBody, key_of
from draco.api.constants import DEFAULT_SCHEDULER_NAME
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube.client import ConflictError, NotFoundError
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.metrics import BINDING_CONDITIONS_ALLOCATIONS, BINDING_CONDITIONS_WAIT_DURATION
from draco.operator.scheduler.messages import placed_event
from draco.operator.scheduler.outcome import Outcome
from draco.operator.scheduler.waiting import WaitingPods
from draco.operator.scheduler.writes import ClaimWrites
from draco.scheduling.bindingconditions import BindingFailure, BindingMet, binding_state, needs_timestamp
from draco.scheduling.demand import NO_DEMAND, DemandReports, UnplacedUnit
from draco.scheduling.podclaims import bound_by_draco
from draco.scheduling.podplan import PodPlan, PodRequest, Unplaced
from draco.scheduling.view import ClusterView
from draco.scheduling.wakeups import CLAIMS_ONLY

__all__ = [
    "REASON_BINDING_FAILED",
    "REASON_BINDING_PENDING",
    "REASON_DEALLOCATED",
    "REASON_FAILED_SCHEDULING",
    "Executor",
    "Holders",
    "Holds",
]

log = get_logger(__name__)

#: Upstream's reasons: no node fits; devices being bound, or failing to.
REASON_FAILED_SCHEDULING: Final = "FailedScheduling"
REASON_BINDING_PENDING: Final = "BindingConditionsPending"
REASON_BINDING_FAILED: Final = "BindingConditionsFailed"
#: draco's: an allocated claim on devices or a node that are gone was cleared.
REASON_DEALLOCATED: Final = "DeallocatedUnavailableClaim"
#: How many claims of a group are written at once.
WRITE_CONCURRENCY: Final = 32


class Holds:
    """What the view holds for plans decided and not written yet: their devices (in
    flight) and their pods counted on their nodes (promised)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def take(self, plan: PodPlan) -> None:
        """Hold ``plan`` (right after its decision, with no ``await`` between)."""
        allocations = plan.allocations
        if allocations:
            self.view.begin(allocations)
        if plan.node is not None:
            self.view.promise_node(plan.key, plan.placed)

    def devices_back(self, plans: Sequence[PodPlan]) -> None:
        """The devices not written: what the claims hold counts again."""
        keys = [key for plan in plans for key in plan.allocations]
        if keys:
            self.view.abandon(keys)

    def withdraw(self, plans: Sequence[PodPlan]) -> None:
        """The pods' promises end (pinned, or not to be)."""
        for plan in plans:
            self.view.withdraw_promise(plan.key)

    def release(self, plans: Sequence[PodPlan]) -> None:
        self.devices_back(plans)
        self.withdraw(plans)


@dataclass(frozen=True)
class Holders:
    """Whose devices a group gives back when it cannot be placed whole (``group``, its
    key): the claims its gated members name, their UIDs, its PodGroup's UID (a claim of
    the group)."""

    group: str
    claims: Sequence[ResourceClaimBody]
    uids: frozenset[str]
    group_uid: str = ""


@dataclass
class Executor:
    """Performs plans (see the module docstring)."""

    writes: ClaimWrites
    holds: Holds
    #: The allocation's view of the gated pods, their waiting, and the pod informer: a
    #: group's members are forgotten there and counted as placed once pinned.
    gated_pods: MutableMapping[str, PodBody]
    waiters: WaitingPods
    pods: Informer[PodBody]
    #: How long devices may take to meet their binding conditions (``--binding-timeout``).
    binding_timeout_s: float = 600.0
    #: Told of every pod that fits nowhere now (the autoscaling controller's demand).
    demand: DemandReports = NO_DEMAND

    def __post_init__(self) -> None:
        self.view = self.holds.view
        self._background: set[asyncio.Task[None]] = set()

    # --- one pod ----------------------------------------------------------------------------------

    async def place_pod(self, plan: PodPlan, *, waits_on: frozenset[str]) -> Outcome:
        """Perform ``plan``: its claims, its binding conditions, its pin."""
        pod = plan.pod
        assert pod is not None
        if plan.node is None:  # nothing to allocate: kube-scheduler places the pod
            self.view.upsert_pod(await self.writes.pin(pod, None, statuses=plan.request.statuses))
            log.info("Un-gated pod without claims to allocate", pod=plan.key)
            return Outcome("allocated")
        try:
            written = await self._write_claims([plan], undo=None)
            binding = await self.binding(pod, _written(plan, written))
            if binding is not None:
                self.holds.withdraw([plan])
                return Outcome(binding[0], again=binding[1], waits_on=waits_on, interest=CLAIMS_ONLY)
            pinned = await self.writes.pin(pod, plan.node, statuses=plan.request.statuses)
        except BaseException:
            self.holds.withdraw([plan])
            raise
        self.view.upsert_pod(pinned, info=plan.placed)
        self.holds.withdraw([plan])
        log.info(
            "Allocated and bound pod" if bound_by_draco(pod) else "Allocated and un-gated pod",
            pod=plan.key,
            node=plan.node,
            claims=sorted(waits_on),
        )
        # The pod is un-gated: the Event (best effort anyway) need not hold this worker for
        # another round trip before it takes the next pod.
        claims = _written(plan, written)
        self._in_background(self.writes.event(pod, *placed_event(pod, plan.node, claims), type_="Normal"))
        return Outcome("allocated")

    async def refuse(
        self,
        pod: PodBody,
        unplaced: Unplaced,
        *,
        waits_on: frozenset[str],
        request: PodRequest | None = None,
    ) -> Outcome:
        """A pod not placed now: what upstream's PostFilter writes for one that fits
        nowhere (its pending claims' idle finalizers off; an allocated claim on devices or
        a node that are gone deallocated, and the pod tried again at once), then its
        FailedScheduling Event; a pod draco binds shows ``PodScheduled`` False as well, and
        the demand (autoscaling) is told of it with ``request``'s claims."""
        fits_nowhere = bool(unplaced.whole)
        if fits_nowhere:
            for claim in unplaced.idle:
                await self.writes.drop_idle_finalizer(claim)
            if unplaced.deallocate is not None:
                await self.writes.deallocate(unplaced.deallocate)
                await self.writes.event(
                    pod,
                    REASON_DEALLOCATED,
                    f"ResourceClaim {key_of(unplaced.deallocate)} was allocated on devices or a node that are "
                    "gone; it was deallocated to be allocated again",
                    type_="Normal",
                )
                return Outcome("conflict", again=0.0)
        await self.writes.event(pod, REASON_FAILED_SCHEDULING, unplaced.reason)
        if fits_nowhere:
            if bound_by_draco(pod):
                # A gated pod shows SchedulingGated (the API server's); one draco binds shows
                # what kube-scheduler would have said.
                await self.writes.mark_unschedulable(pod, unplaced.reason)
            log.info("No node fits pod", pod=unplaced.key, reason=unplaced.whole)
            self.demand.unplaced(
                UnplacedUnit(
                    key=unplaced.key,
                    pods=(pod,),
                    pending={unplaced.key: tuple(request.pending if request is not None else ())},
                    allocated={unplaced.key: tuple(request.allocated if request is not None else ())},
                    message=unplaced.reason,
                )
            )
        return Outcome(unplaced.result, waits_on=waits_on, interest=unplaced.interest)

    # --- a group ----------------------------------------------------------------------------------

    async def place_group(  # size: the whole order of a group's writes in one place, failures included
        self,
        plans: Sequence[PodPlan],
        *,
        holders: Holders,
        waits_on: frozenset[str],
        left_s: float,
    ) -> Outcome:
        """Perform a group's plan, its members' plans as one: every claim of every member,
        the binding conditions of all, then every member pinned and un-gated at once.
        ``holders``: what the group gives back when it cannot finish; ``left_s``: how long
        the group may still hold devices. A member whose pin fails makes the outcome a
        conflict (the others are placed: the group runs, that member is placed alone)."""
        written = await self._write_claims(plans, undo=holders)
        again: float | None = None
        for plan in plans:
            binding = await self.binding(_pod(plan), _written(plan, written))
            if binding is None:
                continue
            self.holds.withdraw(plans)
            if binding[0] == "binding_failed":
                await self._undo([], holders)
                return Outcome("binding_failed", again=binding[1], waits_on=waits_on, interest=CLAIMS_ONLY)
            again = binding[1] if again is None else min(again, binding[1] or again)
        if again is not None:
            return Outcome(
                "waiting", again=max(min(again, left_s), 0.0), waits_on=waits_on, interest=CLAIMS_ONLY
            )
        answers = await asyncio.gather(
            *(self.writes.pin(_pod(plan), plan.node, statuses=plan.request.statuses) for plan in plans),
            return_exceptions=True,
        )
        failed = False
        for plan, answer in zip(plans, answers, strict=True):
            self.holds.withdraw([plan])
            if isinstance(answer, BaseException):
                if not isinstance(answer, KubeError):
                    raise answer
                failed = True
                log.warning("Could not un-gate a pod of a placed group", pod=plan.key, error=str(answer))
                continue
            self.gated_pods.pop(plan.key, None)
            self.waiters.forget(plan.key)
            self.pods.assume(answer)  # counted as placed by its group at once
            self.view.upsert_pod(answer, info=plan.placed)
            claims = [written.get(step.key, step.claim) for step in plan.claims]
            pod = _pod(plan)
            self._in_background(
                self.writes.event(pod, *placed_event(pod, str(plan.node), claims), type_="Normal")
            )
        return Outcome("conflict", again=0.0, waits_on=waits_on) if failed else Outcome("allocated")

    async def give_back(self, holders: Holders) -> int:
        """Every device the holders hold given back: their reservations removed, a claim
        only they (or their group) held deallocated; how many claims that took."""
        seen: set[str] = set()
        released = 0
        for claim in holders.claims:
            key = key_of(claim)
            if key in seen:
                continue
            seen.add(key)
            if await self.writes.give_back(claim, uids=set(holders.uids), group_uid=holders.group_uid):
                released += 1
        return released

    # --- the steps ----------------------------------------------------------------------------

    async def _write_claims(
        self, plans: Sequence[PodPlan], *, undo: Holders | None
    ) -> dict[str, ResourceClaimBody]:
        """Every claim of ``plans`` written once per pod that names it, in the plans'
        order (concurrently across claims for a group); what was not written leaves the
        hold. A failure undoes the plans (:meth:`_undo`) and raises the conflict."""
        order: dict[str, list[tuple[PodPlan, Any]]] = {}
        for plan in plans:
            stamp = _now() if needs_timestamp(plan.allocations.values()) else None
            for step in plan.claims:
                allocation = step.allocation
                if allocation is not None and stamp is not None:
                    allocation = {**allocation, "allocationTimestamp": stamp}
                order.setdefault(step.key, []).append((plan, (step, allocation)))
        written: dict[str, ResourceClaimBody] = {}

        async def write(key: str) -> None:
            current = order[key][0][1][0].claim
            for plan, (step, allocation) in order[key]:
                reference = plan.request.group if step.for_group else None
                current = await self.writes.write_claim(
                    current, _pod(plan), allocation, node=plan.node, reference=reference
                )
            written[key] = current

        try:
            if len(plans) == 1:
                for key in order:
                    await write(key)
            else:
                await _all(write, list(order))
        except BaseException:
            await self._undo(plans, undo)
            raise
        self.holds.devices_back(plans)  # what was written left the in-flight hold already
        return written

    async def _undo(self, plans: Sequence[PodPlan], holders: Holders | None) -> None:
        """A plan whose writes failed half-way: its holds given back, and for a group
        every claim its members hold (it holds nothing unless it runs whole)."""
        self.holds.devices_back(plans)
        if holders is not None:
            self.holds.withdraw(plans)
            released = await self.give_back(holders)
            if released:
                log.info(
                    "Released the devices of a group that cannot be placed whole",
                    group=holders.group,
                    claims=released,
                )

    async def binding(
        self, pod: PodBody, claims: Sequence[ResourceClaimBody]
    ) -> tuple[str, float | None] | None:
        """Where the pod's written ``claims`` stand with their binding conditions: None when
        every one is True (or none is declared); ("binding_failed", 0) when one failed, its
        claim deallocated; ("waiting", when to look again). A wait that ends is counted in
        kube-scheduler's binding-condition metrics, as its PreBind does."""
        state = binding_state(
            claims, timeout_s=self.binding_timeout_s, now=datetime.datetime.now(datetime.UTC)
        )
        if state is None:
            return None
        if isinstance(state, BindingMet):
            if state.waited:
                _binding_ended(pod, claims, "success", state.waited)
            return None
        if isinstance(state, BindingFailure):
            try:
                await self.writes.deallocate(state.claim)
            except BaseException:
                _binding_ended(pod, claims, "error", state.waited)
                raise
            _binding_ended(pod, claims, state.status, state.waited)
            await self.writes.event(pod, REASON_BINDING_FAILED, state.message)
            return ("binding_failed", 0.0)
        await self.writes.event(pod, REASON_BINDING_PENDING, state.message, type_="Normal")
        return ("waiting", state.again)

    def _in_background(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _written(plan: PodPlan, written: Mapping[str, ResourceClaimBody]) -> list[ResourceClaimBody]:
    """The plan's claims as written."""
    return [written[step.key] for step in plan.claims if step.key in written]


def _binding_ended(pod: PodBody, claims: Sequence[ResourceClaimBody], status: str, waited_s: float) -> None:
    """kube-scheduler's binding-condition metrics for a pod's wait that ended with
    ``status``: per allocated device result, the wait (since the allocation was written),
    and the count of those with binding conditions."""
    profile = str((pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER_NAME)
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            driver = str(result.get("driver", ""))
            BINDING_CONDITIONS_WAIT_DURATION.labels(profile=profile, driver=driver, status=status).observe(
                max(waited_s, 0.0)
            )
            if result.get("bindingConditions"):
                BINDING_CONDITIONS_ALLOCATIONS.labels(profile=profile, driver=driver, status=status).inc()


def _pod(plan: PodPlan) -> PodBody:
    assert plan.pod is not None
    return plan.pod


async def _all(write: Any, keys: Sequence[str]) -> None:
    """``write(key)`` for every key, WRITE_CONCURRENCY at a time; a conflict is the error
    raised when any write conflicted (the group is decided again), else the first."""
    limit = asyncio.Semaphore(WRITE_CONCURRENCY)

    async def bounded(key: str) -> None:
        async with limit:
            await write(key)

    try:
        async with asyncio.TaskGroup() as tasks:
            for key in keys:
                tasks.create_task(bounded(key))
    except BaseExceptionGroup as group_error:
        flat: list[BaseException] = []

        def walk(group: BaseExceptionGroup[Any]) -> None:
            for exc in group.exceptions:
                if isinstance(exc, BaseExceptionGroup):
                    walk(exc)
                else:
                    flat.append(exc)

        walk(group_error)
        raise next((e for e in flat if isinstance(e, ConflictError | NotFoundError)), flat[0]) from None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
