"""A gang's decision in ``draco simulate``: the operator's (`draco.scheduling.groups`).

Every member is decided as a pod is (`placement.Simulator`), its devices and its pod held
before the next member is decided; per topology domain, best fit first; enough members or
nothing. The answer says where each member goes, or how many fit, how many are needed and
why each of the others does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from draco.api.bodies import key_of
from draco.errors import AllocationInputError, AllocationTimeoutError, DracoError
from draco.scheduling.groups import (
    Domain,
    GroupRefusal,
    Member,
    attribute_domains,
    device_need,
    node_domains,
    place_group,
    refusal_message,
    restricted,
)
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.podplan import PodPlan, Unplaced
from draco.tools.simulation.placement import (
    EXIT_ALLOCATED,
    EXIT_INVALID,
    EXIT_UNFIT,
    Answer,
    Simulator,
    claim_body,
)
from draco.tools.simulation.units import GroupUnit, Unit

__all__ = ["decide_group"]


@dataclass
class _Holds:
    claims: list[str] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)


def decide_group(simulator: Simulator, gang: GroupUnit) -> Answer:
    """Place ``gang`` whole (its answer's claims and pods are counted already)."""
    policy = gang.policy
    if policy.problem is not None:
        return Answer(EXIT_UNFIT, f"{gang.label}: {policy.problem}")
    broken = [unit for unit in gang.members if unit.problem is not None]
    if broken:
        return Answer(EXIT_INVALID, f"{gang.label}: invalid: {broken[0].label}: {broken[0].problem}")
    needed = (policy.min_count or 0) - gang.placed
    units = {_key(unit): unit for unit in gang.members}
    if needed > len(units):
        return Answer(
            EXIT_UNFIT,
            f"{gang.label}: {len(units) + gang.placed} of {policy.min_count} pod(s) in the input; "
            f"no pod of the group is placed until {policy.min_count} can be placed together",
        )
    members = [
        Member(key, [claim_body(c) for c in unit.claims], [claim_body(c) for c in unit.allocated])
        for key, unit in units.items()
    ]
    holds = _Holds()
    try:
        outcome = place_group(
            members,
            needed=max(needed, 1),
            domains=_domains(simulator, gang, members),
            decide=lambda member, domain: _decide(simulator, units[member.key], member, domain),
            hold=lambda choice: _hold(simulator, units[choice.key], choice, holds),
            release=lambda: _release(simulator, holds),
        )
    except AllocationTimeoutError as exc:
        _release(simulator, holds)
        return Answer(3, f"{gang.label}: search budget exhausted: {exc}")
    except (AllocationInputError, DracoError) as exc:
        _release(simulator, holds)
        return Answer(EXIT_INVALID, f"{gang.label}: invalid: {exc}")
    if isinstance(outcome, GroupRefusal):
        lines = [refusal_message(gang.ref, outcome, placed_before=gang.placed, limit=1 << 20)]
        lines += [f"- {failure.key}: {failure.reason}" for failure in outcome.failures]
        return Answer(EXIT_UNFIT, f"{gang.label}: does not fit:\n" + "\n".join(lines))
    results: dict[str, Any] = {}
    claims = []
    for choice in outcome.chosen:
        for claim in units[choice.key].claims:
            if claim.key in choice.allocations:
                claims.append(claim)
                results[claim.key] = choice.allocations[claim.key]
    where = f" in {outcome.domain.label}" if outcome.domain is not None else ""
    placed = ", ".join(f"{c.key} on {c.node}" for c in outcome.chosen)
    message = f"{gang.label}: {len(outcome.chosen)} pod(s) placed together{where}: {placed}"
    if outcome.left:
        message += "; left waiting: " + ", ".join(f.key for f in outcome.left)
    return Answer(EXIT_ALLOCATED, message, claims=claims, results=results, counted=True)


def _key(unit: Unit) -> str:
    return unit.label.removeprefix("pod ")


def _domains(simulator: Simulator, gang: GroupUnit, members: Sequence[Member]) -> list[Domain] | None:
    unique = {key_of(c): c for m in members for c in m.pending}
    need = device_need(unique.values())
    inventory = simulator.inventory
    if gang.policy.topology_key is not None:
        free: dict[str, int] = {}
        for device in inventory.devices:
            if device.node_name is not None and not inventory.is_allocated(device):
                free[device.node_name] = free.get(device.node_name, 0) + 1
        labels = {
            name: info.labels
            for name in simulator.cluster.node_names()
            if (info := simulator.cluster.node(name))
        }
        return node_domains(gang.policy.topology_key, labels, lambda n: free.get(n, 0), need)
    attribute = gang.policy.device_attribute
    if attribute is not None:
        values = [
            (tag, next(iter(found)), not inventory.is_allocated(device))
            for device in inventory.devices
            if (attr := device.attrs.get(attribute)) is not None
            for tag, found in [attr]
            if len(found) == 1
        ]
        return attribute_domains(attribute, values, need)
    return None


def _decide(simulator: Simulator, unit: Unit, member: Member, domain: Domain | None) -> PodPlan | Unplaced:
    """One member, planned as a pod is (its claims earlier members allocated come as
    allocated), within the pass's domain."""
    pending = list(member.pending)
    if domain is not None and domain.selector is not None:
        pending = restricted(pending, domain.selector)
    request = dataclasses.replace(simulator.request(unit), claims=[*member.allocated, *pending])
    return simulator.plan(request, within=domain.nodes if domain is not None else None)


def _hold(simulator: Simulator, unit: Unit, choice: PodPlan, holds: _Holds) -> None:
    for key, allocation in choice.allocations.items():
        namespace, _, name = key.partition("/")
        simulator.inventory.mark_allocated(
            {"metadata": {"namespace": namespace, "name": name}, "status": {"allocation": allocation}}
        )
        holds.claims.append(key)
    if unit.pod is not None:
        placed = choice.placed
        simulator.cluster.place(placed)
        holds.pods.append(placed)


def _release(simulator: Simulator, holds: _Holds) -> None:
    for key in holds.claims:
        namespace, _, name = key.partition("/")
        simulator.inventory.release({"metadata": {"namespace": namespace, "name": name}})
    for pod in holds.pods:
        simulator.cluster.unplace(pod)
    holds.claims.clear()
    holds.pods.clear()
