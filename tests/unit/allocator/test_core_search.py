"""The search core: budget, pruning of interchangeable devices, determinism, limits."""

from __future__ import annotations

import itertools
import re

import pytest

from draco.allocator import Allocated, Inventory, Node, SearchBudget, Unfit, allocate
from draco.allocator.bounds import refute
from draco.allocator.plans import build_slots
from draco.allocator.quick import quick_fit
from draco.allocator.search import Search, applies, build_constraints
from draco.errors import AllocationInputError, AllocationTimeoutError

from .kit import GPU, claim, dev, device_class, distinct, first, match, req, slice_, sub

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
CLASSES = [device_class("gpu")]


def _devices(result: Allocated, key: str) -> list[str]:
    return [r.device for r in result.results[key].devices.results]


def test_budget_exhaustion_is_a_timeout_not_unfit() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=[dev(f"gpu-{i}") for i in range(8)])])
    wanted = [claim("c", req("gpu", count=4))]
    with pytest.raises(AllocationTimeoutError, match="search budget of 2 steps exhausted on node node-1"):
        allocate(inventory=inventory, node=Node("node-1"), claims=wanted, budget=SearchBudget(max_steps=2))
    outcome = allocate(
        inventory=inventory, node=Node("node-1"), claims=wanted, budget=SearchBudget(max_steps=4)
    )
    assert isinstance(outcome, Allocated)


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SearchBudget(max_steps=0)


def _search(inventory: Inventory, claims: list[dict[str, object]]) -> Search:
    keys = [f"default/{c['metadata']['name']}" for c in claims]  # type: ignore[index]
    view = inventory.node_view(Node("node-1"))
    slots = build_slots(inventory, view, claims, keys)
    constraints = [build_constraints(c, k) for c, k in zip(claims, keys, strict=True)]
    for slot in slots:
        for plan in slot.alternatives:
            plan.constraints = [c for c in constraints[plan.claim_index] if applies(c, plan)]
    assert refute(slots, constraints, inventory.devices) == []
    return Search(
        inventory=inventory, slots=slots, constraints=constraints, claim_count=len(claims), max_steps=10**6
    )


def test_interchangeable_devices_are_tried_once_per_level() -> None:
    # 4 values x 6 devices; the request needs 5 of one value and distinct slots, but every
    # value has only 4 distinct slots (8 overall): the bounds cannot see it, the search must.
    devices = [
        dev(f"gpu-{v}-{i}", attrs={"numa": v, "slot": (v + i % 4) % 8}) for v in range(4) for i in range(6)
    ]
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=devices)])
    wanted = [claim("c", req("gpu", count=5), constraints=[match(f"{GPU}/numa"), distinct(f"{GPU}/slot")])]
    search = _search(inventory, wanted)
    assert search.run() is False
    assert search.stats.twins_skipped > 0
    # Without twins the tree has C(24, k) shaped branches; with them it stays tiny.
    assert search.stats.steps < 2_000


def test_twin_pruning_keeps_the_first_solution_in_device_order() -> None:
    # Brute force over combinations in device order gives upstream's first solution.
    devices = [dev(f"gpu-{i}", attrs={"numa": i % 3, "slot": i % 2}) for i in range(9)]
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=devices)])
    wanted = claim("c", req("gpu", count=3), constraints=[match(f"{GPU}/numa")])
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[wanted])
    assert isinstance(outcome, Allocated)
    expected = next(
        combo for combo in itertools.combinations(range(9), 3) if len({i % 3 for i in combo}) == 1
    )
    assert _devices(outcome, "default/c") == [f"gpu-{i}" for i in expected]


def test_same_inputs_same_answer_and_stable_share_ids() -> None:
    devices = [dev("gpu-0", multi=True, capacity={"memory": "80Gi"})]
    wanted = [
        claim("a", req("gpu", capacity={"memory": "10Gi"})),
        claim("b", req("gpu", capacity={"memory": "10Gi"})),
    ]
    answers = []
    for _ in range(2):
        inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=devices)])
        outcome = allocate(inventory=inventory, node=Node("node-1"), claims=wanted)
        assert isinstance(outcome, Allocated)
        answers.append({k: v.to_dict() for k, v in outcome.results.items()})
    assert answers[0] == answers[1]
    first_id = answers[0]["default/a"]["devices"]["results"][0]["shareID"]
    second_id = answers[0]["default/b"]["devices"]["results"][0]["shareID"]
    assert UUID.match(first_id) and UUID.match(second_id)
    assert first_id != second_id


def test_more_than_32_devices_is_an_input_error() -> None:
    inventory = Inventory.build(
        classes=CLASSES, slices=[slice_(devices=[dev(f"gpu-{i}") for i in range(40)])]
    )
    with pytest.raises(
        AllocationInputError, match="number of requested devices 33 exceeds the claim limit of 32"
    ):
        allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu", count=33))])


def test_first_available_falls_back_when_the_result_limit_is_hit() -> None:
    inventory = Inventory.build(
        classes=CLASSES, slices=[slice_(devices=[dev(f"gpu-{i}") for i in range(40)])]
    )
    wanted = claim("c", req("a", count=30), first("b", sub("big", count=4), sub("small", count=2)))
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[wanted])
    assert isinstance(outcome, Allocated)
    requests = [r.request for r in outcome.results["default/c"].devices.results]
    assert requests.count("b/small") == 2 and "b/big" not in requests


def test_unknown_class_is_an_input_error() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=[dev("gpu-0")])])
    with pytest.raises(AllocationInputError, match="device class tpu does not exist"):
        allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("x", "tpu"))])


def test_cel_runtime_error_is_fatal_but_not_on_devices_in_use() -> None:
    classes = [device_class("gpu", selectors=['device.attributes["gpu.example.com"].missing == 1'])]
    inventory = Inventory.build(classes=classes, slices=[slice_(devices=[dev("gpu-0")])])
    with pytest.raises(
        AllocationInputError, match=r"class gpu: selector #1 on device gpu.example.com/node-1/gpu-0"
    ):
        allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu"))])
    from .kit import allocated, res

    inventory.mark_allocated(allocated("used", res("gpu", "gpu-0")))
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu"))])
    assert isinstance(outcome, Unfit)
    assert "1 in use" in outcome.explanation


def test_all_mode_with_an_incomplete_pool_is_an_input_error() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(count=2, devices=[dev("gpu-0")])])
    with pytest.raises(
        AllocationInputError, match=r"asks for all devices, but resource pool .* is currently being updated"
    ):
        allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu", all=True))])


def test_node_choice_has_a_total_budget_over_nodes() -> None:
    from draco.allocator import NoPlacement, place

    # Every node needs a real search to refute: numa values share their slots.
    slices = [
        slice_(
            node=f"node-{n}",
            devices=[dev(f"gpu-{i}", attrs={"numa": i // 2, "slot": i // 2}) for i in range(6)],
        )
        for n in range(4)
    ]
    inventory = Inventory.build(classes=CLASSES, slices=slices)
    wanted = [claim("c", req("gpu", count=2), constraints=[match(f"{GPU}/numa"), distinct(f"{GPU}/slot")])]
    nodes = [Node(f"node-{n}") for n in range(4)]
    outcome = place(inventory=inventory, nodes=nodes, claims=wanted)
    assert isinstance(outcome, NoPlacement)
    with pytest.raises(AllocationTimeoutError, match="steps over all nodes exhausted"):
        place(inventory=inventory, nodes=nodes, claims=wanted, budget=SearchBudget(max_total_steps=20))


def _quick_fit(inventory: Inventory, claims: list[dict[str, object]]) -> object:
    found = quick_fit(inventory, inventory.node_view(Node("node-1")), claims, max_steps=10**6)
    if found is None:
        return None
    fits, steps = found
    return [[pick.device.name for pick in fit.chosen] for fit in fits], steps


def test_quick_fit_skips_what_an_earlier_request_took() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=[dev(f"gpu-{i}") for i in range(4)])])
    wanted = [claim("a", req("two", count=2), req("one")), claim("b", req("one"))]
    # gpu-0 and gpu-1 are tried again by the later requests: one step each, as the search counts.
    assert _quick_fit(inventory, wanted) == ([["gpu-0", "gpu-1", "gpu-2"], ["gpu-3"]], 9)
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=wanted)
    assert isinstance(outcome, Allocated)
    assert _devices(outcome, "default/a") == ["gpu-0", "gpu-1", "gpu-2"]
    assert _devices(outcome, "default/b") == ["gpu-3"]


def test_quick_fit_leaves_a_choice_that_needs_revisiting_to_the_search() -> None:
    # "any" takes gpu-0 first, which "zero" alone can use: only backtracking finds the answer.
    devices = [dev("gpu-0", attrs={"index": 0}), dev("gpu-1", attrs={"index": 1})]
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=devices)])
    zero = f'device.attributes["{GPU}"].index == 0'
    wanted = [claim("c", req("any"), req("zero", selectors=[zero]))]
    assert _quick_fit(inventory, wanted) is None
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=wanted)
    assert isinstance(outcome, Allocated)
    assert _devices(outcome, "default/c") == ["gpu-1", "gpu-0"]


@pytest.mark.parametrize(
    ("devices", "wanted"),
    [
        ([dev("gpu-0")], claim("c", req("gpu", count=1, admin=True))),
        ([dev("gpu-0")], claim("c", req("gpu", all=True))),
        ([dev("gpu-0")], claim("c", first("gpu", sub("s0")))),
        ([dev("gpu-0", capacity={"mem": "2"})], claim("c", req("gpu", capacity={"mem": "1"}))),
        ([dev("gpu-0", attrs={"numa": 0})], claim("c", req("gpu"), constraints=[match("numa")])),
        ([dev("gpu-0")], claim("c", req("gpu", cls="missing"))),
        ([dev("gpu-0")], claim("c", req("gpu", selectors=[f'device.attributes["{GPU}"].nothing == 1']))),
        ([dev("gpu-0", multi=True)], claim("c", req("gpu"))),
        ([dev("gpu-0")], claim("c", req("gpu", count=2))),
    ],
    ids=[
        "admin access",
        "all",
        "first available",
        "capacity",
        "constraint",
        "unknown class",
        "selector error",
        "shared device",
        "too few devices",
    ],
)
def test_quick_fit_leaves_the_rest_to_the_planner_and_the_search(
    devices: list[dict[str, object]], wanted: dict[str, object]
) -> None:
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=devices)])
    assert _quick_fit(inventory, [wanted]) is None


def test_allocation_results_build_a_model_only_when_one_is_asked_for() -> None:
    from draco.allocator import AllocationResults
    from draco.api import AllocationResult

    shape = {"devices": {"results": [{"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-0"}]}}
    results = AllocationResults({"default/c": shape})
    assert "default/c" in results and "default/d" not in results
    assert list(results) == ["default/c"] and len(results) == 1
    assert results._models == {}  # membership, iteration and length build nothing
    assert results.json() == {"default/c": shape}
    model = results["default/c"]
    assert isinstance(model, AllocationResult) and model.devices.results[0].device == "gpu-0"
    assert results["default/c"] is model
