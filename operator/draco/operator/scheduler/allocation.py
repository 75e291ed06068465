"""Allocation of gated pods: choose a node and devices, write the claims, pin, un-gate.

This is what kube-scheduler's DynamicResources plugin does upstream (PreFilter, Filter,
PostFilter, PreBind), for pods that carry the gate ``resource.draco.dev/allocation``.
One call of :meth:`AllocationService.sync_pod` takes one pod as far as it can go:

1. read the pod and its claims fresh from the API (the lifecycle half creates the
   generated ones; until it has, the pod waits);
2. candidate nodes are those that admit the pod (:mod:`nodefit`) and match the node
   selector of every claim already allocated; the pod's unallocated claims are allocated
   together on one of them by the embedded allocator (``draco.allocator.place``);
3. the chosen allocations are marked in the view *before* anything is awaited, so that
   concurrent syncs of other pods see those devices as taken (in flight);
4. each claim is written: the finalizer first (metadata), then ``status.allocation`` and
   ``status.reservedFor`` together in one status update carrying the resourceVersion;
5. when allocated devices declare binding conditions, wait until all are True (a failure
   condition or the timeout clears the allocation and starts over);
6. one pod update pins it (required node affinity ``metadata.name In [node]``) and
   removes the gate, again with the pod's resourceVersion as precondition.

Why this order is safe across restarts and conflicts (no device is ever allocated twice):

- A device is in use exactly when some claim's ``status.allocation`` names it. That
  status is written in one update with the claim's resourceVersion, so a conflict writes
  nothing, and once written it is in the API: after a restart the view is rebuilt by
  listing claims *before* the first allocation, so every written allocation counts.
- Between the choice and the write the devices are held in memory only (in flight); a
  crash there loses the hold and the choice together, since nothing was written.
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

The attempt and its outcome live here; the rest, one concern per module: `placement.py`
chooses the node and devices, `writes.py` writes claims and pins pods, `waiting.py` keeps
which pods wait on what and when they are tried again (a pod's backoff after each failed
attempt, and which waiting pods a capacity change wakes), `pendingclaims.py` reads
unallocated claims from the claim informer, `messages.py` words the Events that are not a
decision; `gangs.py` places a group of pods all or nothing, as one decision over its
members under the same decision lock (`groupwrites.py` writes it whole).

A failed attempt (no node fits, the attempt timed out, a binding failure condition turned
True) backs the pod off: 1 s, doubling up to 10 s, like upstream's pod backoff. A binding
failure clears the allocation, as upstream does, and the pod is tried again only once its
backoff ends; like upstream, that attempt may choose the same device again (a driver
steers pods away from a device it cannot prepare by tainting it).

Nothing of this runs long on the event loop (probes, admission and every other
controller share it). The costly parts run in the :class:`Offloader`'s threads:

- the CEL selectors of the pod's claims are evaluated into the inventory's selector cache
  first, in short slices, *outside* the decision (other pods keep being allocated while a
  pathological selector is evaluated over thousands of devices);
- then one decision at a time (an ``asyncio.Lock``): the allocator searches over the
  cached answers on the loop, interrupted after 20 ms (an interrupt never changes an
  answer, it only discards the attempt); a longer search starts over in a thread while
  the view is frozen, and back on the loop the view thaws; either way the choice is
  marked with no ``await`` in between (choose-and-mark stays atomic);
- a wall-clock budget per attempt (``--allocation-timeout``, like upstream's filter
  timeout, 10 s) bounds both: when it runs out the pod gets a ``FailedScheduling`` Warning
  saying the attempt timed out (never "does not fit") and is retried with backoff. What
  was evaluated stays cached, so a retry goes on where the last attempt stopped.
"""

# size: 68 of these lines are the docstring above (why the write order is safe); the code is
# ~575 lines, the attempt in one place with its outcomes, backoff included (the rest is split off).

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, cast

from draco.allocator import NoPlacement
from draco.allocator.inventory import Inventory
from draco.api.bodies import AllocationResultBody, ReferenceBody, ResourceClaimBody, key_of, meta_of
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    RESERVED_FOR_MAX_SIZE,
)
from draco.api.corebodies import PodBody
from draco.api.names import natural_sorted
from draco.errors import (
    AllocationInputError,
    AllocationInterruptedError,
    AllocationTimeoutError,
    KubeError,
)
from draco.kube.client import PODS, RESOURCE_CLAIMS, ConflictError, Kube, NotFoundError, Obj
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.metrics import ALLOCATION_ATTEMPTS, ALLOCATION_DURATION
from draco.operator.scheduler.extended import special_claim_for
from draco.operator.scheduler.gangs import DEFAULT_GROUP_TIMEOUT_S, Gangs, is_group_key
from draco.operator.scheduler.messages import claim_problem, placed_event
from draco.operator.scheduler.outcome import Outcome
from draco.operator.scheduler.pendingclaims import PendingClaims
from draco.operator.scheduler.pendingmetrics import GROUP_REASON
from draco.operator.scheduler.placement import RESOURCES_RULE, Placer
from draco.operator.scheduler.waiting import FLUSH_S, WaitingPods
from draco.operator.scheduler.writes import ClaimWrites
from draco.runtime.offload import Deadline, Offloader, shared_offloader
from draco.scheduling.demand import NO_DEMAND, DemandReports, UnplacedUnit
from draco.scheduling.framework import REFUSED
from draco.scheduling.groups import group_of, policy_of
from draco.scheduling.nodefit import EVENT_MESSAGE_LIMIT, unschedulable_message
from draco.scheduling.nodeorder import PlacementPolicy
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaim,
    PodClaimsError,
    ResolvedClaim,
    bound_by_draco,
    claim_statuses,
    claim_statuses_annotation,
    group_reference,
    is_claim_for_entry,
    is_pod_done,
    is_reserved_for,
    parse_pod_claims,
    resolve_claim,
    waits_for_draco,
)
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.requests import PodRequests, pod_requests
from draco.scheduling.view import ClusterView
from draco.scheduling.wakeups import CLAIMS_ONLY, UNKNOWN, CapacityChange, Interest, interest_of

__all__ = [
    "ALLOCATION_ATTEMPTS",
    "ALLOCATION_DURATION",
    "AllocationService",
    "AllocationSettings",
]

log = get_logger(__name__)

#: Event reasons: upstream's scheduler says FailedScheduling when no node fits and
#: BindingConditionsPending while devices are being bound.
REASON_FAILED_SCHEDULING: Final = "FailedScheduling"
REASON_DEALLOCATED: Final = "DeallocatedUnavailableClaim"

#: Results of failed attempts: each backs the pod off (`waiting.py`).
FAILED_RESULTS: Final = frozenset({"unschedulable", "timeout", "binding_failed"})
#: How soon a pod retries when another pod's write of a claim it shares is in flight.
IN_FLIGHT_RETRY_S: Final = 0.05
#: Upstream's filter timeout (DynamicResourcesArgs.filterTimeout): the wall-clock budget of
#: one allocation attempt.
DEFAULT_ALLOCATION_TIMEOUT_S: Final = 10.0


def no_nodes_avoided(pod: PodBody) -> frozenset[str]:
    """No node is avoided (a service without the safety net's memory of refusals)."""
    del pod
    return frozenset()


@dataclass(frozen=True)
class AllocationSettings:
    """Options of the allocation service (from the operator's command line)."""

    policy: PlacementPolicy = "scheduler"
    binding_timeout_s: float = 600.0
    #: Wall-clock budget of one attempt (selector evaluation and search); 0: none.
    allocation_timeout_s: float = DEFAULT_ALLOCATION_TIMEOUT_S
    #: Map extended-resource requests to DeviceClasses (one special claim per pod).
    extended_resources: bool = True
    #: Label allocated claims with their node (``resource.draco.dev/node``): node agents
    #: select on it where the API server does not serve the field ``status.nodeName``.
    node_label: bool = False
    #: How long a group of pods may hold devices without all its pods released (`gangs.py`).
    group_timeout_s: float = DEFAULT_GROUP_TIMEOUT_S


@dataclass
class AllocationService:
    """See the module docstring. ``enqueue(pod_key)`` puts a pod back on the work queue,
    ``enqueue_after(pod_key, delay)`` after a delay (a timer on the loop when not given)."""

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
    #: Allocated Events being posted: off the worker, which goes on to the next pod.
    _posting: set[asyncio.Task[None]] = field(default_factory=set)
    #: Node and device choice (`placement.py`) and the writes (`writes.py`).
    placer: Placer = field(init=False)
    writes: ClaimWrites = field(init=False)
    #: Which pods wait on what, and when they are tried again (`waiting.py`).
    waiters: WaitingPods = field(init=False)
    #: Unallocated claims' bodies and the generated claims' owners (`pendingclaims.py`).
    claims: PendingClaims = field(init=False)
    #: Groups of pods placed all or nothing (`gangs.py`).
    gangs: Gangs = field(init=False)

    def __post_init__(self) -> None:
        self.gangs = Gangs(self)
        self.claims = PendingClaims(self.view, self.claim_informer)
        self.waiters = WaitingPods(self._enqueue_in)
        self.placer = Placer(view=self.view, offload=self.offload, policy=self.settings.policy)
        self.writes = ClaimWrites(
            kube=self.kube,
            view=self.view,
            binding_timeout_s=self.settings.binding_timeout_s,
            node_label=self.settings.node_label,
            unschedulable_reason=self.demand.unschedulable_reason,
        )

    # --- waking waiting pods -------------------------------------------------------------------

    def note_claim(self, type_: str, claim: ResourceClaimBody) -> None:
        owner = self.claims.note(type_, claim)
        if owner is None:
            return
        if owner in self.waiters:
            self.waiters.wake(owner)  # it waited for the lifecycle to create this claim
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
            _, unrecorded = self.resolve(pod)
        except (ClaimNotCreatedError, PodClaimsError):
            return  # the claim's creation comes back here (note_claim)
        if unrecorded is None:
            return
        self._recording.add(key)
        task = asyncio.create_task(self._record_statuses(pod, unrecorded), name=f"record-claims-{key}")
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)
        task.add_done_callback(lambda _task: self._recording.discard(key))

    def forget_claim(self, claim_key: str) -> None:
        self.claims.forget(claim_key)

    def _claim_keys(self, pod: PodBody) -> frozenset[str]:
        """Keys of the pod's claims that resolve now (for dropping cached bodies)."""
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        try:
            resolved, _ = self.resolve(pod)
        except (ClaimNotCreatedError, PodClaimsError):
            return frozenset()
        return frozenset(f"{namespace}/{r.claim_name}" for r in resolved if r.claim_name is not None)

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
        self.waiters.forget(pod_key)
        self.gated_pods.pop(pod_key, None)
        self.view.withdraw_promise(pod_key)

    # --- one pod -------------------------------------------------------------------------------

    async def sync_pod(self, pod_key: str) -> float | None:
        """Take one gated pod (or one group of pods, `gangs.py`) as far as possible (the
        work queue's sync function)."""
        if not self.view.synced:
            return 0.5
        if is_group_key(pod_key):
            return await self.gangs.sync(pod_key)
        namespace, _, name = pod_key.partition("/")
        pod = self.gated_pods.get(pod_key)
        if pod is None:
            pod = cast(PodBody | None, await self.kube.get_or_none(PODS, name, namespace=namespace))
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp") or not waits_for_draco(pod):
            self.forget(pod_key)
            return None
        if await self.gangs.route(pod):
            # Its group is placed as one (the group's key is on the queue), not this pod alone;
            # the pod only waits for its claims to be made (which brings it, and so its group, back).
            self.waiters.wait(pod_key, frozenset(), CLAIMS_ONLY, reason=GROUP_REASON)
            return None
        started = time.monotonic()
        mark = self.waiters.mark()
        try:
            outcome = await self._schedule(pod, pod_key)
        except ConflictError as exc:
            log.info("Conflict while allocating, re-reading", pod=pod_key, error=str(exc))
            outcome = Outcome("conflict", again=0.0, waits_on=self._claim_keys(pod))
        except NotFoundError as exc:
            log.info("Object gone while allocating, re-reading", pod=pod_key, error=str(exc))
            outcome = Outcome("conflict", again=0.0, waits_on=self._claim_keys(pod))
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
        if self.waiters.missed(mark, outcome.interest, outcome.waits_on):
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

    async def _schedule(self, pod: PodBody, pod_key: str) -> Outcome:
        try:
            resolved, unrecorded = self.resolve(pod)
        except ClaimNotCreatedError:
            # The lifecycle creates it; its watch event wakes the pod.
            return Outcome("waiting", interest=CLAIMS_ONLY)
        except PodClaimsError:
            return Outcome("waiting", interest=CLAIMS_ONLY)  # the lifecycle reports the broken annotation
        outcome = await self._attempt(pod, pod_key, resolved, unrecorded)
        if (
            unrecorded is not None
            and outcome.result not in ("allocated", "conflict")
            and not (outcome.again is not None and outcome.again <= IN_FLIGHT_RETRY_S)
        ):
            # The pod stays gated for a while: record its claims now, as the pin would have.
            await self._record_statuses(pod, unrecorded)
        return outcome

    def resolve(self, pod: PodBody) -> tuple[list[ResolvedClaim], dict[str, str | None] | None]:
        """The pod's claims, and the claim-statuses annotation to write when the pod does
        not record every generated claim yet (None when it does).

        The lifecycle leaves recording to this service while a pod is gated: the names go
        into the pin's write (one pod write fewer per pod), found meanwhile through the
        claims' owner references. An entry that is its draco PodGroup's claim resolves to
        the group's claim (made from a template: recorded too, as upstream records it in
        the pod's status). Raises ``ClaimNotCreatedError`` while one is missing."""
        entries = parse_pod_claims(pod)  # (parses are cached by the annotation's text)
        statuses = claim_statuses(pod)
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        group_claims = self._group_claims(pod, entries)
        found: dict[str, str | None] = {}
        for entry in entries:
            if entry.resource_claim_template_name is None:
                continue
            if group_claims is not None and entry.name in group_claims:
                if entry.name in statuses:
                    continue
                name = group_claims[entry.name]
            elif entry.name in statuses and not self._stale_record(pod, entry.name, statuses[entry.name]):
                continue
            else:
                name = self.claims.generated(uid, entry.name)
            if name is None:
                raise ClaimNotCreatedError(f"pod {key_of(pod)}: claim {entry.name!r} not created yet")
            found[entry.name] = name
        complete = {**statuses, **found}
        resolved = [
            resolve_claim(pod, entry, statuses=complete, group_claims=group_claims) for entry in entries
        ]
        return resolved, (complete if found else None)

    def _stale_record(self, pod: PodBody, entry_name: str, recorded: str | None) -> bool:
        """The claim-statuses annotation names a claim that is not the entry's any more: one
        that is not the pod's (a pod of the same name deleted before, a user's, another
        entry's: a restored backup, an exported pod applied again), or one that is gone
        while the lifecycle has made the entry a new one (an operator killed between the
        two writes). The lifecycle then makes a new claim (upstream's handleClaim), found
        through the generated-claims index and recorded in the pod's next write."""
        if recorded is None:
            return False  # recorded as not needed
        claim = self.claim_informer.get(f"{meta_of(pod).get('namespace', '')}/{recorded}")
        if claim is not None:
            return not is_claim_for_entry(claim, pod, entry_name)
        # Unknown to the informer (a claim the lifecycle made is known at once): gone, or
        # not seen yet. Stale once the entry has a generated claim of its own.
        generated = self.claims.generated(str(meta_of(pod).get("uid", "")), entry_name)
        return generated is not None and generated != recorded

    def _group_claims(self, pod: PodBody, entries: Sequence[PodClaim]) -> dict[str, str | None] | None:
        """The pod's entries that are its draco PodGroup's claims -> the group's claim
        (None: not made yet); None when the pod has no such entry."""
        ref = group_of(pod)
        if ref is None or ref.convention != "draco":
            return None
        policy = policy_of(ref, self.pod_groups.get(ref.key))
        matching = policy.claims_of(entries)
        if not matching:
            return None
        names: dict[str, str | None] = {}
        for entry_name, claim in matching.items():
            if claim.resource_claim_name is not None:
                names[entry_name] = claim.resource_claim_name
            else:
                recorded = policy.claim_statuses.get(entry_name)
                names[entry_name] = recorded or self.claims.generated(policy.uid, entry_name)
        return names

    def group_reference(self, pod: PodBody) -> ReferenceBody | None:
        """The reservation of the pod's draco PodGroup (for its group's claims)."""
        ref = group_of(pod)
        if ref is None or ref.convention != "draco":
            return None
        obj = self.pod_groups.get(ref.key)
        uid = str(meta_of(obj).get("uid") or "") if obj is not None else ""
        return group_reference(ref.name, uid) if uid else None

    async def _record_statuses(self, pod: PodBody, statuses: Mapping[str, str | None]) -> None:
        """Merge-patch the claim-statuses annotation (the UID a precondition)."""
        meta = meta_of(pod)
        try:
            written = await self.kube.patch(
                PODS,
                str(meta.get("name", "")),
                {
                    "metadata": {
                        "uid": meta.get("uid"),
                        "annotations": {CLAIM_STATUSES_ANNOTATION: claim_statuses_annotation(statuses)},
                    }
                },
                namespace=str(meta.get("namespace", "")),
            )
        except (ConflictError, NotFoundError):
            return  # gone or replaced: the next sync decides again
        pod = cast(PodBody, written)
        if waits_for_draco(pod):
            self.gated_pods[key_of(pod)] = pod

    async def _attempt(
        self,
        pod: PodBody,
        pod_key: str,
        resolved: list[ResolvedClaim],
        unrecorded: dict[str, str | None] | None,
    ) -> Outcome:
        # Read once per attempt: the node fit and the special claim both use them.
        requests = pod_requests(pod.get("spec") or {})
        gathered = await self.gather(pod, resolved, requests)
        if isinstance(gathered, Outcome):
            return gathered
        pod, claims, keys = gathered
        waits_on = frozenset(keys)
        if not keys and not bound_by_draco(pod):
            # Every claim resolved to "not needed" (or none named): nothing to allocate, and
            # kube-scheduler places the pod. A pod that names draco as its scheduler is
            # placed by draco all the same (nobody else will).
            self.view.upsert_pod(await self.writes.pin(pod, None, statuses=unrecorded))
            log.info("Un-gated pod without claims to allocate", pod=pod_key)
            return Outcome("allocated")
        if any(key in self.view.in_flight() for key in keys):
            return Outcome("waiting", again=IN_FLIGHT_RETRY_S, waits_on=waits_on, interest=CLAIMS_ONLY)
        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        crowded = await self._crowded(pod, allocated, waits_on)
        if crowded is not None:
            return crowded
        info = self.view.pod_info(pod, avoid=self.avoided(pod))
        choice = await self._choose(pod, pod_key, keys, info, allocated, pending, waits_on)
        if isinstance(choice, Outcome):
            return choice
        node, chosen = choice
        group_keys = frozenset(
            f"{pod['metadata']['namespace']}/{r.claim_name}" for r in resolved if r.for_group and r.claim_name
        )
        return await self._commit(pod, pod_key, node, chosen, claims, info, unrecorded, waits_on, group_keys)

    async def gather(
        self, pod: PodBody, resolved: list[ResolvedClaim], requests: PodRequests
    ) -> tuple[PodBody, list[ResourceClaimBody], list[str]] | Outcome:
        """The pod (as last written), its claims and their keys; or why it waits."""
        namespace = str(pod["metadata"]["namespace"])
        claims: list[ResourceClaimBody] = []
        keys: list[str] = []
        for entry in resolved:
            if entry.claim_name is None:
                continue
            key = f"{namespace}/{entry.claim_name}"
            keys.append(key)
            claim = self.claims.known(key)
            if claim is None:
                claim = cast(
                    ResourceClaimBody | None,
                    await self.kube.get_or_none(RESOURCE_CLAIMS, entry.claim_name, namespace=namespace),
                )
            problem = claim_problem(
                key, claim, pod, entry=entry.pod_claim.name if entry.check_owner else None
            )
            if problem is not None:
                await self.writes.event(pod, REASON_FAILED_SCHEDULING, problem)
                return Outcome("waiting", waits_on=frozenset(keys), interest=CLAIMS_ONLY)
            assert claim is not None
            claims.append(claim)
        if not self.settings.extended_resources:
            return pod, claims, keys
        special = await special_claim_for(
            kube=self.kube,
            pod=pod,
            classes=self.view.classes.values(),
            cached=self.claims.known,
            unallocated=self.claims.unallocated_of(str(pod["metadata"].get("uid", ""))),
            requests=requests,
        )
        if special is None:
            return pod, claims, keys
        pod, claim = special
        key = key_of(claim)
        keys.append(key)
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            await self.writes.event(
                pod,
                REASON_FAILED_SCHEDULING,
                f"ResourceClaim {key} (extended resources) is being deleted; the pod waits for a new one",
            )
            return Outcome("waiting", waits_on=frozenset(keys), interest=CLAIMS_ONLY)
        claims.append(claim)
        return pod, claims, keys

    async def _crowded(
        self, pod: PodBody, allocated: Sequence[ResourceClaimBody], waits_on: frozenset[str]
    ) -> Outcome | None:
        """An allocated claim already has as many consumers as it may have: the pod waits."""
        for claim in allocated:
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if not is_reserved_for(claim, pod) and len(reserved) >= RESERVED_FOR_MAX_SIZE:
                await self.writes.event(
                    pod,
                    REASON_FAILED_SCHEDULING,
                    f"ResourceClaim {key_of(claim)} is already in use by {len(reserved)} consumers, "
                    f"the most it may have ({RESERVED_FOR_MAX_SIZE}); the pod waits until one leaves",
                )
                return Outcome("waiting", waits_on=waits_on, interest=CLAIMS_ONLY)
        return None

    async def _choose(
        self,
        pod: PodBody,
        pod_key: str,
        keys: Sequence[str],
        info: PodInfo,
        allocated: Sequence[ResourceClaimBody],
        pending: Sequence[ResourceClaimBody],
        waits_on: frozenset[str],
    ) -> tuple[str, dict[str, AllocationResultBody]] | Outcome:
        """The node, and the allocations of ``pending`` (marked in flight); or the outcome
        when there is none now."""
        if not pending:
            candidates, node_reasons, refused_by = self.placer.candidates(info, allocated)
            if not candidates:
                return await self._unschedulable(
                    pod,
                    pod_key,
                    allocated,
                    node_reasons,
                    "",
                    waits_on,
                    interest=_rules_interest(refused_by, Interest(node_resources=True)),
                )
            return candidates[0], {}
        deadline = Deadline(self.settings.allocation_timeout_s or None)
        try:
            decision = await self.placer.decide(keys, info, allocated, pending, deadline)
        except AllocationInterruptedError:
            return await self._timed_out(pod, pod_key, keys, deadline, waits_on)
        except (AllocationInputError, AllocationTimeoutError) as exc:
            await self.writes.event(pod, REASON_FAILED_SCHEDULING, str(exc))
            return Outcome("unschedulable", waits_on=waits_on)
        if decision is None:  # another pod took one of the claims in flight meanwhile
            return Outcome("waiting", again=IN_FLIGHT_RETRY_S, waits_on=waits_on, interest=CLAIMS_ONLY)
        if isinstance(decision, NoPlacement):
            _, node_reasons, refused_by = self.placer.candidates(info, allocated)
            inventory = self.view.current_inventory()
            return await self._unschedulable(
                pod,
                pod_key,
                allocated,
                node_reasons,
                decision.explanation,
                waits_on,
                pending=pending,
                device_unfit_nodes=len(decision.per_node),
                interest=UNKNOWN
                if inventory is None
                else _rules_interest(
                    refused_by,
                    interest_of(inventory, pending, node_resources=RESOURCES_RULE in refused_by),
                ),
            )
        return decision

    async def _commit(
        self,
        pod: PodBody,
        pod_key: str,
        node: str,
        chosen: dict[str, AllocationResultBody],
        claims: Sequence[ResourceClaimBody],
        info: PodInfo,
        unrecorded: dict[str, str | None] | None,
        waits_on: frozenset[str],
        group_keys: frozenset[str] = frozenset(),
    ) -> Outcome:
        """Write the claims (what is in flight leaves the view's hold either way), wait
        for binding conditions, pin the pod to ``node`` and un-gate it. The claims of the
        pod's group (``group_keys``) are reserved for the group."""
        self.view.promise_node(pod_key, dataclasses.replace(info, node=node))
        group = self.group_reference(pod) if group_keys else None
        try:
            written: list[ResourceClaimBody] = []
            try:
                for claim in sorted(claims, key=key_of):
                    reference = group if key_of(claim) in group_keys else None
                    written.append(
                        await self.writes.write_claim(
                            claim, pod, chosen.get(key_of(claim)), node=node, reference=reference
                        )
                    )
                    chosen.pop(key_of(claim), None)
            finally:
                if chosen:
                    self.view.abandon(chosen)
            binding = await self.writes.check_binding(pod, written)
            if binding is not None:
                self.view.withdraw_promise(pod_key)
                return Outcome(binding[0], again=binding[1], waits_on=waits_on, interest=CLAIMS_ONLY)
            pinned = await self.writes.pin(pod, node, statuses=unrecorded)
        except BaseException:
            self.view.withdraw_promise(pod_key)
            raise
        self.view.upsert_pod(pinned, info=dataclasses.replace(info, node=node))
        self.view.withdraw_promise(pod_key)
        log.info(
            "Allocated and bound pod" if bound_by_draco(pod) else "Allocated and un-gated pod",
            pod=pod_key,
            node=node,
            claims=sorted(waits_on),
        )
        # The pod is un-gated: the Event (best effort anyway) need not hold this worker for
        # another round trip before it takes the next pod.
        task = asyncio.create_task(
            self.writes.event(pod, *placed_event(pod, node, written), type_="Normal"),
            name=f"event-allocated-{pod_key}",
        )
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)
        return Outcome("allocated")

    async def current_inventory(self) -> Inventory:
        """The view's inventory, rebuilt off the loop when stale (for other controllers)."""
        return await self.placer.inventory()

    async def _timed_out(
        self, pod: PodBody, pod_key: str, keys: Sequence[str], deadline: Deadline, waits_on: frozenset[str]
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
        return Outcome("timeout", again=0.0, waits_on=waits_on)

    async def _unschedulable(
        self,
        pod: PodBody,
        pod_key: str,
        allocated: Sequence[ResourceClaimBody],
        node_reasons: Sequence[str],
        explanation: str,
        waits_on: frozenset[str],
        *,
        pending: Sequence[ResourceClaimBody] = (),
        device_unfit_nodes: int = 0,
        interest: Interest = UNKNOWN,
    ) -> Outcome:
        """No node fits. Like upstream's PostFilter, free one allocated claim of this pod
        that cannot be used any more (its node or devices are gone) and try again.

        A pending user claim may carry the finalizer from an earlier attempt that stopped
        between the finalizer and the allocation (a restart, a conflict); while the pod
        waits it protects nothing, so it comes off (the next attempt adds it again).
        Generated claims keep theirs (they are created with it)."""
        for claim in pending:
            await self.writes.drop_idle_finalizer(claim)
        for claim in allocated:
            if self.placer.unavailable(claim) and all(
                r.get("uid") == pod["metadata"].get("uid")
                for r in (claim.get("status") or {}).get("reservedFor") or []
            ):
                await self.writes.deallocate(claim)
                await self.writes.event(
                    pod,
                    REASON_DEALLOCATED,
                    f"ResourceClaim {key_of(claim)} was allocated on devices or a node that are gone; "
                    "it was deallocated to be allocated again",
                    type_="Normal",
                )
                return Outcome("conflict", again=0.0)
        message, whole = (
            unschedulable_message(
                total=len(self.view.nodes),
                node_reasons=node_reasons,
                device_unfit_nodes=device_unfit_nodes,
                explanation=explanation,
                limit=limit,
            )
            # The Event keeps what fits in 1 KiB; the log has all of it (the Event says so).
            for limit in (EVENT_MESSAGE_LIMIT, 1 << 20)
        )
        await self.writes.event(pod, REASON_FAILED_SCHEDULING, message)
        if bound_by_draco(pod):
            # A gated pod shows SchedulingGated (the API server's); one draco binds shows
            # what kube-scheduler would have said.
            await self.writes.mark_unschedulable(pod, message)
        log.info("No node fits pod", pod=pod_key, reason=whole)
        self.demand.unplaced(
            UnplacedUnit(
                key=pod_key,
                pods=(pod,),
                pending={pod_key: tuple(pending)},
                allocated={pod_key: tuple(allocated)},
                message=message,
            )
        )
        return Outcome("unschedulable", waits_on=waits_on, interest=interest)


# --- helpers ---------------------------------------------------------------------------------------

#: kube-scheduler's rules that refuse a node because of other pods, and because of volumes.
_POD_RULES: Final = frozenset({"InterPodAffinity", "PodTopologySpread", "NodePorts"})
_VOLUME_RULES: Final = frozenset({"VolumeBinding", "VolumeZone", "VolumeRestrictions", "NodeVolumeLimits"})


def _rules_interest(refused_by: frozenset[str], interest: Interest) -> Interest:
    """``interest``, also woken by pods placed or storage changing when those rules
    refused some node (a PreFilter refusal may be either)."""
    pods = bool(refused_by & _POD_RULES) or REFUSED in refused_by
    volumes = bool(refused_by & _VOLUME_RULES) or REFUSED in refused_by
    if not (pods or volumes):
        return interest
    return dataclasses.replace(interest, pods=interest.pods or pods, volumes=interest.volumes or volumes)
