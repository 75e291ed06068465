"""Cheap necessary conditions, checked before searching: proofs that a node cannot fit.

The search is exhaustive, so a node that cannot fit would cost the whole search tree to
refute. These checks refute the common cases in linear time and, better, say why in
terms a user can act on:

- a request has fewer candidates than it needs (the explanation funnel says where the
  devices went);
- requests that can only use the same devices need more of them together than exist;
- ``matchAttribute``: no single value is held by enough candidates of every covered
  request (grouping candidates by value);
- ``distinctAttribute``: fewer distinct values exist than devices are needed.

Each check only looks at requests without ``firstAvailable`` for the constraint bounds:
dropping requests from a necessary condition keeps it necessary.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from draco.allocator.devices import DeviceRecord
from draco.allocator.outcome import Reason
from draco.allocator.plans import Plan, Slot
from draco.allocator.search import Constraint, MatchAttribute, applies

__all__ = ["refute"]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _plan_reason(plan: Plan) -> Reason | None:
    funnel = plan.funnel
    if plan.all_mode:
        if not plan.candidates:
            return Reason(
                kind="no-devices",
                claim=plan.claim,
                request=plan.request,
                funnel=funnel,
                message=(
                    f"claim {plan.claim}, request {plan.request} asks for all matching devices, "
                    f"but none match on this node ({funnel.describe()})"
                ),
            )
        if plan.all_blocked is not None:
            return Reason(
                kind="not-enough-devices",
                claim=plan.claim,
                request=plan.request,
                funnel=funnel,
                message=(
                    f"claim {plan.claim}, request {plan.request} asks for all "
                    f"{_count(plan.need, 'matching device')}, but {plan.all_blocked}"
                ),
            )
        return None
    if len(plan.candidates) >= plan.need:
        return None
    return Reason(
        kind="not-enough-devices",
        claim=plan.claim,
        request=plan.request,
        funnel=funnel,
        message=(
            f"claim {plan.claim}, request {plan.request} needs {_count(plan.need, 'device')} "
            f"of class {plan.class_name}, "
            f"{len(plan.candidates)} available: {funnel.describe()}"
        ),
    )


def _shared_pool_reasons(plans: list[Plan], devices: list[DeviceRecord]) -> list[Reason]:
    """Requests whose candidates all lie within one set need no more than the set holds."""
    exclusive = [
        p
        for p in plans
        if not p.admin and not p.all_mode and not any(devices[i].allow_multiple for i in p.candidates)
    ]
    reasons: list[Reason] = []
    seen: set[frozenset[int]] = set()
    for plan in exclusive:
        pool = frozenset(plan.candidates)
        if pool in seen:
            continue
        seen.add(pool)
        inside = [p for p in exclusive if pool.issuperset(p.candidates)]
        need = sum(p.need for p in inside)
        if len(inside) > 1 and need > len(pool):
            # At most three named, so an Event cut at 1 KiB still ends with the why.
            names = ", ".join(f"{p.claim} request {p.request}" for p in inside[:3])
            if len(inside) > 3:
                names = f"{len(inside)} requests ({names} and {len(inside) - 3} more)"
            reasons.append(
                Reason(
                    kind="not-enough-devices",
                    message=(
                        f"{names} can only use the same {_count(len(pool), 'device')} "
                        f"but need {need} together"
                    ),
                )
            )
    return reasons


def _constraint_reason(
    constraint: Constraint, plans: list[Plan], devices: list[DeviceRecord]
) -> Reason | None:
    # `All` requests are left to the search: a constraint they break is an input error there.
    covered = [p for p in plans if applies(constraint, p) and not p.all_mode]
    if not covered:
        return None
    attribute = constraint.attribute
    label = f"constraint #{constraint.index} ({constraint.kind} {attribute}) of claim {constraint.claim}"
    total = sum(p.need for p in covered)
    lacking = {i for p in covered for i in p.candidates if attribute not in devices[i].attrs}
    union_ok = all(not p.admin for p in covered) and not any(
        devices[i].allow_multiple for p in covered for i in p.candidates
    )
    if isinstance(constraint, MatchAttribute):
        holders: dict[tuple[str, Any], set[int]] = defaultdict(set)
        for plan in covered:
            for index in plan.candidates:
                value = devices[index].attrs.get(attribute)
                if value is not None:
                    for element in value[1]:
                        holders[(value[0], element)].add(index)
        best: tuple[int, tuple[str, Any] | None] = (0, None)
        for value, members in sorted(holders.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
            if union_ok and len(members) < total:
                best = max(best, (len(members), value), key=lambda b: b[0])
                continue
            if all(sum(1 for i in p.candidates if i in members) >= p.need for p in covered):
                return None
            best = max(best, (len(members), value), key=lambda b: b[0])
        detail = f"the requests need {_count(total, 'device')} with one common value"
        if best[1] is not None:
            detail += f"; the most common value, {best[1][1]!s}, is held by {best[0]}"
        else:
            detail += "; no candidate has the attribute"
        if lacking:
            detail += f"; {len(lacking)} of the candidates lack the attribute"
        return Reason(
            kind="constraint", claim=constraint.claim, message=f"{label} cannot be satisfied: {detail}"
        )
    values: set[tuple[str, Any]] = set()
    for plan in covered:
        for index in plan.candidates:
            value = devices[index].attrs.get(attribute)
            if value is not None:
                values.update((value[0], element) for element in value[1])
    if len(values) >= total:
        return None
    detail = f"the requests need {_count(total, 'device')} with different values, only {len(values)} distinct values exist"
    if lacking:
        detail += f"; {len(lacking)} of the candidates lack the attribute"
    return Reason(kind="constraint", claim=constraint.claim, message=f"{label} cannot be satisfied: {detail}")


def refute(
    slots: list[Slot], constraints: list[list[Constraint]], devices: list[DeviceRecord]
) -> list[Reason]:
    """Reasons that prove the slots cannot all be satisfied on this node (empty: no proof)."""
    reasons: list[Reason] = []
    for slot in slots:
        failures = [_plan_reason(plan) for plan in slot.alternatives]
        if all(failure is not None for failure in failures):
            reasons.extend(failure for failure in failures if failure is not None)
    if reasons:
        return reasons
    fixed = [slot.alternatives[0] for slot in slots if not slot.first_available]
    reasons.extend(_shared_pool_reasons(fixed, devices))
    for claim_index, per_claim in enumerate(constraints):
        plans = [p for p in fixed if p.claim_index == claim_index]
        for constraint in per_claim:
            reason = _constraint_reason(constraint, plans, devices)
            if reason is not None:
                reasons.append(reason)
    return reasons
