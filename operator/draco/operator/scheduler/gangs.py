"""Groups of pods placed all or nothing: the allocation of a gang.

A gated pod whose group (`draco.scheduling.groups`: draco's PodGroup, the coscheduling
plugin's label, Kueue's pod-group label) asks for a gang, and has fewer than ``minCount``
members placed, is not placed alone: its sync puts the group's key
(``group:<namespace>/<group>``) on the allocation work queue, whose one worker per key
runs :meth:`Gangs.sync` over every gated member at once:

1. the members' claims are read and resolved as a single pod's are; a group missing
   members (fewer gated pods than it still needs) waits for them, holding nothing;
2. **one decision** under the allocation's decision lock (`placement.Placer.lock`), so no
   other pod or group decides meanwhile: each member is decided as a single pod is (every
   rule of kube-scheduler's profile, its claims on one node), its choice marked in flight
   and its pod promised to its node before the next member is decided; per topology
   domain, best fit first (`groups.GroupDecision`). A decision that cannot reach the
   count releases every hold: the group holds nothing, and two groups can never each
   hold part of what the other needs;
3. every member's claims are written (finalizer, allocation, reservation; a claim of the
   group reserved for the PodGroup once); binding conditions are waited for, for all;
   then **every member is pinned and un-gated**, concurrently, only after all of that;
4. a group whose members hold devices without being released within the timeout
   (``--group-timeout``, or the coscheduling PodGroup's ``scheduleTimeoutSeconds``:
   binding conditions that never come, a write that keeps failing) is released whole:
   every claim it allocated is deallocated, then it tries again after its backoff. A
   decision that fails while members hold devices (an operator restarted mid-commit)
   releases them at once.

Events say what is missing, in one message for the group, on every gated member and on
the PodGroup (``FailedScheduling``: "3 of 4 pod(s) can be placed together, 4 needed; ...
first ns/p3: 0/5 nodes are available: ..."), posted when the message changes; a draco
PodGroup's ``PodGroupInitiallyScheduled`` condition says the same, and turns True (for
good) once the group is placed. Members beyond ``minCount`` that do not fit are left
gated and placed alone later, as are members that come once the group runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from draco.allocator import Placement
from draco.allocator.inventory import Inventory
from draco.api.bodies import ResourceClaimBody, key_of, meta_of, object_key
from draco.api.corebodies import PodBody
from draco.api.names import natural_sorted
from draco.errors import AllocationInputError, AllocationInterruptedError, AllocationTimeoutError
from draco.kube.client import ConflictError, KubeError, NotFoundError, Obj, Resource
from draco.logs import get_logger
from draco.operator.informers import POD_GROUP
from draco.operator.scheduler.groupwrites import GroupWrites
from draco.operator.scheduler.outcome import Outcome
from draco.runtime.offload import Deadline
from draco.scheduling.demand import UnplacedUnit
from draco.scheduling.groups import (
    Domain,
    GroupDecision,
    GroupPlan,
    GroupPolicy,
    GroupRef,
    GroupRefusal,
    Member,
    MemberChoice,
    MemberFailure,
    attribute_domains,
    device_need,
    group_of,
    node_domains,
    policy_of,
    refusal_message,
    restricted,
)
from draco.scheduling.nodefit import EVENT_MESSAGE_LIMIT, unschedulable_message
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaimsError,
    is_pod_done,
    is_reserved_for,
    waits_for_draco,
)
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.requests import pod_requests
from draco.scheduling.wakeups import CLAIMS_ONLY, UNKNOWN

if TYPE_CHECKING:
    from draco.operator.scheduler.allocation import AllocationService

__all__ = ["DEFAULT_GROUP_TIMEOUT_S", "GROUP_PREFIX", "Gangs", "is_group_key"]

log = get_logger(__name__)

#: The work-queue keys of groups.
GROUP_PREFIX: Final = "group:"
#: How long a group may hold devices without all its members released (coscheduling's
#: default permit wait).
DEFAULT_GROUP_TIMEOUT_S: Final = 60.0
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
class _Member:
    """A gated member, read and resolved for the decision."""

    key: str
    pod: PodBody
    info: PodInfo
    claims: list[ResourceClaimBody]
    unrecorded: dict[str, str | None] | None
    #: Keys of its claims that are its group's (reserved for the PodGroup).
    group_claims: frozenset[str] = frozenset()

    @property
    def pending(self) -> list[ResourceClaimBody]:
        return [c for c in self.claims if not (c.get("status") or {}).get("allocation")]

    @property
    def allocated(self) -> list[ResourceClaimBody]:
        return [c for c in self.claims if (c.get("status") or {}).get("allocation")]


@dataclass
class _Holds:
    """What one decision pass marked in the view (released together)."""

    claims: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)


@dataclass
class Gangs:
    """The group half of the allocation service (see the module docstring)."""

    service: AllocationService
    clock: Any = time.monotonic
    #: The groups seen, by key (what a ``group:`` key stands for).
    refs: dict[str, GroupRef] = field(default_factory=dict)
    #: Since when a group's members hold devices while some are gated.
    held_since: dict[str, float] = field(default_factory=dict)
    #: Since when a group has had fewer members than it needs.
    incomplete_since: dict[str, float] = field(default_factory=dict)
    _coscheduling: dict[str, tuple[float, Obj | None]] = field(default_factory=dict)
    writes: GroupWrites = field(init=False)

    def __post_init__(self) -> None:
        self.writes = GroupWrites(self.service)

    # --- routing -----------------------------------------------------------------------------

    def note_member(self, pod: PodBody) -> None:
        """A pod of some group changed or went away: a group waiting for its members
        counts them again (no sooner than its backoff allows)."""
        ref = group_of(pod)
        if ref is None:
            return
        key = GROUP_PREFIX + ref.key
        if key in self.service.waiters or ref.key in self.held_since:
            self.service.waiters.wake(key)

    def group_changed(self, obj: Obj) -> None:
        """A draco PodGroup changed (created, its minCount raised or lowered): its group
        looks again."""
        key = key_of(obj)
        if key in self.refs:
            self.service.waiters.wake(GROUP_PREFIX + key)

    async def policy(self, ref: GroupRef) -> GroupPolicy:
        """The group's policy, from its object: draco's from the informer, the
        coscheduling plugin's read (and reused for a few seconds)."""
        if ref.convention == "draco":
            return policy_of(ref, self.service.pod_groups.get(object_key(ref.namespace, ref.name)))
        if ref.convention == "coscheduling":
            now = self.clock()
            cached = self._coscheduling.get(ref.key)
            if cached is None or now - cached[0] > COSCHEDULING_TTL_S:
                try:
                    obj = await self.service.kube.get_or_none(
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
        self.service.waiters.wake(GROUP_PREFIX + ref.key)
        return True

    def _live(self, ref: GroupRef) -> tuple[list[PodBody], int]:
        """The group's gated members (their newest bodies) and how many others run or
        are placed (not done, not being deleted)."""
        gated: list[PodBody] = []
        placed = 0
        for pod in self.service.pods.by_index(POD_GROUP, ref.key):
            meta = meta_of(pod)
            if meta.get("deletionTimestamp") or is_pod_done(pod):
                continue
            if waits_for_draco(pod):
                gated.append(self.service.gated_pods.get(key_of(pod)) or pod)
            else:
                placed += 1
        return gated, placed

    # --- one group ------------------------------------------------------------------------

    async def sync(self, group_key: str) -> float | None:
        """The work queue's sync of a ``group:`` key."""
        ref = self.refs.get(group_key.removeprefix(GROUP_PREFIX))
        if ref is None:
            return None
        started = time.monotonic()
        mark = self.service.waiters.mark()
        try:
            outcome = await self._attempt(ref)
        except (ConflictError, NotFoundError) as exc:
            log.info("Conflict while placing group, re-reading", group=ref.key, error=str(exc))
            outcome = Outcome("conflict", again=0.0)
        return self.service.settle(group_key, outcome, mark=mark, started=started)

    async def _attempt(self, ref: GroupRef) -> Outcome:
        policy = await self.policy(ref)
        gated, placed = self._live(ref)
        if not gated:
            self._forget(ref)
            self.refs.pop(ref.key, None)  # a member that comes later brings it back
            return Outcome("allocated")
        if policy.problem is not None:
            await self.writes.tell(ref, gated, policy.problem, policy)
            return Outcome("waiting", again=GROUP_RECHECK_S)
        if policy.min_count is None or placed >= policy.min_count:
            for pod in gated:  # the group runs: its other members are placed one by one
                self.service.enqueue(key_of(pod))
            self._forget(ref)
            return Outcome("allocated")
        needed = policy.min_count - placed
        if len(gated) < needed:
            since = self.incomplete_since.setdefault(ref.key, self.clock())
            if ref.key not in self.held_since and self.clock() - since < MEMBERS_GRACE_S:
                return Outcome("waiting", again=MEMBERS_GRACE_S)  # its members may be on their way
            await self._release_if_holding(ref, gated, policy)
            message = (
                f"{ref.describe()}: {len(gated) + placed} of {policy.min_count} pod(s) exist; no pod of the "
                f"group is released until {policy.min_count} can be placed together"
            )
            await self.writes.tell(ref, gated, message, policy)
            return Outcome("waiting")
        self.incomplete_since.pop(ref.key, None)
        members = await self._prepare(gated)
        if isinstance(members, Outcome):
            return members
        waits_on = frozenset(key_of(c) for m in members for c in m.claims)
        timeout = policy.timeout_s or self.service.settings.group_timeout_s
        holding = any(is_reserved_for(c, m.pod) for m in members for c in m.allocated)
        if holding:
            since = self.held_since.setdefault(ref.key, self.clock())
            if self.clock() - since >= timeout:
                await self.writes.release(ref, members, policy, timed_out=timeout)
                self.held_since.pop(ref.key, None)
                return Outcome("timeout", again=0.0, waits_on=waits_on)  # again once its backoff ends
        else:
            self.held_since.pop(ref.key, None)
        decision = await self._decide(ref, policy, members, needed)
        if isinstance(decision, Outcome):
            return dataclasses.replace(decision, waits_on=waits_on)
        if isinstance(decision, GroupRefusal):
            if holding:
                await self.writes.release(ref, members, policy)
                self.held_since.pop(ref.key, None)
            await self._refused(ref, gated, members, policy, needed, decision, placed)
            return Outcome("unschedulable", waits_on=waits_on, interest=UNKNOWN)
        plan, holds = decision
        self.held_since.setdefault(ref.key, self.clock())
        left = timeout - (self.clock() - self.held_since[ref.key])
        outcome = await self.writes.commit(
            ref, policy, members, plan, holds.claims, waits_on=waits_on, left=left
        )
        if outcome.result == "allocated":
            self._forget(ref)
        return outcome

    async def _refused(
        self,
        ref: GroupRef,
        gated: Sequence[PodBody],
        members: Sequence[_Member],
        policy: GroupPolicy,
        needed: int,
        decision: GroupRefusal,
        placed: int,
    ) -> None:
        """Tell the group why it cannot be placed, and the demand collaborator (autoscaling)
        that it fits nowhere now."""
        message = refusal_message(ref, decision, placed_before=placed)
        await self.writes.tell(ref, gated, message, policy)
        self.service.demand.unplaced(
            UnplacedUnit(
                key=GROUP_PREFIX + ref.key,
                pods=tuple(m.pod for m in members),
                pending={m.key: tuple(m.pending) for m in members},
                allocated={m.key: tuple(m.allocated) for m in members},
                needed=needed,
                message=message,
            )
        )

    async def _release_if_holding(self, ref: GroupRef, gated: Sequence[PodBody], policy: GroupPolicy) -> None:
        """A group short of members (one was deleted while it held devices, or an operator
        restarted after a commit) gives back what its waiting members hold: it cannot run whole."""
        members = await self._prepare(gated)
        if isinstance(members, list) and any(is_reserved_for(c, m.pod) for m in members for c in m.allocated):
            await self.writes.release(ref, members, policy)
        self.held_since.pop(ref.key, None)

    def _forget(self, ref: GroupRef) -> None:
        self.held_since.pop(ref.key, None)
        self.incomplete_since.pop(ref.key, None)
        self.writes.told.pop(ref.key, None)

    async def _prepare(self, gated: Sequence[PodBody]) -> list[_Member] | Outcome:
        """Each gated member with its claims (in name order); or why the group waits."""
        service = self.service
        members: list[_Member] = []
        by_key = {key_of(pod): pod for pod in gated}
        for key in natural_sorted(by_key):
            pod = by_key[key]
            try:
                resolved, unrecorded = service.resolve(pod)
            except (ClaimNotCreatedError, PodClaimsError):
                return Outcome("waiting", interest=CLAIMS_ONLY)  # the lifecycle creates (or reports) it
            requests = pod_requests(pod.get("spec") or {})
            gathered = await service.gather(pod, resolved, requests)
            if isinstance(gathered, Outcome):
                return gathered
            pod, claims, _ = gathered
            namespace = str(meta_of(pod).get("namespace", ""))
            group_claims = frozenset(
                f"{namespace}/{r.claim_name}" for r in resolved if r.for_group and r.claim_name
            )
            members.append(
                _Member(
                    key,
                    pod,
                    service.view.pod_info(pod, avoid=service.avoided(pod)),
                    claims,
                    unrecorded,
                    group_claims,
                )
            )
        return members

    # --- the decision ----------------------------------------------------------------------

    async def _decide(
        self, ref: GroupRef, policy: GroupPolicy, members: Sequence[_Member], needed: int
    ) -> tuple[GroupPlan, _Holds] | GroupRefusal | Outcome:
        """One decision over the members under the decision lock (see the module docstring)."""
        placer = self.service.placer
        budget = self.service.settings.allocation_timeout_s
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
                    if self.service.view.current_inventory() is not inventory:
                        continue  # devices changed meanwhile: evaluate the new ones
                    in_flight = self.service.view.in_flight()
                    if any(key_of(c) in in_flight for m in members for c in m.pending):
                        # A claim a member shares with another pod is being written for it:
                        # it is found allocated in a moment.
                        return Outcome("waiting", again=IN_FLIGHT_RETRY_S, interest=CLAIMS_ONLY)
                    return await self._passes(members, needed, domains, deadline)
        except AllocationInterruptedError:
            log.warning("Group decision timed out", group=ref.key, members=len(members))
            return Outcome("timeout", again=0.0)

    async def _passes(
        self, members: Sequence[_Member], needed: int, domains: list[Domain] | None, deadline: Deadline
    ) -> tuple[GroupPlan, _Holds] | GroupRefusal:
        by_key = {m.key: m for m in members}
        decision = GroupDecision(
            [Member(m.key, m.pending, m.allocated) for m in members], needed=needed, domains=domains
        )
        holds = _Holds()
        try:
            while (step := decision.next()) is not None:
                member, domain = step
                answer = await self._decide_member(by_key[member.key], member, domain, deadline)
                verdict = decision.record(answer)
                if verdict == "hold" and isinstance(answer, MemberChoice):
                    self._hold(by_key[member.key], answer, holds)
                elif verdict == "release":
                    self._release_holds(holds)
                # The event loop's other work (the lifecycle's writes, watch events) goes on
                # between members; the lock keeps every other decision out meanwhile, and
                # what this pass holds stays marked.
                await asyncio.sleep(0)
        except BaseException:
            self._release_holds(holds)
            raise
        result = decision.result
        assert result is not None
        if isinstance(result, GroupRefusal):
            return result
        return result, holds

    async def _decide_member(
        self, member: _Member, step: Member, domain: Domain | None, deadline: Deadline
    ) -> MemberChoice | MemberFailure:
        """One member, as a single pod is decided (its claims an earlier member of the
        pass allocated come as allocated), within the pass's domain."""
        placer, view = self.service.placer, self.service.view
        within = domain.nodes if domain is not None else None
        pending = list(step.pending)
        if domain is not None and domain.selector is not None:
            pending = restricted(pending, domain.selector)
        if not pending:
            candidates, reasons, _ = placer.candidates(member.info, step.allocated, within=within)
            if candidates:
                return MemberChoice(member.key, candidates[0], {})
            return MemberFailure(member.key, self._unschedulable(reasons))
        names = view.static_fit(member.info).names
        if within is not None:
            names = [n for n in names if n in within]
        try:
            result = await placer.search(member.info, step.allocated, pending, deadline, names=names)
        except (AllocationInputError, AllocationTimeoutError) as exc:
            return MemberFailure(member.key, str(exc))
        if isinstance(result, Placement):
            return MemberChoice(member.key, result.node, placer.wire(result))
        _, reasons, _ = placer.candidates(member.info, step.allocated, within=within)
        return MemberFailure(
            member.key,
            self._unschedulable(reasons, device_unfit=len(result.per_node), explanation=result.explanation),
        )

    def _unschedulable(self, reasons: Sequence[str], *, device_unfit: int = 0, explanation: str = "") -> str:
        return unschedulable_message(
            total=len(self.service.view.nodes),
            node_reasons=reasons,
            device_unfit_nodes=device_unfit,
            explanation=explanation,
            limit=EVENT_MESSAGE_LIMIT // 2,
        )

    def _hold(self, member: _Member, choice: MemberChoice, holds: _Holds) -> None:
        """The member's devices taken and its pod counted on its node, before the next
        member is decided (no await since its search)."""
        view = self.service.view
        view.begin(choice.allocations)
        holds.claims.extend(choice.allocations)
        view.promise_node(member.key, dataclasses.replace(member.info, node=choice.node))
        holds.pods.append(member.key)

    def _release_holds(self, holds: _Holds) -> None:
        view = self.service.view
        if holds.claims:
            view.abandon(holds.claims)
        for key in holds.pods:
            view.withdraw_promise(key)
        holds.claims.clear()
        holds.pods.clear()

    def _domains(
        self, policy: GroupPolicy, members: Sequence[_Member], inventory: Inventory
    ) -> list[Domain] | None:
        """The group's topology domains, best fit first (None: no constraint)."""
        unique: dict[str, ResourceClaimBody] = {}
        for member in members:
            for claim in member.pending:
                unique.setdefault(key_of(claim), claim)
        need = device_need(unique.values())
        if policy.topology_key is not None:
            labels = {name: info.labels for name, info in self.service.view.nodes.items()}
            free = _free_per_node(inventory)
            return node_domains(policy.topology_key, labels, lambda n: free.get(n, 0), need)
        if policy.device_attribute is not None:
            return attribute_domains(
                policy.device_attribute, _attribute_values(inventory, policy.device_attribute), need
            )
        return None


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
