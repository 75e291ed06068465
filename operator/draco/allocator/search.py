"""The backtracking search over candidate devices, first solution wins.

It visits devices in upstream's order (claims, requests in spec order, devices in
pool/slice/device order, combinations not permutations, ``firstAvailable`` alternatives
in order) and therefore finds upstream's first solution, but it does not explore what
cannot matter:

- interchangeable devices (same eligibility for every plan of the call, same values of
  every constrained attribute, no counters, not shared) are tried once per search level:
  if one of them failed there, its twins fail too (swap them in any solution); not when
  an ``All`` request has constraints, where the order of errors tells twins apart;
- a level stops when fewer candidates remain than devices are still needed;
- the 32-results limit cuts the branch as soon as the chosen alternatives exceed it.

Every candidate tried is one step of a deterministic budget; running out raises
:class:`SearchExhausted`, which the caller reports as a timeout, never as "does not fit".
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from draco.allocator.devices import AttrSet, DeviceRecord
from draco.allocator.inventory import Inventory
from draco.allocator.outcome import INTERRUPT_POLL_STEPS
from draco.allocator.plans import Plan, Slot
from draco.api.quantity import Quantity
from draco.errors import AllocationInputError

__all__ = [
    "RESULTS_MAX",
    "Chosen",
    "DistinctAttribute",
    "MatchAttribute",
    "Search",
    "SearchExhausted",
    "SearchInterrupted",
    "build_constraints",
]

RESULTS_MAX = 32


class SearchExhausted(Exception):
    """The step budget ran out before the search was decided."""


class SearchInterrupted(Exception):
    """The caller's interrupt asked the search to stop."""


class MatchAttribute:
    """All devices of the covered requests share a value (set intersection for lists)."""

    kind = "matchAttribute"
    __slots__ = ("attribute", "claim", "index", "rejections", "requests", "stack")

    def __init__(self, *, claim: str, index: int, attribute: str, requests: frozenset[str]) -> None:
        self.claim, self.index, self.attribute, self.requests = claim, index, attribute, requests
        self.stack: list[AttrSet] = []
        self.rejections = 0

    def add(self, device: DeviceRecord) -> bool:
        value = device.attrs.get(self.attribute)
        if value is None:
            return False
        if self.stack:
            tag, values = self.stack[-1]
            if value[0] != tag:
                return False
            common = values & value[1]
            if not common:
                return False
            self.stack.append((tag, common))
        else:
            self.stack.append(value)
        return True

    def remove(self) -> None:
        self.stack.pop()


class DistinctAttribute:
    """Devices of the covered requests have pairwise different (disjoint) values."""

    kind = "distinctAttribute"
    __slots__ = ("attribute", "claim", "held", "index", "rejections", "requests")

    def __init__(self, *, claim: str, index: int, attribute: str, requests: frozenset[str]) -> None:
        self.claim, self.index, self.attribute, self.requests = claim, index, attribute, requests
        self.held: list[AttrSet] = []
        self.rejections = 0

    def add(self, device: DeviceRecord) -> bool:
        value = device.attrs.get(self.attribute)
        if value is None:
            return False
        tag, values = value
        for held_tag, held_values in self.held:
            if held_tag == tag and not held_values.isdisjoint(values):
                return False
        self.held.append(value)
        return True

    def remove(self) -> None:
        self.held.pop()


Constraint = MatchAttribute | DistinctAttribute


def build_constraints(claim: Mapping[str, Any], key: str) -> list[Constraint]:
    """The claim's constraints, in spec order; an empty constraint is an input error."""
    constraints: list[Constraint] = []
    for index, spec in enumerate(((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []):
        requests = frozenset(spec.get("requests") or ())
        if spec.get("matchAttribute"):
            constraints.append(
                MatchAttribute(claim=key, index=index, attribute=spec["matchAttribute"], requests=requests)
            )
        elif spec.get("distinctAttribute"):
            constraints.append(
                DistinctAttribute(
                    claim=key, index=index, attribute=spec["distinctAttribute"], requests=requests
                )
            )
        else:
            raise AllocationInputError(
                f"claim {key}, constraint #{index}: empty constraint (unsupported constraint type?)"
            )
    return constraints


def applies(constraint: Constraint, plan: Plan) -> bool:
    if not constraint.requests:
        return True
    return plan.base in constraint.requests or (plan.sub is not None and plan.request in constraint.requests)


@dataclass(slots=True)
class Chosen:
    """One device picked for one plan, with what it consumes when shared."""

    plan: Plan
    device: DeviceRecord
    consumed: dict[str, Quantity] | None


@dataclass
class SearchStats:
    steps: int = 0
    in_use_by_pod: int = 0
    counters: int = 0
    capacity: int = 0
    #: The consumable capacities that ran out.
    capacity_names: set[str] = field(default_factory=set)
    result_limit: int = 0
    #: Candidates cut because an interchangeable twin already failed at the same level.
    twins_skipped: int = 0
    constraints: list[Constraint] = field(default_factory=list)


class Search:
    """One search over prepared slots on one node; :meth:`run` returns whether it found one."""

    def __init__(
        self,
        *,
        inventory: Inventory,
        slots: list[Slot],
        constraints: list[list[Constraint]],
        claim_count: int,
        max_steps: int,
        interrupt: Callable[[], bool] | None = None,
    ) -> None:
        self.inventory = inventory
        self.interrupt = interrupt
        self.devices = inventory.devices
        self.slots = slots
        self.constraints = constraints
        self.max_steps = max_steps
        self.results: list[list[Chosen]] = [[] for _ in range(claim_count)]
        self.taken: dict[int, int] = {}  # device -> bitmask of claims holding it exclusively
        self.shared_use: dict[int, dict[str, int]] = {}
        self.shares: dict[int, int] = {}
        self.counters_used: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
        self.counters_left: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
        self.stats = SearchStats(constraints=[c for per_claim in constraints for c in per_claim])
        self.signatures = self._signatures()
        self.value_offsets = self._value_offsets()

    def _value_offsets(self) -> dict[int, list[tuple[MatchAttribute, dict[tuple[str, Any], list[int]]]]]:
        """Per plan and matchAttribute constraint: candidate offsets by attribute value."""
        result: dict[int, list[tuple[MatchAttribute, dict[tuple[str, Any], list[int]]]]] = {}
        for slot in self.slots:
            for plan in slot.alternatives:
                groups = []
                for constraint in plan.constraints:
                    if not isinstance(constraint, MatchAttribute):
                        continue
                    by_value: dict[tuple[str, Any], list[int]] = {}
                    for offset, index in enumerate(plan.candidates):
                        value = self.devices[index].attrs.get(constraint.attribute)
                        if value is not None:
                            for element in value[1]:
                                by_value.setdefault((value[0], element), []).append(offset)
                    groups.append((constraint, by_value))
                if groups:
                    result[id(plan)] = groups
        return result

    def _signatures(self) -> dict[int, Any]:
        """Equivalence keys: devices with equal keys are interchangeable in this search."""
        masks: dict[int, int] = {}
        bit = 1
        for slot in self.slots:
            for plan in slot.alternatives:
                plan.bit = bit
                for index in plan.candidates:
                    masks[index] = masks.get(index, 0) | bit
                bit <<= 1
        attributes = sorted({c.attribute for per_claim in self.constraints for c in per_claim})
        signatures: dict[int, Any] = {}
        # An ``All`` request under a constraint meets its devices in a fixed order, and
        # whether it fails quietly (a device taken) or with an error (a constraint broken)
        # depends on which twin an earlier request took: no twins then.
        if any(plan.all_mode and plan.constraints for slot in self.slots for plan in slot.alternatives):
            return dict.fromkeys(masks)
        for index, mask in masks.items():
            device = self.devices[index]
            if device.consumes or device.allow_multiple:
                signatures[index] = None
            elif attributes:
                signatures[index] = (mask, tuple(device.attrs.get(a) for a in attributes))
            else:
                signatures[index] = mask
        return signatures

    def run(self) -> bool:
        return self._slot(0)

    # --- the recursion -------------------------------------------------------------------

    def _slot(self, position: int) -> bool:
        if position == len(self.slots):
            return True
        slot = self.slots[position]
        held = len(self.results[slot.claim_index])
        for plan in slot.alternatives:
            if held + plan.need > RESULTS_MAX:
                self.stats.result_limit += 1
                continue
            if plan.all_mode:
                if not plan.candidates:
                    continue
                # A blocked ``All`` fails whatever else is chosen; with constraints the
                # search still walks it, since a constraint broken before the blocked
                # device is an input error (as upstream).
                if plan.all_blocked is not None and not plan.constraints:
                    continue
                found = self._all(plan, 0, position)
            else:
                found = self._pick(plan, 0, 0, position)
            if found:
                slot.chosen = plan
                return True
        return False

    def _all(self, plan: Plan, k: int, position: int) -> bool:
        if k == plan.need:
            return self._slot(position + 1)
        device = self.devices[plan.candidates[k]]
        self._step()
        if not self._add(plan, device, must=True):
            return False
        if self._all(plan, k + 1, position):
            return True
        self._remove(plan, device)
        return False

    def _pick(self, plan: Plan, k: int, start: int, position: int) -> bool:
        if k == plan.need:
            return self._slot(position + 1)
        candidates = plan.candidates
        narrowed = self._narrowed(plan, start)
        offsets: Sequence[int]
        if narrowed is None:
            offsets = range(start, len(candidates) - (plan.need - k) + 1)
        elif len(narrowed) < plan.need - k:
            return False  # fewer devices with the fixed value remain than still needed
        else:
            offsets = narrowed[: len(narrowed) - (plan.need - k) + 1]
        failed: set[Any] = set()
        signatures = self.signatures
        devices = self.devices
        for offset in offsets:
            index = candidates[offset]
            signature = signatures[index]
            if signature is not None and signature in failed:
                self.stats.twins_skipped += 1
                continue
            self._step()
            device = devices[index]
            if not self._add(plan, device, must=False):
                continue
            if self._pick(plan, k + 1, offset + 1, position):
                return True
            self._remove(plan, device)
            if signature is not None:
                failed.add(signature)
        return False

    def _narrowed(self, plan: Plan, start: int) -> list[int] | None:
        """Candidate offsets (from ``start``) holding the one value a fixed matchAttribute
        constraint still allows; ``None`` when no constraint narrows the plan that way."""
        groups = self.value_offsets.get(id(plan))
        if not groups:
            return None
        for constraint, by_value in groups:
            if not constraint.stack:
                continue
            tag, values = constraint.stack[-1]
            if len(values) != 1:
                continue
            (value,) = values
            offsets = by_value.get((tag, value), [])
            return offsets[bisect_left(offsets, start) :]
        return None

    def _step(self) -> None:
        self.stats.steps += 1
        if self.stats.steps > self.max_steps:
            raise SearchExhausted
        if self.interrupt is not None and not self.stats.steps % INTERRUPT_POLL_STEPS and self.interrupt():
            raise SearchInterrupted

    # --- adding and removing one device ---------------------------------------------------

    def _add(self, plan: Plan, device: DeviceRecord, *, must: bool) -> bool:
        """Take ``device`` for ``plan`` if it can be taken now; ``must`` (``All``) makes a
        broken claim constraint an input error. The checks run in upstream's order (in
        use, counters, taints, constraints, capacity), which decides whether ``All``
        fails quietly or with that error."""
        index = device.index
        claim_bit = 1 << plan.claim_index
        shared = device.allow_multiple
        if not shared:
            holders = self.taken.get(index, 0)
            if plan.admin:
                if holders & claim_bit:
                    self.stats.in_use_by_pod += 1
                    return False
            elif holders:
                self.stats.in_use_by_pod += 1
                return False
        if plan.blocked and index in plan.blocked:
            return False  # ``All``: in use by allocated claims, or tainted
        # Counters are charged once per device: not again for a further share of a device
        # that allocated claims or this search already share.
        charge_counters = bool(device.consumes) and not (
            shared and (self.shares.get(index) or self.inventory.shared_in_use(device))
        )
        if charge_counters and not self._charge(device):
            self.stats.counters += 1
            return False
        added: list[Constraint] = []
        for constraint in plan.constraints:
            if constraint.add(device):
                added.append(constraint)
                continue
            for done in reversed(added):
                done.remove()
            if charge_counters:
                self._uncharge(device)
            constraint.rejections += 1
            if must:
                raise AllocationInputError(
                    f"claim {plan.claim}, request {plan.request}: cannot add device {device.describe()} because "
                    f"a claim constraint would not be satisfied ({constraint.kind} {constraint.attribute})"
                )
            return False
        consumed = plan.consumed.get(index) if shared else None
        lacking = self._lacking(plan, device, consumed)
        if lacking is not None:
            for done in reversed(added):
                done.remove()
            if charge_counters:
                self._uncharge(device)
            self.stats.capacity += 1
            self.stats.capacity_names.add(lacking)
            return False
        if not shared:
            self.taken[index] = self.taken.get(index, 0) | claim_bit
        else:
            self.shares[index] = self.shares.get(index, 0) + 1
            if consumed is not None:
                attempt = self.shared_use.setdefault(index, {})
                for name, amount in consumed.items():
                    attempt[name] = attempt.get(name, 0) + amount.nanos
        self.results[plan.claim_index].append(Chosen(plan=plan, device=device, consumed=consumed))
        return True

    def _lacking(self, plan: Plan, device: DeviceRecord, consumed: dict[str, Quantity] | None) -> str | None:
        """The capacity ``device`` lacks for ``plan`` now (``None``: none): of a shared
        device, what allocated shares and this search's leave too little of; of an
        exclusive one, for ``All``, what shares under its name hold (the planner leaves
        such devices out of ``ExactCount`` candidates)."""
        if consumed is None:
            return plan.short.get(device.index) if plan.short else None
        index = device.index
        in_use = self.inventory.shared_capacity(device) or {}
        attempt = self.shared_use.get(index, {})
        for name, amount in consumed.items():
            if in_use.get(name, 0) + attempt.get(name, 0) + amount.nanos > device.capacity[name].value.nanos:
                return name
        return None

    def _remove(self, plan: Plan, device: DeviceRecord) -> None:
        index = device.index
        chosen = self.results[plan.claim_index].pop()
        for constraint in reversed(plan.constraints):
            constraint.remove()
        if not device.allow_multiple:
            remaining = self.taken[index] & ~(1 << plan.claim_index)
            if remaining:
                self.taken[index] = remaining
            else:
                del self.taken[index]
            if device.consumes:
                self._uncharge(device)
            return
        shares = self.shares[index] - 1
        if shares:
            self.shares[index] = shares
        else:
            del self.shares[index]
        if chosen.consumed is not None:
            attempt = self.shared_use[index]
            for name, amount in chosen.consumed.items():
                attempt[name] -= amount.nanos
            if not shares:
                del self.shared_use[index]
        if device.consumes and not shares and not self.inventory.shared_in_use(device):
            self._uncharge(device)

    def _charge(self, device: DeviceRecord) -> bool:
        pool = (device.driver, device.pool)
        left = self.counters_left.get(pool)
        if left is None:
            left = self.inventory.counters_available(device)
            self.counters_left[pool] = left
        used = self.counters_used.setdefault(pool, {})
        for set_name, counters in device.consumes:
            for counter, amount in counters:
                key = (set_name, counter)
                if used.get(key, 0) + amount > left.get(key, 0):
                    return False
        for set_name, counters in device.consumes:
            for counter, amount in counters:
                key = (set_name, counter)
                used[key] = used.get(key, 0) + amount
        return True

    def _uncharge(self, device: DeviceRecord) -> None:
        used = self.counters_used[(device.driver, device.pool)]
        for set_name, counters in device.consumes:
            for counter, amount in counters:
                used[(set_name, counter)] -= amount
