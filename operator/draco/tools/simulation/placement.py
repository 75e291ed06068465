"""One unit's decision in ``draco simulate``: the operator's decision, from the same code.

For a pod, as the operator's allocation does for a gated pod: its needs and placement
record (`draco.scheduling.nodefit`, `draco.scheduling.podinfo`); the nodes whose name,
labels and taints admit it (``static_unfit_reason``); then `draco.scheduling.plan.choose`
with the policy and kube-scheduler's sampling start carried from unit to unit
(:class:`~draco.scheduling.nodeorder.NodeOrder`). When nothing fits,
`draco.scheduling.plan.candidates` says why each node is refused and the message is the
operator's FailedScheduling Event (`nodefit.unschedulable_message`), whole. A unit of
claims without a pod is placed as a pod that asks for nothing else and tolerates every
taint (the pod that will use them is not known).

With ``--node`` only that node is considered; when its devices refuse the claims, the
explanation is the allocator's for that node (what each request lacks there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from draco.allocator import NoPlacement, Placement, SearchBudget
from draco.allocator.inventory import Inventory
from draco.allocator.outcome import DEFAULT_MAX_STEPS, DEFAULT_MAX_TOTAL_STEPS, Node
from draco.api import ResourceClaim
from draco.api.bodies import ResourceClaimBody, TolerationBody
from draco.errors import AllocationInputError, AllocationTimeoutError, DracoError
from draco.scheduling.cluster import Snapshot
from draco.scheduling.nodefit import unschedulable_message
from draco.scheduling.nodeorder import NodeOrder, PlacementPolicy
from draco.scheduling.plan import Choice, candidates, choose
from draco.scheduling.podinfo import PodInfo, PodInfoParser
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
]

EXIT_ALLOCATED: Final = 0
EXIT_UNFIT: Final = 1
EXIT_INVALID: Final = 2
EXIT_TIMEOUT: Final = 3

#: The tolerations of the pod that stands for claims without one: every taint.
_ANY_TAINT: Final[tuple[TolerationBody, ...]] = (cast(TolerationBody, {"operator": "Exists"}),)
#: The unschedulable message is printed whole (an Event keeps 1 KiB of it).
_WHOLE: Final = 1 << 20


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
    _parser: PodInfoParser = field(default_factory=PodInfoParser)
    _allocator_nodes: dict[str, Node] = field(default_factory=dict)

    def decide(self, unit: Unit) -> Answer:
        if unit.problem is not None:
            return Answer(EXIT_INVALID, f"{unit.label}: invalid: {unit.problem}")
        if not unit.claims and not unit.allocated:
            return Answer(EXIT_ALLOCATED, f"{unit.label}: nothing to allocate")
        pod = self._pod(unit)
        names, reasons = self._static_fit(pod)
        allocated = [claim_body(claim) for claim in unit.allocated]
        pending = [claim_body(claim) for claim in unit.claims]
        try:
            if not pending:
                return self._place_without_claims(unit, pod, names, reasons, allocated)
            choice = self.choose(pod, names, allocated, pending)
        except AllocationTimeoutError as exc:
            return Answer(EXIT_TIMEOUT, f"{unit.label}: search budget exhausted: {exc}")
        except (AllocationInputError, DracoError) as exc:
            return Answer(EXIT_INVALID, f"{unit.label}: invalid: {exc}")
        self.order.advance(choice.examined, choice.count)
        outcome = choice.outcome
        if isinstance(outcome, Placement):
            keys = ", ".join(claim.key for claim in unit.claims)
            return Answer(
                EXIT_ALLOCATED,
                f"allocated {keys} on node {outcome.node}",
                claims=unit.claims,
                results=outcome.results,
                placed=self._placed(unit, pod, outcome.node),
            )
        return self._unfit(unit, pod, names, reasons, allocated, outcome)

    # --- the pod and its nodes (what a group's decision uses too, `gangs.py`) ------------------

    def pod_of(self, unit: Unit) -> PodInfo:
        return self._pod(unit)

    def static_fit(self, pod: PodInfo) -> tuple[list[str], list[str]]:
        return self._static_fit(pod)

    def message(self, reasons: Sequence[str], *, device_unfit_nodes: int = 0, explanation: str = "") -> str:
        return self._message(reasons, device_unfit_nodes=device_unfit_nodes, explanation=explanation)

    def choose(
        self,
        pod: PodInfo,
        names: list[str],
        allocated: Sequence[ResourceClaimBody],
        pending: Sequence[ResourceClaimBody],
    ) -> Choice:
        """The operator's decision over the simulated cluster, from the sampling start (the
        caller moves the start on)."""
        return choose(
            pod=pod,
            cluster=self.cluster,
            names=names,
            allocated=allocated,
            pending=pending,
            inventory=self.inventory,
            allocator_nodes=self._nodes,
            policy=self.policy,
            start=self.order.start,
            budget=SearchBudget(
                max_steps=self.max_steps, max_total_steps=max(self.max_steps, DEFAULT_MAX_TOTAL_STEPS)
            ),
        )

    @staticmethod
    def placed_at(pod: PodInfo, node: str) -> PodInfo:
        return dataclasses.replace(pod, node=node)

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

    @staticmethod
    def _placed(unit: Unit, pod: PodInfo, node: str) -> PodInfo | None:
        return dataclasses.replace(pod, node=node) if unit.pod is not None else None

    # --- outcomes ----------------------------------------------------------------------------

    def _candidates(
        self,
        pod: PodInfo,
        names: list[str],
        reasons: list[str],
        allocated: Sequence[ResourceClaimBody],
    ) -> tuple[list[str], list[str]]:
        """The nodes that admit the pod, best first, and why the others do not (the sampling
        start moves on, as the operator's does)."""
        found = candidates(
            pod=pod,
            cluster=self.cluster,
            names=names,
            reasons=reasons,
            allocated=allocated,
            allocated_on_node=self.inventory.allocated_on_node,
            policy=self.policy,
            start=self.order.start,
        )
        self.order.advance(found.examined, len(found.names))
        return found.names, found.reasons

    def _place_without_claims(
        self,
        unit: Unit,
        pod: PodInfo,
        names: list[str],
        reasons: list[str],
        allocated: Sequence[ResourceClaimBody],
    ) -> Answer:
        """Every claim of the pod is allocated: it goes to the best node that admits it."""
        admitted, why = self._candidates(pod, names, reasons, allocated)
        if not admitted:
            return Answer(EXIT_UNFIT, f"{unit.label}: does not fit:\n{self._message(why)}")
        return Answer(
            EXIT_ALLOCATED,
            f"{unit.label}: nothing to allocate (its claims are allocated); placed on node {admitted[0]}",
            placed=self._placed(unit, pod, admitted[0]),
        )

    def _unfit(
        self,
        unit: Unit,
        pod: PodInfo,
        names: list[str],
        reasons: list[str],
        allocated: Sequence[ResourceClaimBody],
        outcome: NoPlacement,
    ) -> Answer:
        _, why = self._candidates(pod, names, reasons, allocated)
        explanation = outcome.explanation
        if self.node is not None and self.node in outcome.per_node:
            explanation = outcome.per_node[self.node].explanation
        message = self._message(why, device_unfit_nodes=len(outcome.per_node), explanation=explanation)
        return Answer(EXIT_UNFIT, f"{unit.label}: does not fit:\n{message}")

    def _message(self, reasons: Sequence[str], *, device_unfit_nodes: int = 0, explanation: str = "") -> str:
        total = 1 if self.node is not None else len(self.cluster.node_names())
        return unschedulable_message(
            total=total,
            node_reasons=reasons,
            device_unfit_nodes=device_unfit_nodes,
            explanation=explanation,
            limit=_WHOLE,
        )


def claim_body(claim: ResourceClaim) -> ResourceClaimBody:
    return cast(ResourceClaimBody, claim.to_dict())
