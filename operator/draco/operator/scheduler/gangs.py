"""Groups of pods placed all or nothing: the allocation of a gang.

A gated pod whose group (`draco.scheduling.groups`: draco's PodGroup, the coscheduling
plugin's label, Kueue's pod-group label) asks for a gang, and has fewer than ``minCount``
members placed, is not placed alone: its sync puts the group's key
(``group:<namespace>/<group>``) on the allocation work queue, whose one worker per key
runs :meth:`Gangs.sync` over every gated member at once:

1. the members' claims are read and resolved as a single pod's are; a group missing
   members (fewer gated pods than it still needs) waits for them, holding nothing;
2. **one decision** under the allocation's decision lock (`placement.Placer.lock`), so no
   other pod or group decides meanwhile: each member is planned as a single pod is
   (`draco.scheduling.podplan`: every rule of kube-scheduler's profile, its claims on one
   node), its plan held (devices in flight, pod promised to its node) before the next
   member is planned; per topology domain, best fit first (`groups.GroupDecision`). A
   decision that cannot reach the count releases every hold: the group holds nothing, and
   two groups can never each hold part of what the other needs. The group's plan is its
   members' plans;
3. the executor performs it (`executor.Executor.place_group`): every member's claims are
   written (finalizer, allocation, reservation; a claim of the group reserved for the
   PodGroup once); binding conditions are waited for, for all; then **every member is
   pinned and un-gated**, concurrently, only after all of that;
4. a group whose members hold devices without being released within the timeout
   (``--group-timeout``, or the coscheduling PodGroup's ``scheduleTimeoutSeconds``:
   binding conditions that never come, a write that keeps failing) is released whole:
   every claim it allocated is deallocated, then it tries again after its backoff. A
   decision that fails while members hold devices (an operator restarted mid-commit)
   releases them at once.

Events say what is missing (`groupstatus.py`), in one message for the group, on every
gated member and on the PodGroup (``FailedScheduling``: "3 of 4 pod(s) can be placed together, 4 needed; ...
first ns/p3: 0/5 nodes are available: ..."), posted when the message changes; a draco
PodGroup's ``PodGroupInitiallyScheduled`` condition says the same, and turns True (for
good) once the group is placed. Members beyond ``minCount`` that do not fit are left
gated and placed alone later, as are members that come once the group runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.allocator.inventory import Inventory
from draco.api.bodies import Obj, ResourceClaimBody, key_of, meta_of
from draco.api.corebodies import PodBody
from draco.api.names import natural_sorted
from draco.errors import AllocationInterruptedError
from draco.kube.client import Kube, KubeError, Resource
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.informers import POD_GROUP
from draco.operator.scheduler.executor import Executor, Holders, Holds
from draco.operator.scheduler.groupstatus import GroupStatus
from draco.operator.scheduler.outcome import Outcome
from draco.operator.scheduler.placement import Placer
from draco.operator.scheduler.preemptions import Evictions
from draco.operator.scheduler.reading import PodReader
from draco.operator.scheduler.settings import AllocationSettings
from draco.operator.scheduler.waiting import WaitingPods
from draco.runtime.offload import Deadline
from draco.scheduling.demand import NO_DEMAND, DemandReports, UnplacedUnit
from draco.scheduling.groups import (
    Domain,
    GroupDecision,
    GroupPlan,
    GroupPolicy,
    GroupRef,
    GroupRefusal,
    Member,
    attribute_domains,
    device_need,
    group_of,
    node_domains,
    policy_of,
    refusal_message,
    restricted,
)
from draco.scheduling.nodefit import EVENT_MESSAGE_LIMIT
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaimsError,
    is_pod_done,
    is_reserved_for,
    waits_for_draco,
)
from draco.scheduling.podplan import PodPlan, PodRequest, Unplaced
from draco.scheduling.wakeups import CLAIMS_ONLY, UNKNOWN

__all__ = ["GROUP_PREFIX", "Gangs", "is_group_key"]

log = get_logger(__name__)

#: The work-queue keys of groups.
GROUP_PREFIX: Final = "group:"
#: How soon a group whose object is missing looks again (the coscheduling plugin's
#: PodGroups are read, not watched).
GROUP_RECHECK_S: Final = 10.0
#: How long a group may miss members before it is told so (a workload creates its pods in a
#: burst: every member arriving would otherwise change the message, one Event per member each).
MEMBERS_GRACE_S: Final = 5.0
#: How soon a group looks again when a claim of a member is being written for another pod.
IN_FLIGHT_RETRY_S: Final = 0.05
#: How long a coscheduling PodGroup read is reused.
COSCHEDULING_TTL_S: Final = 5.0
#: The coscheduling plugin's PodGroup (kubernetes-sigs/scheduler-plugins), read for ``minMember``.
COSCHEDULING_POD_GROUPS: Final = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True)


def is_group_key(key: str) -> bool:
    return key.startswith(GROUP_PREFIX)


@dataclass
class Gangs:
    """The group half of the allocation (see the module docstring), over the same
    reader, placer and executor as single pods."""

    reader: PodReader
    placer: Placer
    holds: Holds
    executor: Executor
    status: GroupStatus
    waiters: WaitingPods
    kube: Kube
    #: The pod informer (a group's members by ``POD_GROUP``) and draco's PodGroups.
    pods: Informer[PodBody]
    pod_groups: Informer[Obj]
    #: The newest bodies of gated pods (the allocation service's).
    gated_pods: Mapping[str, PodBody]
    settings: AllocationSettings
    enqueue: Callable[[str], None]
    #: The writes of a group's preemption.
    evictions: Evictions
    #: Told of every group that fits nowhere now (the autoscaling controller's demand).
    demand: DemandReports = NO_DEMAND
    clock: Callable[[], float] = time.monotonic
    #: The groups seen, by key (what a ``group:`` key stands for).
    refs: dict[str, GroupRef] = field(default_factory=dict)
    #: Since when a group's members hold devices while some are gated.
    held_since: dict[str, float] = field(default_factory=dict)
    #: Since when a group has had fewer members than it needs.
    incomplete_since: dict[str, float] = field(default_factory=dict)
    #: Since when a group that preempted waits for its victims.
    preempted_since: dict[str, float] = field(default_factory=dict)
    _coscheduling: dict[str, tuple[float, Obj | None]] = field(default_factory=dict)

    # --- routing -----------------------------------------------------------------------------

    def note_member(self, pod: PodBody) -> None:
        """A pod of some group changed or went away: a group waiting for its members
        counts them again (no sooner than its backoff allows)."""
        ref = group_of(pod)
        if ref is None:
            return
        key = GROUP_PREFIX + ref.key
        if key in self.waiters or ref.key in self.held_since:
            self.waiters.wake(key)

    def group_changed(self, obj: Obj) -> None:
        """A draco PodGroup changed (created, its minCount raised or lowered): its group
        looks again."""
        key = key_of(obj)
        if key in self.refs:
            self.waiters.wake(GROUP_PREFIX + key)

    async def policy(self, ref: GroupRef) -> GroupPolicy:
        """The group's policy, from its object: draco's from the informer, the
        coscheduling plugin's read (and reused for a few seconds)."""
        if ref.convention == "draco":
            return policy_of(ref, self.pod_groups.get(ref.key))
        if ref.convention == "coscheduling":
            now = self.clock()
            cached = self._coscheduling.get(ref.key)
            if cached is None or now - cached[0] > COSCHEDULING_TTL_S:
                try:
                    obj = await self.kube.get_or_none(
                        COSCHEDULING_POD_GROUPS, ref.name, namespace=ref.namespace
                    )
                except KubeError as exc:  # no such kind served, not allowed to read it
                    return GroupPolicy(problem=f"{ref.describe()} could not be read: {exc}")
                cached = (now, obj)
                self._coscheduling[ref.key] = cached
            return policy_of(ref, cached[1])
        return policy_of(ref, None)

    async def route(self, pod: PodBody) -> bool:
        """Whether ``pod`` is placed with its group (its group's key queued) rather than
        alone: it is in a gang whose count is not reached yet (or whose object it waits for)."""
        ref = group_of(pod)
        if ref is None:
            return False
        policy = await self.policy(ref)
        if policy.problem is None and (policy.min_count is None or self._live(ref)[1] >= policy.min_count):
            return False
        self.refs[ref.key] = ref
        self.waiters.wake(GROUP_PREFIX + ref.key)
        return True

    def ref(self, group_key: str) -> GroupRef | None:
        """The group a ``group:`` key stands for (None: not routed, or done)."""
        return self.refs.get(group_key.removeprefix(GROUP_PREFIX))

    def _live(self, ref: GroupRef) -> tuple[list[PodBody], int]:
        """The group's gated members (their newest bodies) and how many others run or
        are placed (not done, not being deleted)."""
        gated: list[PodBody] = []
        placed = 0
        for pod in self.pods.by_index(POD_GROUP, ref.key):
            if meta_of(pod).get("deletionTimestamp") or is_pod_done(pod):
                continue
            if waits_for_draco(pod):
                gated.append(self.gated_pods.get(key_of(pod)) or pod)
            else:
                placed += 1
        return gated, placed

    # --- one group ------------------------------------------------------------------------

    async def attempt(self, ref: GroupRef) -> Outcome:
        """One attempt at the group: its members read, its plan decided and held, its
        writes performed; or why it waits."""
        policy = await self.policy(ref)
        gated, placed = self._live(ref)
        if not gated:
            self._forget(ref)
            self.refs.pop(ref.key, None)  # a member that comes later brings it back
            return Outcome("allocated")
        if policy.problem is not None:
            await self.status.waits(ref, gated, policy.problem)
            return Outcome("waiting", again=GROUP_RECHECK_S)
        if policy.min_count is None or placed >= policy.min_count:
            for pod in gated:  # the group runs: its other members are placed one by one
                self.enqueue(key_of(pod))
            self._forget(ref)
            return Outcome("allocated")
        needed = policy.min_count - placed
        if len(gated) < needed:
            return await self._missing_members(ref, gated, placed, policy)
        self.incomplete_since.pop(ref.key, None)
        members = await self._read(gated)
        if isinstance(members, Outcome):
            return members
        holders = _holders(ref, members, policy)
        waits_on = frozenset(key_of(c) for m in members for c in m.claims)
        timeout = policy.timeout_s or self.settings.group_timeout_s
        holding = any(is_reserved_for(c, _pod(m)) for m in members for c in m.allocated)
        if holding:
            since = self.held_since.setdefault(ref.key, self.clock())
            if self.clock() - since >= timeout:
                await self._release(ref, members, holders, timed_out=timeout)
                return Outcome("timeout", again=0.0, waits_on=waits_on)  # again once its backoff ends
        else:
            self.held_since.pop(ref.key, None)
        decision = await self._decide(ref, policy, members, needed)
        if isinstance(decision, Outcome):
            return dataclasses.replace(decision, waits_on=waits_on)
        if isinstance(decision, GroupRefusal):
            if holding:
                await self._release(ref, members, holders)
            preempted = await self._preempt(ref, members[:needed], waits_on)
            if preempted is not None:
                return preempted
            await self._refused(ref, gated, members, needed, decision, placed)
            return Outcome("unschedulable", waits_on=waits_on, interest=UNKNOWN)
        self.held_since.setdefault(ref.key, self.clock())
        left = timeout - (self.clock() - self.held_since[ref.key])
        outcome = await self.executor.place_group(
            decision.chosen, holders=holders, waits_on=waits_on, left_s=left
        )
        if outcome.result not in ("allocated", "conflict"):
            return outcome  # binding conditions awaited, or failed: nobody was pinned
        for failure in decision.left:
            self.enqueue(failure.key)  # beyond the count: placed alone, later
        if outcome.result == "allocated":
            self._placed(ref, decision)
        return outcome

    async def _refused(
        self,
        ref: GroupRef,
        gated: Sequence[PodBody],
        members: Sequence[PodRequest],
        needed: int,
        decision: GroupRefusal,
        placed: int,
    ) -> None:
        """Tell the group why it cannot be placed, and the demand collaborator (autoscaling)
        that it fits nowhere now."""
        message = refusal_message(ref, decision, placed_before=placed)
        await self.status.waits(ref, gated, message)
        self.demand.unplaced(
            UnplacedUnit(
                key=GROUP_PREFIX + ref.key,
                pods=tuple(_pod(m) for m in members),
                pending={m.key: tuple(m.pending) for m in members},
                allocated={m.key: tuple(m.allocated) for m in members},
                needed=needed,
                message=message,
            )
        )

    async def _preempt(
        self, ref: GroupRef, members: Sequence[PodRequest], waits_on: frozenset[str]
    ) -> Outcome | None:
        """The group fits nowhere: its preemption, as one (`preemption.preempt_group`):
        every member it needs nominated and its victims evicted, or nothing; None when no
        eviction makes room."""
        if self.placer.nominations.group_nominated(ref.key):
            # It preempted already: it waits for its victims (bounded as a pod's wait is).
            since = self.preempted_since.setdefault(ref.key, self.clock())
            if self.clock() - since < self.settings.preemption_timeout_s:
                return Outcome("preempting", again=GROUP_RECHECK_S, waits_on=waits_on)
        if not any(self.placer.may_preempt(m) for m in members):
            return None
        answers = await self.placer.preempt_group(members, await self.evictions.budgets())
        if not isinstance(answers, tuple):
            log.info("No preemption places the group", group=ref.key, reason=answers.reason)
            return None
        for member, answer in zip(members, answers, strict=True):
            assert member.pod is not None
            await self.evictions.perform(member.pod, answer)
        self.preempted_since[ref.key] = self.clock()
        return Outcome("preempting", again=GROUP_RECHECK_S, waits_on=waits_on)

    async def _missing_members(
        self, ref: GroupRef, gated: Sequence[PodBody], placed: int, policy: GroupPolicy
    ) -> Outcome:
        """Fewer gated pods than the group still needs: it waits for them, holding nothing
        (told so once its members had a moment to arrive)."""
        since = self.incomplete_since.setdefault(ref.key, self.clock())
        if ref.key not in self.held_since and self.clock() - since < MEMBERS_GRACE_S:
            return Outcome("waiting", again=MEMBERS_GRACE_S)  # its members may be on their way
        await self._release_if_holding(ref, gated, policy)
        message = (
            f"{ref.describe()}: {len(gated) + placed} of {policy.min_count} pod(s) exist; no pod of the "
            f"group is released until {policy.min_count} can be placed together"
        )
        await self.status.waits(ref, gated, message)
        return Outcome("waiting")

    def _placed(self, ref: GroupRef, decision: GroupPlan) -> None:
        chosen = decision.chosen
        message = (
            f"{len(chosen)} pod(s) placed together: "
            + ", ".join(f"{p.key.partition('/')[2]} on {p.node}" for p in chosen[:8])
            + (f" and {len(chosen) - 8} more" if len(chosen) > 8 else "")
        )
        if decision.domain is not None:
            message += f" (in {decision.domain.label})"
        self.status.placed(ref, message)
        log.info(
            "Placed group",
            group=ref.key,
            pods=len(chosen),
            domain=decision.domain.label if decision.domain else None,
        )
        self._forget(ref)

    async def _release(
        self,
        ref: GroupRef,
        members: Sequence[PodRequest],
        holders: Holders,
        *,
        timed_out: float | None = None,
    ) -> None:
        """Give back every device the gated members hold (after its timeout: say so)."""
        released = await self.executor.give_back(holders)
        self.held_since.pop(ref.key, None)
        if timed_out is not None:
            message = (
                f"{ref.describe()} held devices for {timed_out:g}s without all its pods placed; "
                f"released {released} claim(s), the group is placed again after its backoff"
            )
            log.warning("Released group after its timeout", group=ref.key, claims=released)
            self.status.released(ref, [_pod(m) for m in members], message)
        elif released:
            log.info(
                "Released the devices of a group that cannot be placed whole", group=ref.key, claims=released
            )

    async def _release_if_holding(self, ref: GroupRef, gated: Sequence[PodBody], policy: GroupPolicy) -> None:
        """A group short of members (one was deleted while it held devices, or an operator
        restarted after a commit) gives back what its waiting members hold: it cannot run whole."""
        members = await self._read(gated)
        if isinstance(members, list) and any(
            is_reserved_for(c, _pod(m)) for m in members for c in m.allocated
        ):
            await self._release(ref, members, _holders(ref, members, policy))
        self.held_since.pop(ref.key, None)

    def _forget(self, ref: GroupRef) -> None:
        self.held_since.pop(ref.key, None)
        self.incomplete_since.pop(ref.key, None)
        self.preempted_since.pop(ref.key, None)
        self.status.forget(ref)

    async def _read(self, gated: Sequence[PodBody]) -> list[PodRequest] | Outcome:
        """Each gated member with its claims (in name order), as a single pod is read; or
        why the group waits."""
        members: list[PodRequest] = []
        by_key = {key_of(pod): pod for pod in gated}
        for key in natural_sorted(by_key):
            pod = by_key[key]
            try:
                resolved, unrecorded = self.reader.resolve(pod)
            except (ClaimNotCreatedError, PodClaimsError):
                return Outcome("waiting", interest=CLAIMS_ONLY)  # the lifecycle creates (or reports) it
            read = await self.reader.read(pod, resolved, unrecorded)
            if isinstance(read.found, Unplaced):
                return await self.executor.refuse(read.pod, read.found, waits_on=read.waits_on)
            members.append(dataclasses.replace(read.found, needs_node=True))
        return members

    # --- the decision ----------------------------------------------------------------------

    async def _decide(
        self, ref: GroupRef, policy: GroupPolicy, members: Sequence[PodRequest], needed: int
    ) -> GroupPlan | GroupRefusal | Outcome:
        """One decision over the members under the decision lock (see the module docstring)."""
        placer = self.placer
        budget = self.settings.allocation_timeout_s
        deadline = Deadline(budget * max(1, len(members) // 8) if budget else None)
        try:
            while True:
                inventory = await placer.warm([m.pending for m in members], deadline)
                domains = self._domains(policy, members, inventory)
                selectors = [d.selector for d in domains or () if d.selector]
                if selectors:
                    restricted_pendings = [restricted(m.pending, s) for m in members for s in selectors]
                    inventory = await placer.warm(restricted_pendings, deadline)
                async with placer.lock:
                    if placer.view.current_inventory() is not inventory:
                        continue  # devices changed meanwhile: evaluate the new ones
                    in_flight = placer.view.in_flight()
                    if any(key_of(c) in in_flight for m in members for c in m.pending):
                        # A claim a member shares with another pod is being written for it:
                        # it is found allocated in a moment.
                        return Outcome("waiting", again=IN_FLIGHT_RETRY_S, interest=CLAIMS_ONLY)
                    return await self._passes(members, needed, domains, deadline)
        except AllocationInterruptedError:
            log.warning("Group decision timed out", group=ref.key, members=len(members))
            return Outcome("timeout", again=0.0)

    async def _passes(
        self, members: Sequence[PodRequest], needed: int, domains: list[Domain] | None, deadline: Deadline
    ) -> GroupPlan | GroupRefusal:
        by_key = {m.key: m for m in members}
        decision = GroupDecision(
            [Member(m.key, m.pending, m.allocated) for m in members], needed=needed, domains=domains
        )
        held: list[PodPlan] = []
        try:
            while (step := decision.next()) is not None:
                member, domain = step
                answer = await self._plan_member(by_key[member.key], member, domain, deadline)
                verdict = decision.record(answer)
                if verdict == "hold" and isinstance(answer, PodPlan):
                    # Before the next member is planned (no await since its search).
                    self.holds.take(answer)
                    held.append(answer)
                elif verdict == "release":
                    self.holds.release(held)
                    held.clear()
                # The event loop's other work (the lifecycle's writes, watch events) goes on
                # between members; the lock keeps every other decision out meanwhile, and
                # what this pass holds stays held.
                await asyncio.sleep(0)
        except BaseException:
            self.holds.release(held)
            raise
        result = decision.result
        assert result is not None
        return result

    async def _plan_member(
        self, request: PodRequest, step: Member, domain: Domain | None, deadline: Deadline
    ) -> PodPlan | Unplaced:
        """One member, planned as a single pod is (its claims an earlier member of the pass
        allocated come as allocated), within the pass's domain."""
        pending = list(step.pending)
        if domain is not None and domain.selector is not None:
            pending = restricted(pending, domain.selector)
        planned = await self.placer.search(
            dataclasses.replace(request, claims=[*step.allocated, *pending]),
            deadline,
            within=domain.nodes if domain is not None else None,
            limit=EVENT_MESSAGE_LIMIT // 2,
        )
        if isinstance(planned, Unplaced):
            return planned
        # The claims are written from the bodies read (a domain only narrowed the search).
        bodies = {key_of(c): c for c in request.claims}
        steps = tuple(dataclasses.replace(s, claim=bodies.get(s.key, s.claim)) for s in planned.claims)
        return dataclasses.replace(planned, request=request, claims=steps)

    def _domains(
        self, policy: GroupPolicy, members: Sequence[PodRequest], inventory: Inventory
    ) -> list[Domain] | None:
        """The group's topology domains, best fit first (None: no constraint)."""
        unique: dict[str, ResourceClaimBody] = {}
        for member in members:
            for claim in member.pending:
                unique.setdefault(key_of(claim), claim)
        need = device_need(unique.values())
        if policy.topology_key is not None:
            labels = {name: info.labels for name, info in self.placer.view.nodes.items()}
            free = _free_per_node(inventory)
            return node_domains(policy.topology_key, labels, lambda n: free.get(n, 0), need)
        if policy.device_attribute is not None:
            return attribute_domains(
                policy.device_attribute, _attribute_values(inventory, policy.device_attribute), need
            )
        return None


def _pod(request: PodRequest) -> PodBody:
    assert request.pod is not None
    return request.pod


def _holders(ref: GroupRef, members: Sequence[PodRequest], policy: GroupPolicy) -> Holders:
    return Holders(
        group=ref.key,
        claims=[c for m in members for c in m.claims],
        uids=frozenset(str(meta_of(_pod(m)).get("uid", "")) for m in members),
        group_uid=policy.uid,
    )


def _free_per_node(inventory: Inventory) -> dict[str, int]:
    free: dict[str, int] = {}
    for device in inventory.devices:
        if device.node_name is not None and not inventory.is_allocated(device):
            free[device.node_name] = free.get(device.node_name, 0) + 1
    return free


def _attribute_values(inventory: Inventory, attribute: str) -> list[tuple[str, Any, bool]]:
    """(type tag, value, free) of every device that has ``attribute``."""
    found: list[tuple[str, Any, bool]] = []
    for device in inventory.devices:
        attr = device.attrs.get(attribute)
        if attr is None:
            continue
        tag, values = attr
        if len(values) != 1:
            continue  # a list attribute has no one value to share
        found.append((tag, next(iter(values)), not inventory.is_allocated(device)))
    return found
