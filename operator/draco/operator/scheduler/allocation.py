"""Allocation of gated pods: choose a node and devices, write the claims, pin, un-gate.

This is what kube-scheduler's DynamicResources plugin does upstream (PreFilter, Filter,
PostFilter, PreBind), for pods that carry the gate ``resource.draco.dev/allocation``.
One call of :meth:`AllocationService.sync_pod` takes one pod as far as it can go, and
:meth:`AllocationService._attempt` reads top to bottom as it does, plan then execute:

1. **read** the pod and its claims (`reading.py`): from the caches (the watched body of a
   gated pod, the claim informer; the API only for a claim whose cached body lost a race),
   the special claim of extended resources made if the pod needs one; the lifecycle half
   creates the generated claims, and until it has, the pod waits;
2. **plan** it (`placement.py` runs the pure plan, `draco.scheduling.podplan`, which
   `draco simulate` runs too): the node kube-scheduler's profile accepts and prefers, the
   devices of the pod's unallocated claims there (claims already allocated narrow the
   nodes), the writes this implies; or why not. The plan's devices and node are held in
   the view *before* anything is awaited, so concurrent attempts of other pods see those
   devices as taken (in flight);
3. **execute** the plan (`executor.py`): each claim written (the finalizer, then
   ``status.allocation`` and ``status.reservedFor`` in one status update carrying the
   resourceVersion), the devices' binding conditions waited for (a failure condition or
   the timeout clears the allocation and starts over), then one pod update pins it
   (required node affinity ``metadata.name In [node]``) and removes the gate, again with
   the pod's resourceVersion as precondition (or one binding, for a pod that names draco);
   a pod not placed gets its refusal written (its Event; upstream's PostFilter).

Why this order is safe across restarts and conflicts (no device is ever allocated twice):

- A device is in use exactly when some claim's ``status.allocation`` names it. That
  status is written in one update with the claim's resourceVersion, so a conflict writes
  nothing, and once written it is in the API: after a restart the view is rebuilt by
  listing claims *before* the first allocation, so every written allocation counts.
- Between the plan and the write the devices are held in memory only (in flight); a
  crash there loses the hold and the plan together, since nothing was written.
- The finalizer goes on before the allocation so that an allocated claim is never
  deleted without the lifecycle seeing it deallocated; a crash after the finalizer and
  before the allocation leaves a pending claim with a finalizer, which the next sync
  completes (or the lifecycle removes when nobody uses the claim).
- A crash after the claims are written and before the pod is pinned leaves the claims
  allocated and reserved for the pod; the next sync finds them allocated, which pins the
  node, and finishes the pod. A conflict anywhere means: forget what was in flight,
  re-read everything, decide again.
- A claim can be in flight for one pod at a time: a pod whose shared claim is being
  allocated for another pod waits a moment and then finds it allocated.

`waiting.py` keeps which pods wait on what and when they are tried again: a failed attempt
(no node fits, the attempt timed out, a binding failure condition turned True) backs the
pod off, 1 s doubling up to 10 s, like upstream's pod backoff; a binding failure clears the
allocation, as upstream does, and that attempt may choose the same device again (a driver
steers pods away from a device it cannot prepare by tainting it). `gangs.py` places a
group of pods all or nothing with the same reader, placer and executor: its plan is its
members' plans, decided under the same decision lock.

Nothing of this runs long on the event loop (probes, admission and every other controller
share it): the selectors are evaluated off the loop and outside the decision, a long
search runs in a thread on the frozen view (`placement.py`), and a wall-clock budget per
attempt (``--allocation-timeout``, like upstream's filter timeout, 10 s) bounds both: when
it runs out the pod gets a ``FailedScheduling`` Warning saying the attempt timed out (never
"does not fit") and is retried with backoff. What was evaluated stays cached, so a retry
goes on where the last attempt stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, cast

from draco.allocator.inventory import Inventory
from draco.api.bodies import Obj, ResourceClaimBody, key_of, meta_of
from draco.api.corebodies import PodBody
from draco.api.names import natural_sorted
from draco.errors import AllocationInterruptedError, KubeError
from draco.kube.client import PODS, ConflictError, Kube, NotFoundError
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.metrics import ALLOCATION_ATTEMPTS, ALLOCATION_DURATION
from draco.operator.scheduler.executor import REASON_FAILED_SCHEDULING, Executor, Holds
from draco.operator.scheduler.gangs import Gangs, is_group_key
from draco.operator.scheduler.groupstatus import GroupStatus
from draco.operator.scheduler.outcome import Outcome
from draco.operator.scheduler.pendingclaims import PendingClaims
from draco.operator.scheduler.pendingmetrics import GROUP_REASON
from draco.operator.scheduler.placement import Placer
from draco.operator.scheduler.preemptions import Evictions
from draco.operator.scheduler.reading import PodReader, no_nodes_avoided
from draco.operator.scheduler.settings import DEFAULT_ALLOCATION_TIMEOUT_S, AllocationSettings
from draco.operator.scheduler.waiting import FLUSH_S, WaitingPods
from draco.operator.scheduler.writes import ClaimWrites
from draco.runtime.offload import Deadline, Offloader, shared_offloader
from draco.scheduling.demand import NO_DEMAND, DemandReports
from draco.scheduling.nodefit import EVENT_MESSAGE_LIMIT
from draco.scheduling.nominations import Nominations, nominated_node
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaimsError,
    ResolvedClaim,
    is_pod_done,
    waits_for_draco,
)
from draco.scheduling.podplan import PodPlan, PodRequest, Unplaced, crowded
from draco.scheduling.preemption import NoPreemption, Preemption, unplaced_reason
from draco.scheduling.view import ClusterView
from draco.scheduling.wakeups import CLAIMS_ONLY, CapacityChange

__all__ = [
    "ALLOCATION_ATTEMPTS",
    "ALLOCATION_DURATION",
    "DEFAULT_ALLOCATION_TIMEOUT_S",
    "AllocationService",
    "AllocationSettings",
    "no_nodes_avoided",
]

log = get_logger(__name__)

#: Results of failed attempts: each backs the pod off (`waiting.py`).
FAILED_RESULTS: Final = frozenset({"unschedulable", "timeout", "binding_failed"})
#: How soon a pod retries when another pod's write of a claim it shares is in flight.
IN_FLIGHT_RETRY_S: Final = 0.05
#: How soon a pod that preempted looks again at whether its victims are gone (their
#: claims' deallocation wakes it sooner).
PREEMPTION_RECHECK_S: Final = 2.0


@dataclass
class AllocationService:
    """See the module docstring. ``enqueue(pod_key)`` puts a pod back on the work queue,
    ``enqueue_after(pod_key, delay)`` after a delay (a timer on the loop when not given).
    Everything it works with is given here or built from it here, once."""

    kube: Kube
    view: ClusterView
    #: The operator's informers it reads: claims (what `pendingclaims.py` reads), pods
    #: (a pod by key, a group's members by ``POD_GROUP``; a group's members un-gated go in
    #: at once, counted as placed before their watch events) and draco's PodGroups.
    claim_informer: Informer[ResourceClaimBody]
    pods: Informer[PodBody]
    pod_groups: Informer[Obj]
    enqueue: Callable[[str], None]
    settings: AllocationSettings = field(default_factory=AllocationSettings)
    enqueue_after: Callable[[str, float], None] | None = None
    #: The newest body the watch delivered of each gated pod (read instead of a GET:
    #: every write that depends on it carries its resourceVersion, so a stale body only
    #: costs a conflict and a re-read).
    gated_pods: dict[str, PodBody] = field(default_factory=dict)
    #: Where selector evaluation and searches run (threads, off the event loop).
    offload: Offloader = field(default_factory=shared_offloader)
    #: Nodes kube-scheduler refused the pod's line on before (`refusals.Refusals`).
    avoided: Callable[[PodBody], frozenset[str]] = no_nodes_avoided
    #: Told of every pod and group that fits nowhere now (the autoscaling controller's
    #: demand; nobody when autoscaling is off).
    demand: DemandReports = NO_DEMAND
    #: Pods whose claim-statuses annotation is being written (`record_claims`).
    _recording: set[str] = field(default_factory=set)
    #: When each nominated pod was first seen nominated (the bound on waiting for victims).
    _nominated_at: dict[str, float] = field(default_factory=dict)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        settings = self.settings
        #: Unallocated claims' bodies and the generated claims' owners; which pods wait on
        #: what; the writes; the holds of plans not written yet.
        self.claims = PendingClaims(self.view, self.claim_informer)
        self.waiters = WaitingPods(self._enqueue_in)
        self.writes = ClaimWrites(
            kube=self.kube,
            view=self.view,
            claims=self.claim_informer,
            node_label=settings.node_label,
            unschedulable_reason=self.demand.unschedulable_reason,
        )
        self.holds = Holds(self.view)
        #: The three steps of an attempt: read, plan, execute.
        self.reader = PodReader(
            kube=self.kube,
            view=self.view,
            claims=self.claims,
            pod_groups=self.pod_groups,
            extended_resources=settings.extended_resources,
            avoided=self.avoided,
        )
        #: The nodes nominated for pods that preempted; the writes of a preemption.
        self.nominations = Nominations()
        self.evictions = Evictions(kube=self.kube, pods=self.pods)
        self.placer = Placer(
            view=self.view,
            holds=self.holds,
            offload=self.offload,
            policy=settings.policy,
            nominations=self.nominations,
        )
        self.executor = Executor(
            writes=self.writes,
            holds=self.holds,
            gated_pods=self.gated_pods,
            waiters=self.waiters,
            pods=self.pods,
            binding_timeout_s=settings.binding_timeout_s,
            demand=self.demand,
        )
        #: Groups of pods placed all or nothing (`gangs.py`).
        self.gangs = Gangs(
            reader=self.reader,
            placer=self.placer,
            holds=self.holds,
            executor=self.executor,
            status=GroupStatus(self.writes, self.pod_groups),
            waiters=self.waiters,
            kube=self.kube,
            pods=self.pods,
            pod_groups=self.pod_groups,
            gated_pods=self.gated_pods,
            settings=settings,
            enqueue=self.enqueue,
            evictions=self.evictions,
            demand=self.demand,
        )

    # --- waking waiting pods -------------------------------------------------------------------

    def note_claim(self, type_: str, claim: ResourceClaimBody) -> None:
        owner = self.claims.note(type_, claim)
        if owner is None:
            return
        if owner in self.waiters or owner in self.gated_pods:
            # It waited for the lifecycle to create this claim, or an attempt of it runs now.
            self.waiters.claim_generated(owner)
        elif (pod := self.pods.get(owner)) is not None:
            self.record_claims(pod)

    def record_claims(self, pod: PodBody) -> None:
        """Record the generated claims of a pod this service does not place (no gate: bound
        by someone else) in its claim-statuses annotation, as the lifecycle created them:
        this service is that annotation's one writer (a gated pod's names go into the write
        that pins it). In the background; once per pod at a time."""
        if waits_for_draco(pod) or meta_of(pod).get("deletionTimestamp") or is_pod_done(pod):
            return
        key = key_of(pod)
        if key in self._recording:
            return
        try:
            _, unrecorded = self.reader.resolve(pod)
        except (ClaimNotCreatedError, PodClaimsError):
            return  # the claim's creation comes back here (note_claim)
        if unrecorded is None:
            return
        self._recording.add(key)
        task = asyncio.create_task(self._record_statuses(pod, unrecorded), name=f"record-claims-{key}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(lambda _task: self._recording.discard(key))

    async def _record_statuses(self, pod: PodBody, statuses: dict[str, str | None]) -> None:
        written = await self.writes.record_statuses(pod, statuses)
        if written is not None and waits_for_draco(written):
            self.gated_pods[key_of(written)] = written

    def forget_claim(self, claim_key: str) -> None:
        self.claims.forget(claim_key)

    def _enqueue_in(self, pod_key: str, delay: float) -> None:
        if delay <= 0:
            self.enqueue(pod_key)
        elif self.enqueue_after is not None:
            self.enqueue_after(pod_key, delay)
        else:
            asyncio.get_running_loop().call_later(delay, self.enqueue, pod_key)

    def claim_changed(self, claim_key: str) -> None:
        self.waiters.claim_changed(claim_key)

    def capacity_changed(self, change: CapacityChange) -> int:
        """Wake the waiting pods ``change`` may help, each once its backoff ends."""
        return self.waiters.capacity_changed(change)

    def pod_changed(self, pod_key: str) -> None:
        """A gated pod's watch event: try it, no sooner than its backoff allows."""
        self.waiters.wake(pod_key)

    def forget(self, pod_key: str) -> None:
        self._nominated_at.pop(pod_key, None)
        self.waiters.forget(pod_key)
        self.gated_pods.pop(pod_key, None)
        self.view.withdraw_promise(pod_key)

    async def current_inventory(self) -> Inventory:
        """The view's inventory, rebuilt off the loop when stale (for other controllers)."""
        return await self.placer.inventory()

    # --- one pod -------------------------------------------------------------------------------

    async def sync_pod(self, pod_key: str) -> float | None:
        """Take one gated pod (or one group of pods, `gangs.py`) as far as possible (the
        work queue's sync function)."""
        if not self.view.synced:
            return 0.5
        if is_group_key(pod_key):
            return await self._sync_group(pod_key)
        # Before the pod is read: a claim generated for it from here on is one its
        # attempt may not see (`settle` asks).
        mark = self.waiters.mark()
        namespace, _, name = pod_key.partition("/")
        pod = self.gated_pods.get(pod_key)
        if pod is None:
            pod = cast(PodBody | None, await self.kube.get_or_none(PODS, name, namespace=namespace))
        if pod is None or meta_of(pod).get("deletionTimestamp") or not waits_for_draco(pod):
            self.forget(pod_key)
            return None
        if await self.gangs.route(pod):
            # Its group is placed as one (the group's key is on the queue), not this pod alone;
            # the pod only waits for its claims to be made (which brings it, and so its group, back).
            self.waiters.wait(pod_key, frozenset(), CLAIMS_ONLY, reason=GROUP_REASON)
            return None
        started = time.monotonic()
        try:
            outcome = await self._schedule(pod, pod_key)
        except ConflictError as exc:
            log.info("Conflict while allocating, re-reading", pod=pod_key, error=str(exc))
            outcome = Outcome("conflict", again=0.0, waits_on=self.reader.claim_keys(pod))
        except NotFoundError as exc:
            log.info("Object gone while allocating, re-reading", pod=pod_key, error=str(exc))
            outcome = Outcome("conflict", again=0.0, waits_on=self.reader.claim_keys(pod))
        except BaseException as exc:
            ALLOCATION_ATTEMPTS.labels(result="error").inc()
            ALLOCATION_DURATION.labels(result="error").observe(time.monotonic() - started)
            if isinstance(exc, KubeError) and exc.status < 500:
                # Refused, not lost (a policy, a webhook, an invalid write): the pod is told,
                # not only the log; the work queue retries with backoff.
                await self.writes.event(
                    pod,
                    REASON_FAILED_SCHEDULING,
                    f"the API server refused a write for this pod ({exc}); retrying with backoff",
                )
            raise
        return self.settle(pod_key, outcome, mark=mark, started=started)

    async def _schedule(self, pod: PodBody, pod_key: str) -> Outcome:
        try:
            resolved, unrecorded = self.reader.resolve(pod)
        except (ClaimNotCreatedError, PodClaimsError):
            # The lifecycle creates the claim (its watch event wakes the pod), or reports
            # the broken annotation.
            return Outcome("waiting", interest=CLAIMS_ONLY)
        outcome = await self._attempt(pod, pod_key, resolved, unrecorded)
        if (
            unrecorded is not None
            and outcome.result not in ("allocated", "conflict")
            and not (outcome.again is not None and outcome.again <= IN_FLIGHT_RETRY_S)
        ):
            # The pod stays gated for a while: record its claims now, as the pin would have.
            await self._record_statuses(pod, unrecorded)
        return outcome

    async def _attempt(
        self,
        pod: PodBody,
        pod_key: str,
        resolved: Sequence[ResolvedClaim],
        unrecorded: dict[str, str | None] | None,
    ) -> Outcome:
        """One pod's attempt, top to bottom: read, plan, execute (the module docstring)."""
        # 1. Read: the pod's claims, from the caches.
        read = await self.reader.read(pod, resolved, unrecorded)
        pod, waits_on, request = read.pod, read.waits_on, read.found
        if isinstance(request, Unplaced):  # a claim it cannot use yet: it waits for it
            return await self.executor.refuse(pod, request, waits_on=waits_on)
        if any(key in self.view.in_flight() for key in waits_on):
            return Outcome("waiting", again=IN_FLIGHT_RETRY_S, waits_on=waits_on, interest=CLAIMS_ONLY)
        waits = crowded(request)
        if waits is not None:
            return await self.executor.refuse(pod, waits, waits_on=waits_on)
        # 2. Plan: pure (`draco.scheduling.podplan`), held in the view as it is decided.
        deadline = Deadline(self.settings.allocation_timeout_s or None)
        try:
            plan = await self.placer.decide(request, deadline)
        except AllocationInterruptedError:
            return await self._timed_out(pod, pod_key, waits_on, deadline)
        if plan is None:  # another pod took one of the claims in flight meanwhile
            return Outcome("waiting", again=IN_FLIGHT_RETRY_S, waits_on=waits_on, interest=CLAIMS_ONLY)
        # 3. Execute: the plan's writes, or the refusal's.
        if isinstance(plan, PodPlan):
            self._nominated_at.pop(pod_key, None)
            return await self.executor.place_pod(plan, waits_on=waits_on)
        if plan.whole and plan.result == "unschedulable" and plan.deallocate is None:
            return await self._preempt(pod, request, plan, waits_on)
        return await self.executor.refuse(pod, plan, waits_on=waits_on, request=request)

    async def _preempt(
        self, pod: PodBody, request: PodRequest, unplaced: Unplaced, waits_on: frozenset[str]
    ) -> Outcome:
        """The pod fits nowhere: kube-scheduler's PostFilter (`draco.scheduling.preemption`).
        Victims found: they are evicted and the pod nominated to their node, and it is
        planned again once they are gone (their devices kept from pods of lower priority
        meanwhile). A nomination older than ``--preemption-timeout`` whose victims still
        linger is not waited on any longer: preemption is decided again."""
        key = unplaced.key
        if nominated_node(pod) is not None:
            since = self._nominated_at.setdefault(key, time.monotonic())
            if time.monotonic() - since > self.settings.preemption_timeout_s:
                log.warning("Victims of a preemption did not go in time; deciding again", pod=key)
                self._nominated_at[key] = time.monotonic()
                status = {**(pod.get("status") or {})}
                status.pop("nominatedNodeName", None)
                request = replace(request, pod=cast(PodBody, {**pod, "status": status}))
        if not request.info.never_preempts and not self.placer.may_preempt(request):
            return await self.executor.refuse(
                pod, unplaced, waits_on=waits_on, request=request
            )  # nobody to evict
        answer = await self.placer.preempt(request, await self.evictions.budgets())
        if not isinstance(answer, NoPreemption) or answer.waiting:
            # It does not fit now (what kube-scheduler's cycle records before its PostFilter
            # nominates it): the pod is told why it waits.
            await self.writes.event(pod, REASON_FAILED_SCHEDULING, unplaced.reason)
        if isinstance(answer, Preemption):
            await self.evictions.perform(pod, answer)
            self._nominated_at.setdefault(key, time.monotonic())
            return Outcome(
                "preempting", again=PREEMPTION_RECHECK_S, waits_on=waits_on, interest=unplaced.interest
            )
        if answer.waiting:
            return Outcome(
                "waiting", again=PREEMPTION_RECHECK_S, waits_on=waits_on, interest=unplaced.interest
            )
        told = replace(unplaced, reason=unplaced_reason(unplaced, answer)[:EVENT_MESSAGE_LIMIT])
        return await self.executor.refuse(pod, told, waits_on=waits_on, request=request)

    async def _timed_out(
        self, pod: PodBody, pod_key: str, keys: frozenset[str], deadline: Deadline
    ) -> Outcome:
        """The attempt ran out of wall-clock time: say so (it is not "does not fit") and
        retry later with backoff (the same words each time: the Event's count grows)."""
        names = natural_sorted(keys)
        # The why comes first and at most three names, so the Event keeps it within 1 KiB.
        claims = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        await self.writes.event(
            pod,
            REASON_FAILED_SCHEDULING,
            f"allocating ResourceClaim(s) {claims} timed out after "
            f"{deadline.seconds or 0:g}s (the operator's --allocation-timeout): evaluating device "
            f"selectors and searching for devices took longer; this does not mean the claims do not fit. "
            "Retrying with backoff (1s doubling up to 10s); the work done so far is kept",
        )
        log.warning(
            "Allocation attempt timed out", pod=pod_key, failures=self.waiters.failures.get(pod_key, 0) + 1
        )
        # Tried again as soon as the backoff allows, whatever changes meanwhile.
        return Outcome("timeout", again=0.0, waits_on=keys)

    # --- one group -----------------------------------------------------------------------------

    async def _sync_group(self, group_key: str) -> float | None:
        """The work queue's sync of a ``group:`` key (`gangs.py`)."""
        ref = self.gangs.ref(group_key)
        if ref is None:
            return None
        started = time.monotonic()
        mark = self.waiters.mark()
        try:
            outcome = await self.gangs.attempt(ref)
        except (ConflictError, NotFoundError) as exc:
            log.info("Conflict while placing group, re-reading", group=ref.key, error=str(exc))
            outcome = Outcome("conflict", again=0.0)
        return self.settle(group_key, outcome, mark=mark, started=started)

    # --- after an attempt ---------------------------------------------------------------------

    def settle(self, pod_key: str, outcome: Outcome, *, mark: int, started: float) -> float | None:
        """Count an attempt's outcome and decide when ``pod_key`` (a pod or a group) is
        tried again: the backoff, what it waits on, a change it missed meanwhile."""
        ALLOCATION_ATTEMPTS.labels(result=outcome.result).inc()
        ALLOCATION_DURATION.labels(result=outcome.result).observe(time.monotonic() - started)
        if outcome.result == "allocated":
            self.waiters.stop(pod_key)
            self.waiters.succeeded(pod_key)
            self.gated_pods.pop(pod_key, None)
            return None
        if outcome.result in ("conflict", "binding_failed"):
            self.gated_pods.pop(pod_key, None)  # read it fresh next time
            for key in outcome.waits_on:
                self.claims.stale(key)
            if outcome.result == "conflict":
                return outcome.again
        if outcome.result in FAILED_RESULTS:
            failures, backoff = self.waiters.failed(pod_key)
            log.debug("Backing off", pod=pod_key, result=outcome.result, failures=failures, backoff=backoff)
        self.waiters.wait(pod_key, outcome.waits_on, outcome.interest, reason=outcome.result)
        if self.waiters.missed(mark, outcome.interest, outcome.waits_on, pod_key=pod_key):
            # A change that may help this pod (or one of its claims: a binding condition
            # reported) landed while the attempt ran, after it read the view and the claims:
            # its wake-up reached only the pods waiting then. Look again, once the backoff
            # allows (never at once: churn elsewhere must not keep this pod busy).
            log.debug("Changed during the attempt", pod=pod_key, result=outcome.result)
            return self.waiters.backoff_left(pod_key)
        if outcome.again is not None:
            return max(outcome.again, self.waiters.backoff_left(pod_key))
        # A failed pod waits for a change its interest says may help; at the latest it is
        # tried again after FLUSH_S (a pod waiting on its own claims is woken by them).
        return FLUSH_S if outcome.result in FAILED_RESULTS else None
