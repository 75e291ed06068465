"""A placement decision as a value: what placing one pod takes, or why it waits; pure.

The operator's allocation (`draco.operator.scheduler`) and `draco simulate` decide a pod
the same way, here: :func:`plan_pod` takes the pod as the attempt read it (a
:class:`PodRequest`: its placement record, its claims, what its pin records) and the
cluster as the rules read it, and answers

- a :class:`PodPlan`: the node, the devices of every claim to allocate, and the writes that
  placing the pod implies, in order (:attr:`PodPlan.claims`: each claim's allocation and
  reservation; then the pin or the binding, which records the generated claims). Nobody
  has written anything yet: the operator holds the plan's devices and node in its view (so
  the next decision sees them taken), and its executor performs the writes
  (`operator/scheduler/executor.py`); `draco simulate` prints the plan;
- or an :class:`Unplaced`: why not, in kube-scheduler's words (the FailedScheduling
  Event), what may wake the pod (`draco.scheduling.wakeups`), and what the refusal writes
  (like upstream's PostFilter, an allocated claim of the pod whose devices or node are gone
  is deallocated to be allocated again; pending claims give back an idle finalizer).

A group's plan is its members' plans (`draco.scheduling.groups`): each member is planned as
a pod is, within the group's domain, its devices held before the next member is planned.

Preemption (kube-scheduler's PostFilter, DefaultPreemption) answers for an
:class:`Unplaced` pod whose removal of pods of lower priority would let it fit
(`draco.scheduling.preemption`, which asks this module whether the pod fits with them
gone); its victims are evicted first, and the pod is planned here again once they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal, cast

from draco.allocator import Placement, SearchBudget
from draco.allocator.inventory import Inventory
from draco.allocator.nodeselect import node_selector_matches
from draco.api.bodies import AllocationResultBody, ReferenceBody, ResourceClaimBody, key_of
from draco.api.constants import RESERVED_FOR_MAX_SIZE
from draco.api.corebodies import PodBody
from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import REFUSED
from draco.scheduling.nodefit import EVENT_MESSAGE_LIMIT, unschedulable_message
from draco.scheduling.nodeorder import PlacementPolicy
from draco.scheduling.noderesources import FIT as RESOURCES_RULE
from draco.scheduling.plan import AllocatorNodes, Candidates, candidates, choose
from draco.scheduling.podclaims import is_reserved_for
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.wakeups import CLAIMS_ONLY, UNKNOWN, Interest, interest_of

__all__ = [
    "WHOLE",
    "ClaimStep",
    "PodPlan",
    "PodRequest",
    "Unplaced",
    "crowded",
    "plan_pod",
]

#: The limit of a message that is kept whole (the log's; an Event keeps 1 KiB).
WHOLE: Final = 1 << 20
#: kube-scheduler's rules that refuse a node because of other pods, and because of volumes.
_POD_RULES: Final = frozenset({"InterPodAffinity", "PodTopologySpread", "NodePorts"})
_VOLUME_RULES: Final = frozenset({"VolumeBinding", "VolumeZone", "VolumeRestrictions", "NodeVolumeLimits"})


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod as an attempt read it: its record, its claims (allocated or not, as read),
    the keys of those that are its PodGroup's (reserved for the group, not the pod), and
    the claim-statuses annotation its pin records (None: nothing to record)."""

    key: str
    info: PodInfo
    claims: Sequence[ResourceClaimBody] = ()
    #: The pod as read (None in `draco simulate` for claims without a pod).
    pod: PodBody | None = None
    group_claims: frozenset[str] = frozenset()
    #: The PodGroup's reservation, for its claims (None: reserved for the pod).
    group: ReferenceBody | None = None
    statuses: Mapping[str, str | None] | None = None
    #: The pod gets a node even without claims: one that names draco as its scheduler
    #: (draco binds it), a member of a group placed whole; any other pod without claims
    #: is kube-scheduler's to place (the plan only removes its gate).
    needs_node: bool = False

    @property
    def allocated(self) -> list[ResourceClaimBody]:
        return [c for c in self.claims if (c.get("status") or {}).get("allocation")]

    @property
    def pending(self) -> list[ResourceClaimBody]:
        return [c for c in self.claims if not (c.get("status") or {}).get("allocation")]


@dataclass(frozen=True, slots=True)
class ClaimStep:
    """One claim of a plan: the body it was decided on (its resourceVersion is the
    write's precondition), the allocation to write (None: it is allocated already, the
    step only reserves it) and whether it is reserved for the pod's PodGroup."""

    key: str
    claim: ResourceClaimBody
    allocation: AllocationResultBody | None = None
    for_group: bool = False


@dataclass(frozen=True, slots=True)
class PodPlan:
    """Place the pod on ``node``: its claims written (allocation and reservation, in
    :attr:`claims`' order), then the pod pinned there and un-gated (or bound, for a pod
    that names draco), recording ``statuses``. ``node`` None: nothing to allocate, the
    gate only comes off (kube-scheduler places the pod). ``placed``: the pod's record on
    its node, counted there from the decision on."""

    key: str
    node: str | None
    request: PodRequest
    claims: tuple[ClaimStep, ...] = ()

    @property
    def pod(self) -> PodBody | None:
        return self.request.pod

    @property
    def placed(self) -> PodInfo:
        return replace(self.request.info, node=self.node)

    @property
    def allocations(self) -> dict[str, AllocationResultBody]:
        """Claim key -> the allocation the plan writes (what the operator holds)."""
        return {step.key: step.allocation for step in self.claims if step.allocation is not None}


@dataclass(frozen=True, slots=True)
class Unplaced:
    """Why the pod is not placed now: ``reason`` is its FailedScheduling Event (within the
    Event's limit) and ``whole`` the same unabridged (empty for a wait that is no refusal:
    a claim in use by as many consumers as it may have, an input the allocator refuses).
    ``deallocate``: an allocated claim of the pod on devices or a node that are gone (it is
    deallocated and the pod tried again at once); ``idle``: the pending claims, whose idle
    finalizer comes off while the pod waits."""

    key: str
    reason: str
    whole: str = ""
    result: Literal["unschedulable", "waiting"] = "unschedulable"
    interest: Interest = UNKNOWN
    deallocate: ResourceClaimBody | None = None
    idle: tuple[ResourceClaimBody, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class _Reach:
    """Where kube-scheduler's sampling starts for the next pod."""

    start: int

    def advanced(self, examined: int, count: int) -> _Reach:
        return _Reach((self.start + examined) % count) if count else self


def plan_pod(
    request: PodRequest,
    *,
    cluster: ClusterState,
    names: Sequence[str],
    reasons: Sequence[str],
    inventory: Inventory,
    allocator_nodes: AllocatorNodes,
    policy: PlacementPolicy = "scheduler",
    start: int = 0,
    budget: SearchBudget | None = None,
    within: frozenset[str] | None = None,
    only: str | None = None,
    limit: int = EVENT_MESSAGE_LIMIT,
) -> tuple[PodPlan | Unplaced, int]:
    """The plan for ``request`` (see the module docstring), and where the next pod's
    sampling starts. ``names``: the nodes the node-only rules admit, ``reasons``: why
    the others fail (`profile.node_unfit`, cached per kind of pod by the operator);
    ``within``: only those nodes are considered (a group's domain); ``only``: the one node
    asked about (``draco simulate --node``: the message counts it alone and explains what
    its devices lack); ``limit``: the Event's.

    Raises what the search raises: ``AllocationInterruptedError`` when ``budget``
    interrupts it (nothing is decided; the caller may start over where it has more
    time), ``AllocationTimeoutError`` when its step budget runs out,
    ``AllocationInputError`` for claims it cannot take."""
    if not request.claims and not request.needs_node:
        return PodPlan(request.key, None, request), start
    if within is not None:
        names = [n for n in names if n in within]
    reach = _Reach(start)
    pending = request.pending
    if not pending:
        found = _candidates(request, cluster, names, reasons, inventory, policy, reach.start)
        reach = reach.advanced(found.examined, len(found.names))
        if found.names:
            return PodPlan(request.key, found.names[0], request, _steps(request, {})), reach.start
        interest = _rules_interest(found.refused_by, Interest(node_resources=True))
        total = 1 if only is not None else None
        return _refused(
            request, cluster, inventory, found, interest=interest, total=total, limit=limit
        ), reach.start
    choice = choose(
        pod=request.info,
        cluster=cluster,
        names=names,
        allocated=request.allocated,
        pending=pending,
        inventory=inventory,
        allocator_nodes=allocator_nodes,
        policy=policy,
        start=reach.start,
        budget=budget,
    )
    reach = reach.advanced(choice.examined, choice.count)
    outcome = choice.outcome
    if isinstance(outcome, Placement):
        chosen = cast(dict[str, AllocationResultBody], outcome.results.json())
        return PodPlan(request.key, outcome.node, request, _steps(request, chosen)), reach.start
    found = _candidates(request, cluster, names, reasons, inventory, policy, reach.start)
    reach = reach.advanced(found.examined, len(found.names))
    interest = _rules_interest(
        found.refused_by, interest_of(inventory, pending, node_resources=RESOURCES_RULE in found.refused_by)
    )
    explanation = outcome.explanation
    if only is not None and only in outcome.per_node:
        explanation = outcome.per_node[only].explanation
    unplaced = _refused(
        request,
        cluster,
        inventory,
        found,
        interest=interest,
        device_unfit_nodes=len(outcome.per_node),
        explanation=explanation,
        total=1 if only is not None else None,
        limit=limit,
    )
    return unplaced, reach.start


def _steps(request: PodRequest, chosen: Mapping[str, AllocationResultBody]) -> tuple[ClaimStep, ...]:
    """Every claim of the pod, in key order, with the allocation chosen for it."""
    steps = [
        ClaimStep(key_of(claim), claim, chosen.get(key_of(claim)), key_of(claim) in request.group_claims)
        for claim in request.claims
    ]
    return tuple(sorted(steps, key=lambda step: step.key))


def crowded(request: PodRequest) -> Unplaced | None:
    """An allocated claim already has as many consumers as it may have: the pod waits
    (before anything is searched)."""
    for claim in request.allocated:
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if (
            not (request.pod is not None and is_reserved_for(claim, request.pod))
            and len(reserved) >= RESERVED_FOR_MAX_SIZE
        ):
            return Unplaced(
                request.key,
                f"ResourceClaim {key_of(claim)} is already in use by {len(reserved)} consumers, "
                f"the most it may have ({RESERVED_FOR_MAX_SIZE}); the pod waits until one leaves",
                result="waiting",
                interest=CLAIMS_ONLY,
            )
    return None


def _candidates(
    request: PodRequest,
    cluster: ClusterState,
    names: Sequence[str],
    reasons: Sequence[str],
    inventory: Inventory,
    policy: PlacementPolicy,
    start: int,
) -> Candidates:
    return candidates(
        pod=request.info,
        cluster=cluster,
        names=names,
        reasons=reasons,
        allocated=request.allocated,
        allocated_on_node=inventory.allocated_on_node,
        policy=policy,
        start=start,
    )


def _refused(
    request: PodRequest,
    cluster: ClusterState,
    inventory: Inventory,
    found: Candidates,
    *,
    interest: Interest,
    device_unfit_nodes: int = 0,
    explanation: str = "",
    total: int | None = None,
    limit: int,
) -> Unplaced:
    """No node fits: kube-scheduler's words for it (the Event keeps what fits in
    ``limit``; ``whole`` has all of it), and an allocated claim of the pod held only by it
    whose node or devices are gone, to deallocate (upstream's PostFilter)."""
    message, whole = (
        unschedulable_message(
            total=len(cluster.node_names()) if total is None else total,
            node_reasons=found.reasons,
            device_unfit_nodes=device_unfit_nodes,
            explanation=explanation,
            limit=bound,
        )
        for bound in (limit, WHOLE)
    )
    uid = request.info.uid
    gone = next(
        (
            claim
            for claim in request.allocated
            if _unavailable(claim, cluster, inventory)
            and all(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or [])
        ),
        None,
    )
    return Unplaced(
        request.key,
        message,
        whole,
        interest=interest,
        deallocate=gone,
        idle=tuple(request.pending),
    )


def _unavailable(claim: ResourceClaimBody, cluster: ClusterState, inventory: Inventory) -> bool:
    """The claim's allocation names a node selector no node matches, or a device gone."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    selector = allocation.get("nodeSelector")
    if selector is not None and not any(
        node_selector_matches(selector, name=name, labels=info.labels)
        for name in cluster.node_names()
        if (info := cluster.node(name)) is not None
    ):
        return True
    return any(
        (r.get("driver", ""), r.get("pool", ""), r.get("device", "")) not in inventory.by_key
        for r in (allocation.get("devices") or {}).get("results") or []
    )


def _rules_interest(refused_by: frozenset[str], interest: Interest) -> Interest:
    """``interest``, also woken by pods placed or storage changing when those rules
    refused some node (a PreFilter refusal may be either)."""
    pods = bool(refused_by & _POD_RULES) or REFUSED in refused_by
    volumes = bool(refused_by & _VOLUME_RULES) or REFUSED in refused_by
    if not (pods or volumes):
        return interest
    return replace(interest, pods=interest.pods or pods, volumes=interest.volumes or volumes)
