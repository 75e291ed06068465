"""One unit's decision in ``draco simulate``: the operator's decision, from the same code.

For a pod, as the operator's allocation does for a gated pod: its placement record
(`draco.scheduling.podinfo`); the nodes whose name, labels and taints admit it
(`draco.scheduling.profile.node_unfit`); then its plan (`draco.scheduling.podplan.plan_pod`,
the operator's) with the policy and kube-scheduler's sampling start carried from unit to
unit (:class:`~draco.scheduling.nodeorder.NodeOrder`). When nothing fits, the plan says why
each node is refused, in the operator's FailedScheduling words, whole. A unit of claims
without a pod is placed as a pod that asks for nothing else and tolerates every taint (the
pod that will use them is not known).

With ``--node`` only that node is considered; when its devices refuse the claims, the
explanation is the allocator's for that node (what each request lacks there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from draco.allocator import SearchBudget
from draco.allocator.inventory import Inventory
from draco.allocator.outcome import DEFAULT_MAX_STEPS, DEFAULT_MAX_TOTAL_STEPS, Node
from draco.api import ResourceClaim
from draco.api.bodies import ResourceClaimBody, TolerationBody
from draco.api.corebodies import PodBody
from draco.errors import AllocationInputError, AllocationTimeoutError, DracoError
from draco.scheduling.cluster import Snapshot
from draco.scheduling.nodeorder import NodeOrder, PlacementPolicy
from draco.scheduling.podinfo import PodInfo, PodInfoParser
from draco.scheduling.podplan import WHOLE, PodPlan, PodRequest, Unplaced, plan_pod
from draco.scheduling.preemption import DisruptionBudget, HeldClaim, NoPreemption, preempt
from draco.scheduling.profile import node_unfit
from draco.tools.simulation.units import Unit

__all__ = [
    "EXIT_ALLOCATED",
    "EXIT_INVALID",
    "EXIT_TIMEOUT",
    "EXIT_UNFIT",
    "Answer",
    "Simulator",
    "claim_body",
    "held_claims",
]

EXIT_ALLOCATED: Final = 0
EXIT_UNFIT: Final = 1
EXIT_INVALID: Final = 2
EXIT_TIMEOUT: Final = 3

#: The tolerations of the pod that stands for claims without one: every taint.
_ANY_TAINT: Final[tuple[TolerationBody, ...]] = (cast(TolerationBody, {"operator": "Exists"}),)


@dataclass
class Answer:
    code: int
    message: str
    #: The claims allocated (without their allocation) and their results, by claim key.
    claims: list[ResourceClaim] = field(default_factory=list)
    results: Mapping[str, Any] = field(default_factory=dict)
    #: The pod as placed, to count for the units after it (None: no pod was placed).
    placed: PodInfo | None = None
    #: The claims and pods are counted already (a group's members are held as they are decided).
    counted: bool = False


@dataclass
class Simulator:
    """Decides unit after unit on ``cluster`` and ``inventory`` (the caller counts each
    answer in both before the next: :meth:`Snapshot.place`, ``Inventory.mark_allocated``)."""

    cluster: Snapshot
    inventory: Inventory
    policy: PlacementPolicy = "scheduler"
    #: ``--node``: the only node considered.
    node: str | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    #: kube-scheduler's ``nextStartNodeIndex``, carried from unit to unit.
    order: NodeOrder = field(default_factory=NodeOrder)
    #: The allocated claims with their consumers, and the PodDisruptionBudgets (preemption).
    held: Sequence[HeldClaim] = ()
    budgets: Sequence[DisruptionBudget] = ()
    _parser: PodInfoParser = field(default_factory=PodInfoParser)
    _allocator_nodes: dict[str, Node] = field(default_factory=dict)

    def decide(self, unit: Unit) -> Answer:
        if unit.problem is not None:
            return Answer(EXIT_INVALID, f"{unit.label}: invalid: {unit.problem}")
        if not unit.claims and not unit.allocated:
            return Answer(EXIT_ALLOCATED, f"{unit.label}: nothing to allocate")
        try:
            planned = self.plan(self.request(unit))
        except AllocationTimeoutError as exc:
            return Answer(EXIT_TIMEOUT, f"{unit.label}: search budget exhausted: {exc}")
        except (AllocationInputError, DracoError) as exc:
            return Answer(EXIT_INVALID, f"{unit.label}: invalid: {exc}")
        if isinstance(planned, Unplaced):
            return Answer(
                EXIT_UNFIT, f"{unit.label}: does not fit:\n{planned.reason}{self._preemption(unit)}"
            )
        placed = planned.placed if unit.pod is not None else None
        if not unit.claims:
            return Answer(
                EXIT_ALLOCATED,
                f"{unit.label}: nothing to allocate (its claims are allocated); placed on node {planned.node}",
                placed=placed,
            )
        keys = ", ".join(claim.key for claim in unit.claims)
        return Answer(
            EXIT_ALLOCATED,
            f"allocated {keys} on node {planned.node}",
            claims=unit.claims,
            results=planned.allocations,
            placed=placed,
        )

    def _preemption(self, unit: Unit) -> str:
        """What the operator would preempt for a pod that fits nowhere (nothing for claims
        without a pod, or a pod with nobody of lower priority where it may go)."""
        if unit.pod is None:
            return ""
        request = self.request(unit)
        names, _ = self._static_fit(request.info)
        priority = request.info.priority
        if not request.info.never_preempts and not any(
            pod.priority < priority for name in names for pod in self.cluster.pods_on(name)
        ):
            return ""
        answer = preempt(
            request,
            cluster=self.cluster,
            names=names,
            inventory=self.inventory,
            claims=self.held,
            allocator_nodes=self._nodes,
            budgets=self.budgets,
        )
        if isinstance(answer, NoPreemption):
            return f"\npreemption: {answer.reason}"
        lines = [f"\nwould preempt {len(answer.victims)} pod(s) on node {answer.node}:"]
        lines += [f"  {victim.key}: {victim.why}" for victim in answer.victims]
        return "\n".join(lines)

    # --- what a group's decision uses too (`gangs.py`) ---------------------------------------

    def request(self, unit: Unit) -> PodRequest:
        """The unit as the operator's plan takes a pod (given a node even without claims)."""
        # The unit's claims are allocated (again, for one given with an allocation).
        claims = [claim_body(c) for c in unit.allocated] + [_unallocated(claim_body(c)) for c in unit.claims]
        return PodRequest(
            key=unit.label.removeprefix("pod "),
            info=self._pod(unit),
            claims=claims,
            pod=cast(PodBody, unit.pod) if unit.pod is not None else None,
            needs_node=True,
        )

    def plan(self, request: PodRequest, *, within: frozenset[str] | None = None) -> PodPlan | Unplaced:
        """The operator's plan over the simulated cluster; the sampling start moves on."""
        names, reasons = self._static_fit(request.info)
        planned, self.order.start = plan_pod(
            request,
            cluster=self.cluster,
            names=names,
            reasons=reasons,
            inventory=self.inventory,
            allocator_nodes=self._nodes,
            policy=self.policy,
            start=self.order.start,
            budget=SearchBudget(
                max_steps=self.max_steps, max_total_steps=max(self.max_steps, DEFAULT_MAX_TOTAL_STEPS)
            ),
            within=within,
            only=self.node,
            limit=WHOLE,
        )
        return planned

    def _pod(self, unit: Unit) -> PodInfo:
        if unit.pod is None:
            claims = [*unit.claims, *unit.allocated]
            namespace = claims[0].metadata.namespace or "default"
            return PodInfo(uid="", namespace=namespace, name="", tolerations=_ANY_TAINT)
        return self._parser.parse(unit.pod)

    def _static_fit(self, pod: PodInfo) -> tuple[list[str], list[str]]:
        """The nodes (by name) whose name, labels and taints admit the pod, and why the
        others do not."""
        names: list[str] = []
        reasons: list[str] = []
        for name in [self.node] if self.node is not None else sorted(self.cluster.node_names()):
            info = self.cluster.node(name)
            reason = "node(s) not found" if info is None else node_unfit(pod, info)
            if reason is None:
                names.append(name)
            else:
                reasons.append(reason)
        return names, reasons

    def _nodes(self, names: Sequence[str]) -> list[Node]:
        """The allocator's records of ``names`` (made once each: its caches key on them)."""
        found = []
        for name in names:
            node = self._allocator_nodes.get(name)
            if node is None:
                info = self.cluster.node(name)
                node = self._allocator_nodes[name] = Node(name, info.labels if info is not None else {})
            found.append(node)
        return found


def _unallocated(claim: ResourceClaimBody) -> ResourceClaimBody:
    status = {k: v for k, v in (claim.get("status") or {}).items() if k != "allocation"}
    return cast(ResourceClaimBody, {**claim, "status": status})


def claim_body(claim: ResourceClaim) -> ResourceClaimBody:
    return cast(ResourceClaimBody, claim.to_dict())


def held_claims(claims: Sequence[ResourceClaim]) -> list[HeldClaim]:
    """The allocated ``claims`` with the UIDs of their consumers (what preemption frees)."""
    found = []
    for claim in claims:
        body = claim_body(claim)
        reserved = (body.get("status") or {}).get("reservedFor") or []
        found.append(HeldClaim(claim.key, body, frozenset(str(r.get("uid", "")) for r in reserved)))
    return found
