"""The pruning is invisible: bounds, twin skipping and value narrowing never change the answer.

A plain backtracking search in upstream's order (no twins, no narrowing, no bounds) over
the same plans is the reference; on random inventories and claims the pruned search must
find the same first solution, or none when it finds none.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draco.allocator import Inventory, Node
from draco.allocator.bounds import refute
from draco.allocator.plans import Plan, build_slots
from draco.allocator.search import Search, applies, build_constraints
from draco.errors import AllocationInputError

from .kit import GPU, claim, counter_set, dev, device_class, distinct, match, req, slice_

CLASSES = [device_class("gpu")]
ATTRIBUTES = ("numa", "slot", "model")


class PlainSearch(Search):
    """The same search without twin skipping or value narrowing."""

    def _signatures(self) -> dict[int, Any]:
        for slot in self.slots:
            for plan in slot.alternatives:
                plan.bit = 0
        return {i: None for slot in self.slots for plan in slot.alternatives for i in plan.candidates}

    def _narrowed(self, plan: Plan, start: int) -> list[int] | None:
        return None


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    count = draw(st.integers(2, 9))
    counters = draw(st.booleans())
    devices = []
    for i in range(count):
        attrs: dict[str, Any] = {
            "numa": draw(st.integers(0, 2)),
            "slot": draw(st.integers(0, 3)),
            "model": draw(st.sampled_from(["a", "b"])),
        }
        if draw(st.integers(0, 5)) == 0:
            del attrs[draw(st.sampled_from(ATTRIBUTES))]
        multi = draw(st.integers(0, 4)) == 0
        devices.append(
            dev(
                f"gpu-{i}",
                attrs=attrs,
                multi=True if multi else None,
                capacity={"mem": "4"} if multi else None,
                consumes={"cs": {"mem": str(draw(st.integers(1, 3)))}}
                if counters and draw(st.booleans())
                else None,
            )
        )
    if counters:
        slices = [
            slice_(
                "a-counters",
                count=2,
                shared_counters=[counter_set("cs", {"mem": str(draw(st.integers(2, 6)))})],
            ),
            slice_("b-devices", count=2, devices=devices),
        ]
    else:
        slices = [slice_(devices=devices)]
    claims = []
    for c in range(draw(st.integers(1, 2))):
        requests = []
        for r in range(draw(st.integers(1, 2))):
            selectors = []
            if draw(st.booleans()):
                model = draw(st.sampled_from(["a", "b"]))
                selectors.append(f'device.attributes["{GPU}"].?model.orValue("") == "{model}"')
            capacity = {"mem": str(draw(st.integers(1, 3)))} if draw(st.integers(0, 3)) == 0 else None
            requests.append(
                req(f"r{r}", count=draw(st.integers(1, 3)), selectors=selectors, capacity=capacity)
            )
        constraints = [
            (match if draw(st.booleans()) else distinct)(f"{GPU}/{draw(st.sampled_from(ATTRIBUTES))}")
            for _ in range(draw(st.integers(0, 2)))
        ]
        claims.append(claim(f"c{c}", *requests, constraints=constraints))
    return slices, claims


def _solve(inventory: Inventory, claims: list[dict[str, Any]], *, plain: bool) -> list[list[str]] | None:
    keys = [f"default/{c['metadata']['name']}" for c in claims]
    slots = build_slots(inventory, inventory.node_view(Node("node-1")), claims, keys)
    constraints = [build_constraints(c, k) for c, k in zip(claims, keys, strict=True)]
    for slot in slots:
        for plan in slot.alternatives:
            plan.constraints = [c for c in constraints[plan.claim_index] if applies(c, plan)]
    if not plain and refute(slots, constraints, inventory.devices):
        return None
    kind = PlainSearch if plain else Search
    search = kind(
        inventory=inventory, slots=slots, constraints=constraints, claim_count=len(claims), max_steps=10**7
    )
    if not search.run():
        return None
    return [[f"{c.plan.request}:{c.device.name}" for c in chosen] for chosen in search.results]


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_pruned_search_finds_the_plain_search_answer(
    scenario: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    slices, claims = scenario
    inventory = Inventory.build(classes=CLASSES, slices=slices)
    try:
        expected = _solve(inventory, claims, plain=True)
    except AllocationInputError:
        return
    assert _solve(inventory, claims, plain=False) == expected


def test_the_search_polls_the_interrupt_every_so_many_steps() -> None:
    import pytest

    from draco.allocator.outcome import INTERRUPT_POLL_STEPS
    from draco.allocator.search import SearchInterrupted

    inventory = Inventory.build(classes=CLASSES, slices=[slice_(node="node-1", count=2)])
    claims = [claim("c", req("gpu"))]
    keys = ["default/c"]
    slots = build_slots(inventory, inventory.node_view(Node("node-1")), claims, keys)
    polls: list[int] = []

    def interrupt() -> bool:
        polls.append(search.stats.steps)
        return True

    search = Search(
        inventory=inventory,
        slots=slots,
        constraints=[[]],
        claim_count=1,
        max_steps=10**7,
        interrupt=interrupt,
    )
    for _ in range(INTERRUPT_POLL_STEPS - 1):
        search._step()
    assert polls == []
    with pytest.raises(SearchInterrupted):
        search._step()
    assert polls == [INTERRUPT_POLL_STEPS]
