"""Allocating the claims of one pod on one node: all of them or none.

The entry point the operator and the simulator call for a given node. A pod whose
requests the first free devices fill is answered at once (:mod:`quick`, the search's own
first solution); otherwise it prepares the plans (classes, selectors, candidates),
refutes hopeless nodes with cheap bounds and runs the search within its step budget.
The solution becomes allocation results.
Pure: no I/O, no clock; the same inventory and claims give the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from draco.allocator.bounds import refute
from draco.allocator.inventory import Inventory, as_dict
from draco.allocator.outcome import Allocated, AllocationResults, Node, Reason, SearchBudget, Unfit
from draco.allocator.plans import Slot, build_slots
from draco.allocator.quick import quick_fit
from draco.allocator.results import Pick, RequestChoice, build_allocation
from draco.allocator.search import (
    RESULTS_MAX,
    Constraint,
    Search,
    SearchExhausted,
    SearchInterrupted,
    applies,
    build_constraints,
)
from draco.api.bodies import key_of
from draco.errors import AllocationInputError, AllocationInterruptedError, AllocationTimeoutError

__all__ = ["allocate", "allocate_counted", "explain_unfit"]

_DEFAULT_BUDGET = SearchBudget()


def _pool_reasons(inventory: Inventory, node: Node) -> list[Reason]:
    reasons: list[Reason] = []
    for pool, reachable, state, why in inventory.node_view(node).unusable:
        if state == "incomplete":
            message = (
                f"resource pool {pool.describe()} is incomplete ({why}); its {reachable} device(s) for this "
                "node are not used until the driver has published all slices"
            )
        else:
            message = f"resource pool {pool.describe()} is invalid ({why}); its {reachable} device(s) for this node are not used"
        reasons.append(Reason(kind=f"{state}-pool", message=message))
    return reasons


def explain_unfit(node: str, keys: Sequence[str], reasons: Sequence[Reason]) -> str:
    """The human explanation of an :class:`Unfit`: one line per reason."""
    noun = "claim" if len(keys) == 1 else "claims"
    lines = [f"{noun} {', '.join(keys)} cannot be allocated on node {node}:"]
    lines.extend(f"- {reason.message}" for reason in reasons)
    return "\n".join(lines)


def _search_reasons(search: Search, slots: list[Slot], keys: list[str]) -> list[Reason]:
    stats = search.stats
    reasons: list[Reason] = []
    for constraint in stats.constraints:
        if constraint.rejections:
            reasons.append(
                Reason(
                    kind="constraint",
                    claim=constraint.claim,
                    message=(
                        f"constraint #{constraint.index} ({constraint.kind} {constraint.attribute}) of claim "
                        f"{constraint.claim} rejected {constraint.rejections} candidate device(s)"
                    ),
                )
            )
    if stats.counters:
        reasons.append(
            Reason(
                kind="counters",
                message=f"shared counters of partitionable devices ran out {stats.counters} time(s)",
            )
        )
    if stats.capacity:
        names = ", ".join(sorted(stats.capacity_names))
        reasons.append(
            Reason(kind="capacity", message=f"consumable capacity ({names}) ran out {stats.capacity} time(s)")
        )
    if stats.result_limit:
        reasons.append(
            Reason(
                kind="result-limit",
                message=f"some choices would exceed the limit of {RESULTS_MAX} devices per claim",
            )
        )
    availability = "; ".join(
        f"{plan.claim} request {plan.request}: {len(plan.candidates)} candidate(s) for {plan.need}"
        for slot in slots
        for plan in slot.alternatives
    )
    noun = "claim" if len(keys) == 1 else "claims"
    reasons.append(
        Reason(
            kind="no-combination",
            message=(
                f"no combination of the candidate devices satisfies every request and constraint of {noun} "
                f"{', '.join(keys)} together ({availability})"
            ),
        )
    )
    return reasons


def _check_limits(slots: list[Slot], keys: list[str]) -> None:
    minimum = [0] * len(keys)
    for slot in slots:
        alternatives = slot.alternatives
        minimum[slot.claim_index] += (
            alternatives[0].need if len(alternatives) == 1 else min(plan.need for plan in alternatives)
        )
    for key, count in zip(keys, minimum, strict=True):
        if count > RESULTS_MAX:
            raise AllocationInputError(
                f"claim {key}: number of requested devices {count} exceeds the claim limit of {RESULTS_MAX}"
            )


def allocate(
    *,
    inventory: Inventory,
    node: Node,
    claims: Sequence[Any],
    budget: SearchBudget | None = None,
) -> Allocated | Unfit:
    """Allocate every claim of ``claims`` on ``node`` together, or say why they do not fit.

    Raises :class:`AllocationInputError` for inputs no node can fix (unknown class, CEL
    error, more than 32 results, ``All`` over a pool being updated...) and
    :class:`AllocationTimeoutError` when the search budget runs out.
    """
    datas: list[Mapping[str, Any]] = [as_dict(claim) for claim in claims]
    limits = budget or _DEFAULT_BUDGET
    outcome, _ = allocate_counted(
        inventory=inventory, node=node, datas=datas, max_steps=limits.max_steps, interrupt=limits.interrupt
    )
    return outcome


def allocate_counted(
    *,
    inventory: Inventory,
    node: Node,
    datas: Sequence[Mapping[str, Any]],
    max_steps: int,
    interrupt: Callable[[], bool] | None = None,
) -> tuple[Allocated | Unfit, int]:
    """:func:`allocate` on claims in JSON shape, also returning the search steps spent.

    ``interrupt`` (polled during the search) raises :class:`AllocationInterruptedError`."""
    keys = [key_of(data) for data in datas]
    view = inventory.node_view(node)
    quick = quick_fit(inventory, view, datas, max_steps=max_steps)
    if quick is not None:
        fits, steps = quick
        return _allocated(node, datas, keys, [(fit.requests, fit.chosen) for fit in fits]), steps
    slots = build_slots(inventory, view, list(datas), keys)
    _check_limits(slots, keys)
    constraints: list[list[Constraint]] = [
        build_constraints(data, key) for data, key in zip(datas, keys, strict=True)
    ]
    for slot in slots:
        for plan in slot.alternatives:
            plan.constraints = [c for c in constraints[plan.claim_index] if applies(c, plan)]
    # An ``All`` request that breaks a claim constraint is an input error, found only by
    # searching: the cheap proofs of "does not fit" must not pre-empt it.
    all_constrained = any(plan.all_mode and plan.constraints for slot in slots for plan in slot.alternatives)
    reasons = [] if all_constrained else refute(slots, constraints, inventory.devices)
    if reasons:
        reasons.extend(_pool_reasons(inventory, node))
        return Unfit(
            node=node.name, reasons=tuple(reasons), explanation=explain_unfit(node.name, keys, reasons)
        ), 0
    search = Search(
        inventory=inventory,
        slots=slots,
        constraints=constraints,
        claim_count=len(datas),
        max_steps=max_steps,
        interrupt=interrupt,
    )
    try:
        found = search.run()
    except SearchInterrupted:
        raise AllocationInterruptedError(
            f"the search on node {node.name} for claims {', '.join(keys)} was interrupted by the caller"
        ) from None
    except SearchExhausted:
        raise AllocationTimeoutError(
            f"search budget of {max_steps} steps exhausted on node {node.name} for claims {', '.join(keys)} "
            "before the search was decided; simplify the constraints or raise the budget"
        ) from None
    if not found:
        reasons = _search_reasons(search, slots, keys)
        reasons.extend(_pool_reasons(inventory, node))
        return Unfit(
            node=node.name, reasons=tuple(reasons), explanation=explain_unfit(node.name, keys, reasons)
        ), search.stats.steps
    per_claim = [
        (
            [
                (slot.name, slot.chosen)
                for slot in slots
                if slot.claim_index == index and slot.chosen is not None
            ],
            search.results[index],
        )
        for index in range(len(datas))
    ]
    return _allocated(node, datas, keys, per_claim), search.stats.steps


def _allocated(
    node: Node,
    datas: Sequence[Mapping[str, Any]],
    keys: list[str],
    per_claim: Sequence[tuple[Sequence[tuple[str, RequestChoice]], Sequence[Pick]]],
) -> Allocated:
    """The answer: each claim's allocation from its requests (each with the (sub)request
    allocated for it) and its devices."""
    results: dict[str, dict[str, Any]] = {}
    for data, key, (requests, chosen) in zip(datas, keys, per_claim, strict=True):
        results[key] = build_allocation(
            claim=data, claim_key=key, requests=requests, chosen=chosen, node=node.name
        )
    return Allocated(node=node.name, results=AllocationResults(results))
