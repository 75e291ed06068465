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

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.allocator import NoPlacement, Placement, SearchBudget, place
from draco.allocator.inventory import Inventory
from draco.allocator.nodeselect import node_selector_matches
from draco.allocator.place import Policy, selector_chains
from draco.api import summarize_claim_status
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    FINALIZER,
    NODE_LABEL,
    POD_CLAIM_NAME_ANNOTATION,
    RESERVED_FOR_MAX_SIZE,
    SCHEDULING_GATE,
)
from draco.api.names import natural_sorted
from draco.errors import AllocationInputError, AllocationInterruptedError, AllocationTimeoutError
from draco.kube.client import PODS, RESOURCE_CLAIMS, ConflictError, Kube, NotFoundError, Obj
from draco.logs import get_logger
from draco.operator.metrics import ALLOCATION_ATTEMPTS, ALLOCATION_DURATION
from draco.operator.scheduler.extended import special_claim_for
from draco.operator.stores import without_managed_fields
from draco.runtime.offload import Deadline, Offloader, shared_offloader
from draco.scheduling.nodefit import (
    EVENT_MESSAGE_LIMIT,
    PodNeeds,
    pod_needs_from_dict,
    resources_unfit_reason,
    unschedulable_message,
)
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaim,
    PodClaimsError,
    ResolvedClaim,
    claim_statuses,
    claim_statuses_annotation,
    controller_pod_name,
    controller_pod_uid,
    has_scheduling_gate,
    is_controlled_by_pod,
    is_reserved_for,
    parse_claims_annotation,
    pod_reference,
    resolve_claim,
)
from draco.scheduling.view import ClusterView, resource_version

__all__ = [
    "ALLOCATION_ATTEMPTS",
    "ALLOCATION_DURATION",
    "AllocationService",
    "AllocationSettings",
    "pin_affinity",
]

log = get_logger(__name__)

#: Event reasons: upstream's scheduler says FailedScheduling when no node fits and
#: BindingConditionsPending while devices are being bound.
REASON_FAILED_SCHEDULING: Final = "FailedScheduling"
REASON_BINDING_PENDING: Final = "BindingConditionsPending"
REASON_BINDING_FAILED: Final = "BindingConditionsFailed"
REASON_DEALLOCATED: Final = "DeallocatedUnavailableClaim"
#: Normal: the pod's claims are allocated, it is pinned to a node and its gate is off.
REASON_ALLOCATED: Final = "Allocated"

#: How soon a pod retries when another pod's write of a claim it shares is in flight.
IN_FLIGHT_RETRY_S: Final = 0.05
#: How many times one claim write is retried on conflicts before the whole pod starts over.
WRITE_ATTEMPTS: Final = 5
#: Upstream's filter timeout (DynamicResourcesArgs.filterTimeout): the wall-clock budget of
#: one allocation attempt.
DEFAULT_ALLOCATION_TIMEOUT_S: Final = 10.0
#: How long a search may run on the event loop before it starts over in a thread.
INLINE_SEARCH_S: Final = 0.02
#: Retry delays after timed-out attempts: first, doubling up to the cap.
TIMEOUT_BACKOFF_S: Final = 1.0
#: Upstream's scheduler caps a pod's backoff at 10 s (podMaxBackoffSeconds); so does draco: a
#: timed-out attempt keeps its work, so the next one is never wasted.
TIMEOUT_BACKOFF_MAX_S: Final = 10.0


@dataclass(frozen=True)
class AllocationSettings:
    """Options of the allocation service (from the operator's command line)."""

    policy: Policy = "first"
    binding_timeout_s: float = 600.0
    #: Wall-clock budget of one attempt (selector evaluation and search); 0: none.
    allocation_timeout_s: float = DEFAULT_ALLOCATION_TIMEOUT_S
    #: Map extended-resource requests to DeviceClasses (one special claim per pod).
    extended_resources: bool = True
    #: Label allocated claims with their node (``resource.draco.dev/node``): node agents
    #: select on it where the API server does not serve the field ``status.nodeName``.
    node_label: bool = False


@dataclass
class _Outcome:
    result: str
    #: None: done (or waiting for an event); a float: call again after that many seconds.
    again: float | None = None
    #: Claim keys whose change should wake the pod while it waits.
    waits_on: frozenset[str] = frozenset()


@dataclass
class AllocationService:
    """See the module docstring. ``enqueue(pod_key)`` puts a pod back on the work queue."""

    kube: Kube
    view: ClusterView
    enqueue: Callable[[str], None]
    settings: AllocationSettings = field(default_factory=AllocationSettings)
    #: Pods that could not finish, and the claim keys whose change may unblock them.
    waiting: dict[str, frozenset[str]] = field(default_factory=dict)
    #: The same, by claim key: a claim change wakes its pods without a scan of every
    #: waiting pod (thousands wait during a burst, and every claim write is a change).
    _waiters: dict[str, set[str]] = field(default_factory=dict)
    #: The newest body the watch delivered of each gated pod (read instead of a GET:
    #: every write that depends on it carries its resourceVersion, so a stale body only
    #: costs a conflict and a re-read).
    gated_pods: dict[str, Obj] = field(default_factory=dict)
    #: The newest body of each unallocated claim, for the same reason.
    pending_claims: dict[str, Obj] = field(default_factory=dict)
    #: Claims generated for pods (controlled by a pod, annotated with the pod claim name),
    #: by (pod UID, pod claim name): how a gated pod finds the claim the lifecycle made for
    #: it before the claim-statuses annotation records it (the pin writes the annotation).
    _generated: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    _generated_for: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Where selector evaluation and searches run (threads, off the event loop).
    offload: Offloader = field(default_factory=shared_offloader)
    #: Consecutive timed-out attempts per pod (the retry backoff).
    timeouts: dict[str, int] = field(default_factory=dict)
    #: One decision (search + mark) at a time.
    _decision: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Selector chains known to be evaluated on every device of the inventory it names.
    _warmed: tuple[Inventory | None, set[tuple[str, ...]]] = field(default_factory=lambda: (None, set()))
    #: Allocated Events being posted: off the worker, which goes on to the next pod.
    _posting: set[asyncio.Task[None]] = field(default_factory=set)

    # --- waking waiting pods -------------------------------------------------------------------

    def note_claim(self, claim: Obj) -> None:
        """Keep the newest body of an unallocated claim (read instead of a GET, like
        ``gated_pods``); allocated or deleted claims are forgotten."""
        key = _key(claim)
        if (claim.get("status") or {}).get("allocation") or (claim.get("metadata") or {}).get(
            "deletionTimestamp"
        ):
            self.pending_claims.pop(key, None)
        else:
            self.pending_claims[key] = claim
        if key not in self._generated_for:
            owner = controller_pod_uid(claim)
            pod_claim = ((claim.get("metadata") or {}).get("annotations") or {}).get(
                POD_CLAIM_NAME_ANNOTATION
            )
            if owner and pod_claim:
                self._generated_for[key] = (owner, str(pod_claim))
                self._generated.setdefault((owner, str(pod_claim)), set()).add(key)
                # The pod waited for the lifecycle to create this claim: look again now.
                pod_name = controller_pod_name(claim)
                pod_key = f"{(claim.get('metadata') or {}).get('namespace', '')}/{pod_name}"
                if pod_name and pod_key in self.waiting:
                    self.enqueue(pod_key)

    def forget_claim(self, claim_key: str) -> None:
        self.pending_claims.pop(claim_key, None)
        generated = self._generated_for.pop(claim_key, None)
        if generated is not None:
            keys = self._generated.get(generated)
            if keys is not None:
                keys.discard(claim_key)
                if not keys:
                    del self._generated[generated]

    def _claim_keys(self, pod: Obj) -> frozenset[str]:
        """Keys of the pod's claims that resolve now (for dropping cached bodies)."""
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        try:
            resolved, _ = self._resolve(pod)
        except (ClaimNotCreatedError, PodClaimsError):
            return frozenset()
        return frozenset(f"{namespace}/{r.claim_name}" for r in resolved if r.claim_name is not None)

    def generated_claim(self, pod_uid: str, pod_claim: str) -> str | None:
        """The name of the claim generated for the pod's entry ``pod_claim`` (the first by
        name when a crash left two: the one the lifecycle adopts), or None."""
        keys = self._generated.get((pod_uid, pod_claim))
        return min(keys).partition("/")[2] if keys else None

    def _known_pending_claim(self, key: str) -> Obj | None:
        """The watched body of a pending claim, unless the view knows a newer state of it
        (an allocation this operator wrote since)."""
        claim = self.pending_claims.get(key)
        if claim is None:
            return None
        record = self.view.claims.get(key)
        if record is not None and record.resource_version >= resource_version(claim):
            return None
        return claim

    def claim_changed(self, claim_key: str) -> None:
        for pod_key in list(self._waiters.get(claim_key, ())):
            self.enqueue(pod_key)

    def _wait(self, pod_key: str, claim_keys: frozenset[str]) -> None:
        self._stop_waiting(pod_key)
        self.waiting[pod_key] = claim_keys
        for claim_key in claim_keys:
            self._waiters.setdefault(claim_key, set()).add(pod_key)

    def _stop_waiting(self, pod_key: str) -> None:
        for claim_key in self.waiting.pop(pod_key, frozenset()):
            pods = self._waiters.get(claim_key)
            if pods is not None:
                pods.discard(pod_key)
                if not pods:
                    del self._waiters[claim_key]

    def retry_waiting(self) -> None:
        for pod_key in list(self.waiting):
            self.enqueue(pod_key)

    def forget(self, pod_key: str) -> None:
        self._stop_waiting(pod_key)
        self.gated_pods.pop(pod_key, None)
        self.timeouts.pop(pod_key, None)
        self.view.withdraw_promise(pod_key)

    # --- one pod -------------------------------------------------------------------------------

    async def sync_pod(self, pod_key: str) -> float | None:
        """Take one gated pod as far as possible (the work queue's sync function)."""
        if not self.view.synced:
            return 0.5
        namespace, _, name = pod_key.partition("/")
        pod = self.gated_pods.get(pod_key)
        if pod is None:
            pod = await self.kube.get_or_none(PODS, name, namespace=namespace)
        if (
            pod is None
            or (pod.get("metadata") or {}).get("deletionTimestamp")
            or not has_scheduling_gate(pod)
        ):
            self.forget(pod_key)
            return None
        started = time.monotonic()
        capacity_seen = self.view.capacity_changes
        try:
            outcome = await self._schedule(pod, pod_key)
        except ConflictError as exc:
            log.info("Conflict while allocating, re-reading", pod=pod_key, error=str(exc))
            outcome = _Outcome("conflict", again=0.0, waits_on=self._claim_keys(pod))
        except NotFoundError as exc:
            log.info("Object gone while allocating, re-reading", pod=pod_key, error=str(exc))
            outcome = _Outcome("conflict", again=0.0, waits_on=self._claim_keys(pod))
        except BaseException:
            ALLOCATION_ATTEMPTS.labels(result="error").inc()
            ALLOCATION_DURATION.labels(result="error").observe(time.monotonic() - started)
            raise
        ALLOCATION_ATTEMPTS.labels(result=outcome.result).inc()
        ALLOCATION_DURATION.labels(result=outcome.result).observe(time.monotonic() - started)
        if outcome.result != "timeout":
            self.timeouts.pop(pod_key, None)
        if outcome.result == "allocated":
            self._stop_waiting(pod_key)
            self.gated_pods.pop(pod_key, None)
        elif outcome.result == "conflict":
            self.gated_pods.pop(pod_key, None)  # read it fresh next time
            for key in outcome.waits_on:
                self.pending_claims.pop(key, None)
        else:
            self._wait(pod_key, outcome.waits_on)
            if outcome.again is None and self.view.capacity_changes != capacity_seen:
                # Room was freed while this attempt ran, after it read the view: the wake-up
                # went to the pods waiting then, not to this one (not waiting yet on its
                # first attempt), so it would wait beside a free device. Look again now.
                log.info("Capacity changed during the attempt, trying again", pod=pod_key)
                return 0.0
        return outcome.again

    async def _schedule(self, pod: Obj, pod_key: str) -> _Outcome:
        try:
            resolved, unrecorded = self._resolve(pod)
        except ClaimNotCreatedError:
            return _Outcome("waiting")  # the lifecycle creates it; its watch event wakes the pod
        except PodClaimsError:
            return _Outcome("waiting")  # the lifecycle reports the broken annotation
        outcome = await self._attempt(pod, pod_key, resolved, unrecorded)
        if (
            unrecorded is not None
            and outcome.result not in ("allocated", "conflict")
            and not (outcome.again is not None and outcome.again <= IN_FLIGHT_RETRY_S)
        ):
            # The pod stays gated for a while: record its claims now, as the pin would have.
            await self._record_statuses(pod, unrecorded)
        return outcome

    def _resolve(self, pod: Obj) -> tuple[list[ResolvedClaim], dict[str, str | None] | None]:
        """The pod's claims, and the claim-statuses annotation to write when the pod does
        not record every generated claim yet (None when it does).

        The lifecycle leaves recording to this service while a pod is gated: the names go
        into the pin's write (one pod write fewer per pod), found meanwhile through the
        claims' owner references. Raises ``ClaimNotCreatedError`` while one is missing."""
        entries = _parsed_claims(pod)
        statuses = claim_statuses(pod)
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        found: dict[str, str | None] = {}
        for entry in entries:
            if entry.resource_claim_template_name is None or entry.name in statuses:
                continue
            name = self.generated_claim(uid, entry.name)
            if name is None:
                raise ClaimNotCreatedError(f"pod {_key(pod)}: claim {entry.name!r} not created yet")
            found[entry.name] = name
        complete = {**statuses, **found}
        resolved = [resolve_claim(pod, entry, statuses=complete) for entry in entries]
        return resolved, (complete if found else None)

    async def _record_statuses(self, pod: Obj, statuses: Mapping[str, str | None]) -> None:
        meta = pod.get("metadata") or {}
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
        if has_scheduling_gate(written):
            self.gated_pods[_key(written)] = written

    async def _attempt(
        self, pod: Obj, pod_key: str, resolved: list[ResolvedClaim], unrecorded: dict[str, str | None] | None
    ) -> _Outcome:
        namespace = str(pod["metadata"]["namespace"])
        claims: list[Obj] = []
        keys: list[str] = []
        for entry in resolved:
            if entry.claim_name is None:
                continue
            key = f"{namespace}/{entry.claim_name}"
            keys.append(key)
            claim = self._known_pending_claim(key)
            if claim is None:
                claim = await self.kube.get_or_none(RESOURCE_CLAIMS, entry.claim_name, namespace=namespace)
            problem = None
            if claim is None:
                problem = f"ResourceClaim {key} does not exist yet; the pod waits for it"
            elif (claim.get("metadata") or {}).get("deletionTimestamp"):
                problem = (
                    f"ResourceClaim {key} is being deleted; the pod waits until it is gone and recreated"
                )
            elif entry.check_owner and not is_controlled_by_pod(claim, pod):
                problem = (
                    f"ResourceClaim {key} was not created for this pod (its controller is another object); "
                    "delete it so that a new one is generated"
                )
            if problem is not None:
                await self._event(pod, REASON_FAILED_SCHEDULING, problem)
                return _Outcome("waiting", waits_on=frozenset(keys))
            assert claim is not None
            claims.append(claim)
        special = (
            await special_claim_for(
                kube=self.kube,
                pod=pod,
                classes=self.view.classes.values(),
                cached=self._known_pending_claim,
                unallocated=self.pending_claims.values(),
            )
            if self.settings.extended_resources
            else None
        )
        if special is not None:
            pod, claim = special
            key = _key(claim)
            keys.append(key)
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                await self._event(
                    pod,
                    REASON_FAILED_SCHEDULING,
                    f"ResourceClaim {key} (extended resources) is being deleted; the pod waits for a new one",
                )
                return _Outcome("waiting", waits_on=frozenset(keys))
            claims.append(claim)
        waits_on = frozenset(keys)
        if not keys:
            # Every claim resolved to "not needed" (or none named): nothing to allocate.
            self.view.upsert_pod(await self._pin(pod, None, statuses=unrecorded))
            log.info("Un-gated pod without claims to allocate", pod=pod_key)
            return _Outcome("allocated")
        if any(key in self.view.in_flight() for key in keys):
            return _Outcome("waiting", again=IN_FLIGHT_RETRY_S, waits_on=waits_on)
        deadline = Deadline(self.settings.allocation_timeout_s or None)

        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        for claim in allocated:
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if not is_reserved_for(claim, pod) and len(reserved) >= RESERVED_FOR_MAX_SIZE:
                await self._event(
                    pod,
                    REASON_FAILED_SCHEDULING,
                    f"ResourceClaim {_key(claim)} is already in use by {len(reserved)} consumers, "
                    f"the most it may have ({RESERVED_FOR_MAX_SIZE}); the pod waits until one leaves",
                )
                return _Outcome("waiting", waits_on=waits_on)

        needs = pod_needs_from_dict(pod.get("spec") or {})
        chosen: dict[str, Obj] = {}
        if pending:
            try:
                decision = await self._decide(keys, needs, allocated, pending, deadline)
            except AllocationInterruptedError:
                return await self._timed_out(pod, pod_key, keys, deadline, waits_on)
            except (AllocationInputError, AllocationTimeoutError) as exc:
                await self._event(pod, REASON_FAILED_SCHEDULING, str(exc))
                return _Outcome("unschedulable", waits_on=waits_on)
            if decision is None:  # another pod took one of the claims in flight meanwhile
                return _Outcome("waiting", again=IN_FLIGHT_RETRY_S, waits_on=waits_on)
            if isinstance(decision, NoPlacement):
                _, node_reasons = self._candidates(needs, allocated)
                return await self._unschedulable(
                    pod,
                    pod_key,
                    allocated,
                    node_reasons,
                    decision.explanation,
                    waits_on,
                    pending=pending,
                    device_unfit_nodes=len(decision.per_node),
                )
            node, chosen = decision
        else:
            candidates, node_reasons = self._candidates(needs, allocated)
            if not candidates:
                return await self._unschedulable(pod, pod_key, allocated, node_reasons, "", waits_on)
            node = candidates[0]
        self.view.promise_node(pod_key, node, needs.usage)
        try:
            written: list[Obj] = []
            try:
                for claim in sorted(claims, key=_key):
                    written.append(await self._write_claim(claim, pod, chosen.get(_key(claim)), node=node))
                    chosen.pop(_key(claim), None)
            finally:
                if chosen:
                    self.view.abandon(chosen)
            binding = await self._check_binding(pod, written)
            if binding is not None:
                self.view.withdraw_promise(pod_key)
                return _Outcome(binding[0], again=binding[1], waits_on=waits_on)
            pinned = await self._pin(pod, node, statuses=unrecorded)
        except BaseException:
            self.view.withdraw_promise(pod_key)
            raise
        self.view.upsert_pod(pinned)
        self.view.withdraw_promise(pod_key)
        log.info("Allocated and un-gated pod", pod=pod_key, node=node, claims=sorted(keys))
        # The pod is un-gated: the Event (best effort anyway) need not hold this worker for
        # another round trip before it takes the next pod.
        task = asyncio.create_task(
            self._event(pod, REASON_ALLOCATED, _allocated_message(node, written), type_="Normal"),
            name=f"event-allocated-{pod_key}",
        )
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)
        return _Outcome("allocated")

    # --- node choice ---------------------------------------------------------------------------

    async def _decide(
        self,
        keys: Sequence[str],
        needs: PodNeeds,
        allocated: Sequence[Obj],
        pending: Sequence[Obj],
        deadline: Deadline,
    ) -> tuple[str, dict[str, Obj]] | NoPlacement | None:
        """Choose a node and devices for ``pending`` and mark them in flight.

        The selectors are evaluated first, off the loop and outside the decision lock; the
        search runs in a thread on the frozen view, under the lock; the choice is marked
        right after the view thaws, with no ``await`` between. None: one of ``keys`` went
        in flight for another pod meanwhile. Raises ``AllocationInterruptedError`` when
        ``deadline`` runs out (what was evaluated stays cached for the next attempt).
        """
        while True:
            inventory = await self._inventory()
            chains = selector_chains(inventory, pending)
            fresh, warmed = self._warmed
            if fresh is not inventory:
                warmed = set()
                self._warmed = (inventory, warmed)
            cold = [chain for chain in chains if chain not in warmed]
            if cold:
                if not await self.offload.warm(inventory.cache, cold, inventory.devices, deadline=deadline):
                    raise AllocationInterruptedError("the selectors were not evaluated in time")
                if self._warmed[0] is inventory:
                    warmed.update(cold)
            async with self._decision:
                if self.view.current_inventory() is not inventory:
                    continue  # slices or classes changed meanwhile: evaluate the new devices
                if any(key in self.view.in_flight() for key in keys):
                    return None
                if deadline.expired():
                    raise AllocationInterruptedError("the wall-clock budget ran out before the search")
                # Over cached answers most searches take a millisecond: try on the loop
                # first, stopped (never answered differently) after INLINE_SEARCH_S; a
                # search that needs longer starts over in a thread on the frozen view.
                try:
                    result = self._place(needs, allocated, pending, interrupt=_after(INLINE_SEARCH_S))
                except AllocationInterruptedError:
                    self.view.freeze()
                    try:
                        result = await self.offload.run(
                            lambda stop: self._place(
                                needs,
                                allocated,
                                pending,
                                interrupt=lambda: stop.is_set() or deadline.expired(),
                            )
                        )
                    finally:
                        self.view.thaw()
                if isinstance(result, NoPlacement):
                    return result
                chosen = result.results.json()
                if self._needs_timestamp(chosen):
                    stamp = _now()
                    for allocation in chosen.values():
                        allocation["allocationTimestamp"] = stamp
                # No await since the search: the devices are taken before anyone else looks.
                self.view.begin(chosen)
                return result.node, chosen

    async def current_inventory(self) -> Inventory:
        """The view's inventory, rebuilt off the loop when stale (for other controllers)."""
        return await self._inventory()

    async def _inventory(self) -> Inventory:
        """The view's inventory, built in a thread on the frozen view when it is stale."""
        inventory = self.view.current_inventory()
        if inventory is not None:
            return inventory
        async with self._decision:
            self.view.freeze()
            try:
                return await self.offload.run(lambda _stop: self.view.inventory())
            finally:
                self.view.thaw()

    async def _timed_out(
        self, pod: Obj, pod_key: str, keys: Sequence[str], deadline: Deadline, waits_on: frozenset[str]
    ) -> _Outcome:
        """The attempt ran out of wall-clock time: say so (it is not "does not fit") and
        retry later with backoff."""
        count = self.timeouts.get(pod_key, 0) + 1
        self.timeouts[pod_key] = count
        delay = min(TIMEOUT_BACKOFF_S * 2 ** (count - 1), TIMEOUT_BACKOFF_MAX_S)
        names = natural_sorted(keys)
        # The why comes first and at most three names, so the Event keeps it within 1 KiB.
        claims = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        await self._event(
            pod,
            REASON_FAILED_SCHEDULING,
            f"allocating ResourceClaim(s) {claims} timed out after "
            f"{deadline.seconds or 0:g}s (the operator's --allocation-timeout): evaluating device "
            f"selectors and searching for devices took longer; this does not mean the claims do not fit. "
            f"Retrying in {delay:g}s (attempt {count}); the work done so far is kept",
        )
        log.warning("Allocation attempt timed out", pod=pod_key, attempts=count, retry_in=delay)
        return _Outcome("timeout", again=delay, waits_on=waits_on)

    def _place(
        self,
        needs: PodNeeds,
        allocated: Sequence[Obj],
        pending: Sequence[Obj],
        *,
        interrupt: Callable[[], bool] | None = None,
    ) -> Placement | NoPlacement:
        """Allocate ``pending`` on a node that admits the pod.

        The label, affinity and taint checks are cached per kind of pod; the resource
        check is made on the node the allocator picks, and only when that node lacks room
        are all nodes checked and the allocator asked again (rare: pods rarely fill a
        node's cpu before its devices, and checking every node per pod is what costs).
        """
        selectors = _allocated_selectors(allocated)
        fit = self.view.static_fit(needs)
        nodes = fit.nodes
        if selectors:
            nodes = self.view.allocator_nodes(n for n in fit.names if self._matches_all(n, selectors))
        if not nodes:
            return NoPlacement(explanation="", per_node={})
        inventory = self.view.inventory()
        budget = SearchBudget(interrupt=interrupt)
        result = place(
            inventory=inventory,
            nodes=nodes,
            claims=pending,
            policy=self.settings.policy,
            budget=budget,
        )
        if isinstance(result, Placement) and resources_unfit_reason(
            needs, self.view.nodes[result.node], used=self.view.node_usage(result.node)
        ):
            candidates, _ = self._candidates(needs, allocated)
            if not candidates:
                return NoPlacement(explanation="", per_node={})
            result = place(
                inventory=inventory,
                nodes=self.view.allocator_nodes(candidates),
                claims=pending,
                policy=self.settings.policy,
                budget=budget,
            )
        return result

    def _matches_all(self, name: str, selectors: Sequence[Mapping[str, Any]]) -> bool:
        labels = self.view.nodes[name].labels
        return all(node_selector_matches(s, name=name, labels=labels) for s in selectors)

    def _candidates(self, needs: PodNeeds, allocated: Sequence[Obj]) -> tuple[list[str], list[str]]:
        """Nodes that admit the pod and every allocated claim, and why the others do not."""
        selectors = _allocated_selectors(allocated)
        fit = self.view.static_fit(needs)
        candidates: list[str] = []
        reasons = list(fit.reasons)
        nodes = self.view.nodes
        for name in fit.names:
            info = nodes[name]
            reason = resources_unfit_reason(needs, info, used=self.view.node_usage(name))
            if reason is None and selectors and not self._matches_all(name, selectors):
                reason = "node(s) didn't match the node selector of an allocated claim"
            if reason is None:
                candidates.append(name)
            else:
                reasons.append(reason)
        return candidates, reasons

    async def _unschedulable(
        self,
        pod: Obj,
        pod_key: str,
        allocated: Sequence[Obj],
        node_reasons: Sequence[str],
        explanation: str,
        waits_on: frozenset[str],
        *,
        pending: Sequence[Obj] = (),
        device_unfit_nodes: int = 0,
    ) -> _Outcome:
        """No node fits. Like upstream's PostFilter, free one allocated claim of this pod
        that cannot be used any more (its node or devices are gone) and try again.

        A pending user claim may carry the finalizer from an earlier attempt that stopped
        between the finalizer and the allocation (a restart, a conflict); while the pod
        waits it protects nothing, so it comes off (the next attempt adds it again).
        Generated claims keep theirs (they are created with it)."""
        for claim in pending:
            await self._drop_idle_finalizer(claim)
        for claim in allocated:
            if self._unavailable(claim) and all(
                r.get("uid") == pod["metadata"].get("uid")
                for r in (claim.get("status") or {}).get("reservedFor") or []
            ):
                await self._deallocate(claim)
                await self._event(
                    pod,
                    REASON_DEALLOCATED,
                    f"ResourceClaim {_key(claim)} was allocated on devices or a node that are gone; "
                    "it was deallocated to be allocated again",
                    type_="Normal",
                )
                return _Outcome("conflict", again=0.0)
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
        await self._event(pod, REASON_FAILED_SCHEDULING, message)
        log.info("No node fits pod", pod=pod_key, reason=whole)
        return _Outcome("unschedulable", waits_on=waits_on)

    async def _drop_idle_finalizer(self, claim: Obj) -> None:
        meta = claim.get("metadata") or {}
        finalizers = meta.get("finalizers") or []
        if (
            FINALIZER not in finalizers
            or meta.get("deletionTimestamp")
            or _key(claim) in self.view.in_flight()
            # A pod's generated claim is created with the finalizer and keeps it until it
            # is deallocated or deleted: taking it off would only cost two writes.
            or controller_pod_uid(claim) is not None
        ):
            return
        try:
            await self.kube.patch(
                RESOURCE_CLAIMS,
                meta["name"],
                {
                    "metadata": {
                        "finalizers": [f for f in finalizers if f != FINALIZER] or None,
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
                namespace=meta["namespace"],
            )
        except (ConflictError, NotFoundError):
            return  # it changed meanwhile: whoever changed it decides
        log.info("Removed the finalizer of a claim that waits unallocated", claim=_key(claim))

    def _unavailable(self, claim: Obj) -> bool:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        selector = allocation.get("nodeSelector")
        if selector is not None and not any(
            node_selector_matches(selector, name=name, labels=info.labels)
            for name, info in self.view.nodes.items()
        ):
            return True
        inventory = self.view.inventory()
        return any(
            (r.get("driver", ""), r.get("pool", ""), r.get("device", "")) not in inventory.by_key
            for r in (allocation.get("devices") or {}).get("results") or []
        )

    # --- writes ----------------------------------------------------------------------------------

    async def _write_claim(self, claim: Obj, pod: Obj, allocation: Obj | None, *, node: str | None) -> Obj:
        """Finalizer (unless the claim has it: generated claims are created with it), then
        allocation (if new, with the node the node agent selects on) and the pod's
        reservation in one status update.

        Conflicts re-read the claim and try again; if meanwhile the claim got an
        allocation we did not choose (or lost the one it had), the pod starts over.
        """
        key = _key(claim)
        current = claim
        for _attempt in range(WRITE_ATTEMPTS):
            meta = current.get("metadata") or {}
            status = dict(current.get("status") or {})
            if allocation is not None and status.get("allocation"):
                raise ConflictError(f"claim {key} was allocated meanwhile", status=409)
            if allocation is None and not status.get("allocation"):
                raise ConflictError(f"claim {key} was deallocated meanwhile", status=409)
            if meta.get("deletionTimestamp"):
                raise ConflictError(f"claim {key} is being deleted", status=409)
            try:
                patch: Obj = {}
                if FINALIZER not in (meta.get("finalizers") or []):
                    patch["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
                if (
                    allocation is not None
                    and node
                    and self.settings.node_label
                    and (meta.get("labels") or {}).get(NODE_LABEL) != node
                ):
                    # Before the allocation: an agent never sees an allocation it cannot select.
                    patch["labels"] = {NODE_LABEL: node}
                if patch:
                    patch["resourceVersion"] = meta["resourceVersion"]
                    current = await self.kube.patch(
                        RESOURCE_CLAIMS, meta["name"], {"metadata": patch}, namespace=meta["namespace"]
                    )
                    meta = current["metadata"]
                    status = dict(current.get("status") or {})
                if allocation is None and is_reserved_for(current, pod):
                    self.view.commit(current)
                    return current
                if allocation is not None:
                    status["allocation"] = allocation
                    if node:
                        status["nodeName"] = node
                status["reservedFor"] = [*(status.get("reservedFor") or []), pod_reference(pod)]
                # Without managedFields: the API server keeps the stored ones when a write
                # brings none, and they are most of a claim's bytes to encode and decode.
                body = {
                    **current,
                    "metadata": without_managed_fields(current)["metadata"],
                    "status": summarize_claim_status(status, deleting=False),
                }
                written = await self.kube.replace_status(RESOURCE_CLAIMS, body)
            except ConflictError:
                current = await self.kube.get(
                    RESOURCE_CLAIMS, claim["metadata"]["name"], namespace=claim["metadata"]["namespace"]
                )
                continue
            self.view.commit(written)
            log.debug(
                "Wrote claim allocation" if allocation is not None else "Reserved claim",
                claim=key,
                pod=_key(pod),
            )
            return written
        raise ConflictError(f"claim {key}: still conflicting after {WRITE_ATTEMPTS} attempts", status=409)

    async def _deallocate(self, claim: Obj) -> Obj:
        status = dict(claim.get("status") or {})
        for name in ("allocation", "reservedFor", "devices"):
            status.pop(name, None)
        deleting = bool((claim.get("metadata") or {}).get("deletionTimestamp"))
        written = await self.kube.replace_status(
            RESOURCE_CLAIMS, {**claim, "status": summarize_claim_status(status, deleting=deleting)}
        )
        self.view.commit(written)
        log.info("Deallocated claim", claim=_key(claim))
        return written

    async def _pin(self, pod: Obj, node: str | None, *, statuses: Mapping[str, str | None] | None) -> Obj:
        """Required affinity to ``node`` and the gate removed, in one update (only the
        gate when ``node`` is None: a pod without claims is kube-scheduler's to place),
        with the claim-statuses annotation when ``statuses`` says what to record."""
        current = pod
        for _attempt in range(WRITE_ATTEMPTS):
            spec = current.get("spec") or {}
            gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != SCHEDULING_GATE]
            patch_spec: Obj = {"schedulingGates": gates or None}
            if node is not None:
                patch_spec["affinity"] = pin_affinity(spec.get("affinity"), node)
            patch_meta: Obj = {"resourceVersion": current["metadata"]["resourceVersion"]}
            if statuses is not None:
                patch_meta["annotations"] = {CLAIM_STATUSES_ANNOTATION: claim_statuses_annotation(statuses)}
            patch = {"metadata": patch_meta, "spec": patch_spec}
            try:
                return await self.kube.patch(
                    PODS, current["metadata"]["name"], patch, namespace=current["metadata"]["namespace"]
                )
            except ConflictError:
                current = await self.kube.get(
                    PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"]
                )
                if current["metadata"].get("uid") != pod["metadata"].get("uid") or not has_scheduling_gate(
                    current
                ):
                    raise
        raise ConflictError(f"pod {_key(pod)}: still conflicting after {WRITE_ATTEMPTS} attempts", status=409)

    # --- binding conditions --------------------------------------------------------------------

    @staticmethod
    def _needs_timestamp(chosen: Mapping[str, Obj]) -> bool:
        return any(
            r.get("bindingConditions")
            for allocation in chosen.values()
            for r in (allocation.get("devices") or {}).get("results") or []
        )

    async def _check_binding(self, pod: Obj, claims: Sequence[Obj]) -> tuple[str, float | None] | None:
        """None when every binding condition of every claim is True; otherwise the outcome
        (waiting, with when to look again, or a cleared allocation to start over)."""
        pending: list[str] = []
        deadline_in: float | None = None
        for claim in claims:
            status = claim.get("status") or {}
            allocation = status.get("allocation") or {}
            conditions = _device_conditions(status)
            for result in (allocation.get("devices") or {}).get("results") or []:
                wanted = result.get("bindingConditions") or []
                if not wanted:
                    continue
                device = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
                have = conditions.get(device, {})
                failed = [c for c in result.get("bindingFailureConditions") or [] if have.get(c) == "True"]
                elapsed = _age_s(allocation.get("allocationTimestamp"))
                if failed or elapsed >= self.settings.binding_timeout_s:
                    why = (
                        f"binding failure condition {', '.join(failed)} is True"
                        if failed
                        else f"binding conditions were not met within {self.settings.binding_timeout_s:g}s"
                    )
                    await self._deallocate(claim)
                    await self._event(
                        pod,
                        REASON_BINDING_FAILED,
                        f"ResourceClaim {_key(claim)} device {'/'.join(device)}: {why}; "
                        "the allocation was cleared and the pod is retried",
                    )
                    return ("conflict", 0.0)
                missing = [c for c in wanted if have.get(c) != "True"]
                if missing:
                    pending.append(f"{_key(claim)} device {'/'.join(device)} waits for {', '.join(missing)}")
                    left = max(self.settings.binding_timeout_s - elapsed, 0.0)
                    deadline_in = left if deadline_in is None else min(deadline_in, left)
        if not pending:
            return None
        await self._event(
            pod,
            REASON_BINDING_PENDING,
            "waiting for binding conditions: " + "; ".join(pending),
            type_="Normal",
        )
        return ("waiting", (deadline_in or 0.0) + 0.1)

    async def _event(self, pod: Obj, reason: str, message: str, *, type_: str = "Warning") -> None:
        try:
            await self.kube.emit_event(
                {"apiVersion": "v1", "kind": "Pod", "metadata": pod.get("metadata") or {}},
                reason=reason,
                message=message,
                type="Normal" if type_ == "Normal" else "Warning",
            )
        except Exception as exc:  # an Event is best effort; the state is in the objects
            log.warning("Could not record event", pod=_key(pod), reason=reason, error=str(exc))


# --- helpers ---------------------------------------------------------------------------------------


def _allocated_message(node: str, claims: Sequence[Obj]) -> str:
    """``Allocated claims ns/a (gpu-0, gpu-1), ns/b (nic-3) on node node-1; pinned and un-gated``."""
    parts = []
    for claim in claims:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        devices = natural_sorted(str(r.get("device")) for r in results)
        parts.append(f"{_key(claim)} ({', '.join(devices)})" if devices else _key(claim))
    what = ("claim " if len(parts) == 1 else "claims ") + ", ".join(parts) if parts else "no claims needed"
    return f"Allocated {what} on node {node}; the pod is pinned there and its scheduling gate is removed"


_PARSED_CLAIMS: dict[str, list[PodClaim]] = {}


def _parsed_claims(pod: Mapping[str, Any]) -> list[PodClaim]:
    """The pod's claims annotation parsed, cached by its text: pods of one Job or
    Deployment carry the same text, and YAML parsing is slow."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIMS_ANNOTATION)
    if raw is None:
        return []
    entries = _PARSED_CLAIMS.get(str(raw))
    if entries is None:
        entries = parse_claims_annotation(str(raw))
        if len(_PARSED_CLAIMS) >= 256:
            _PARSED_CLAIMS.clear()
        _PARSED_CLAIMS[str(raw)] = entries
    return entries


def _after(seconds: float) -> Callable[[], bool]:
    """An interrupt that fires once ``seconds`` have passed."""
    until = time.monotonic() + seconds
    return lambda: time.monotonic() > until


def _allocated_selectors(allocated: Sequence[Obj]) -> list[Mapping[str, Any]]:
    """The node selectors of allocated claims (None = available everywhere, left out)."""
    found = (((c.get("status") or {}).get("allocation") or {}).get("nodeSelector") for c in allocated)
    return [s for s in found if s is not None]


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _age_s(stamp: object) -> float:
    if not isinstance(stamp, str) or not stamp:
        return 0.0
    try:
        then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds()


def _device_conditions(status: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, str]]:
    found: dict[tuple[str, str, str], dict[str, str]] = {}
    for entry in status.get("devices") or []:
        device = (entry.get("driver", ""), entry.get("pool", ""), entry.get("device", ""))
        found[device] = {str(c.get("type")): str(c.get("status")) for c in entry.get("conditions") or []}
    return found


def pin_affinity(affinity: Mapping[str, Any] | None, node: str) -> dict[str, Any]:
    """``affinity`` with the required node affinity narrowed to ``node``.

    A gated pod may only narrow its required terms (add requirements to each existing
    term); without terms it gets one term naming the node by ``metadata.name``.
    """
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    result = dict(affinity or {})
    node_affinity = dict(result.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []]
    if not terms:
        terms = [{"matchFields": [pin]}]
    else:
        for term in terms:
            term["matchFields"] = [*(term.get("matchFields") or []), pin]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    result["nodeAffinity"] = node_affinity
    return result
