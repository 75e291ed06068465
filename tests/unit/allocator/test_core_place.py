"""Node choice and the allocated state it reads: policies, indexes, mark/release."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draco.allocator import Allocated, Inventory, Node, NoPlacement, Placement, Unfit, allocate, place
from draco.api import ResourceClaim

from .kit import allocated, claim, dev, device_class, req, res, slice_

CLASSES = [device_class("gpu")]


def _cluster(per_node: dict[str, int]) -> list[dict[str, object]]:
    return [
        slice_(node=node, devices=[dev(f"gpu-{i}") for i in range(count)]) for node, count in per_node.items()
    ]


def _nodes(*names: str) -> list[Node]:
    return [Node(name) for name in names]


def test_first_policy_takes_the_first_feasible_node_by_name() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=_cluster({"b": 2, "a": 1, "c": 4}))
    outcome = place(
        inventory=inventory, nodes=_nodes("c", "b", "a"), claims=[claim("x", req("gpu", count=2))]
    )
    assert isinstance(outcome, Placement)
    assert outcome.node == "b"
    selector = outcome.results["default/x"].node_selector
    assert selector is not None and selector.node_selector_terms[0].match_fields[0].values == ["b"]


@pytest.mark.parametrize(("policy", "expected"), [("pack", "b"), ("spread", "c"), ("first", "a")])
def test_pack_and_spread_follow_allocated_devices(policy: str, expected: str) -> None:
    inventory = Inventory.build(
        classes=CLASSES,
        slices=_cluster({"a": 4, "b": 4, "c": 4}),
        allocated_claims=[
            allocated("a1", res("gpu", "gpu-0", pool="a"), node="a"),
            allocated("b1", res("gpu", "gpu-0", pool="b"), node="b"),
            allocated("b2", res("gpu", "gpu-1", pool="b"), node="b"),
        ],
    )
    outcome = place(
        inventory=inventory, nodes=_nodes("a", "b", "c"), claims=[claim("x", req("gpu"))], policy=policy
    )  # type: ignore[arg-type]
    assert isinstance(outcome, Placement)
    assert outcome.node == expected


def test_unknown_policy_is_rejected() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=_cluster({"a": 1}))
    with pytest.raises(ValueError, match="unknown placement policy"):
        place(inventory=inventory, nodes=_nodes("a"), claims=[claim("x", req("gpu"))], policy="best")  # type: ignore[arg-type]


def test_placing_one_pod_at_a_time_fills_nodes_in_order() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=_cluster({"a": 2, "b": 2}))
    nodes = _nodes("a", "b")
    placed = []
    for i in range(4):
        data = claim(f"c{i}", req("gpu"))
        outcome = place(inventory=inventory, nodes=nodes, claims=[data])
        assert isinstance(outcome, Placement)
        data["status"] = {"allocation": outcome.results[f"default/c{i}"].to_dict()}
        inventory.mark_allocated(data)
        placed.append((outcome.node, outcome.results[f"default/c{i}"].devices.results[0].device))
    assert placed == [("a", "gpu-0"), ("a", "gpu-1"), ("b", "gpu-0"), ("b", "gpu-1")]
    outcome = place(inventory=inventory, nodes=nodes, claims=[claim("c4", req("gpu"))])
    assert isinstance(outcome, NoPlacement)
    assert set(outcome.per_node) == {"a", "b"}
    assert "2 node(s): claim default/c4, request gpu needs 1 device(s)" in outcome.explanation
    assert "4 devices: 4 in use; 0 left" in outcome.explanation
    inventory.release(claim("c1", req("gpu")))
    outcome = place(inventory=inventory, nodes=nodes, claims=[claim("c4", req("gpu"))])
    assert isinstance(outcome, Placement) and outcome.node == "a"


def test_mark_allocated_is_idempotent_and_ignores_admin_access() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=_cluster({"node-1": 1}))
    used = allocated("used", res("gpu", "gpu-0"))
    inventory.mark_allocated(used)
    inventory.mark_allocated(used)
    inventory.release(used)
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("x", req("gpu"))])
    assert isinstance(outcome, Allocated)
    inventory.mark_allocated(allocated("admin", res("gpu", "gpu-0", adminAccess=True)))
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("x", req("gpu"))])
    assert isinstance(outcome, Allocated)


def test_shared_capacity_is_aggregated_across_claims() -> None:
    device = dev("gpu-0", multi=True, capacity={"memory": "40Gi"})
    inventory = Inventory.build(classes=CLASSES, slices=[slice_(devices=[device])])
    share = res(
        "gpu", "gpu-0", shareID="00000000-0000-4000-8000-000000000001", consumedCapacity={"memory": "30Gi"}
    )
    inventory.mark_allocated(allocated("big", share))
    wanted = [claim("x", req("gpu", capacity={"memory": "20Gi"}))]
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=wanted)
    assert isinstance(outcome, Unfit)
    assert "without enough memory left" in outcome.explanation
    inventory.release(allocated("big", share))
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=wanted)
    assert isinstance(outcome, Allocated)
    result = outcome.results["default/x"].devices.results[0]
    assert str(result.consumed_capacity["memory"]) == "20Gi"


def test_models_and_dicts_give_the_same_answer() -> None:
    inventory = Inventory.build(classes=CLASSES, slices=_cluster({"node-1": 2}))
    data = claim("x", req("gpu", count=2))
    from_dict = allocate(inventory=inventory, node=Node("node-1"), claims=[data])
    from_model = allocate(inventory=inventory, node=Node("node-1"), claims=[ResourceClaim.from_dict(data)])
    assert isinstance(from_dict, Allocated) and isinstance(from_model, Allocated)
    assert from_dict.results["default/x"].to_dict() == from_model.results["default/x"].to_dict()


def test_older_pool_generations_are_ignored() -> None:
    slices = [
        slice_("old", generation=1, devices=[dev("gpu-old")]),
        slice_("new", generation=2, devices=[dev("gpu-new")]),
    ]
    inventory = Inventory.build(classes=CLASSES, slices=slices)
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("x", req("gpu"))])
    assert isinstance(outcome, Allocated)
    assert outcome.results["default/x"].devices.results[0].device == "gpu-new"


def test_labels_decide_node_selector_slices() -> None:
    selector = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    }
    slices = [slice_(node=None, pool="net", node_selector=selector, devices=[dev("gpu-0")])]
    inventory = Inventory.build(classes=CLASSES, slices=slices)
    outcome = place(
        inventory=inventory,
        nodes=[Node("n1", {"zone": "b"}), Node("n2", {"zone": "a"})],
        claims=[claim("x", req("gpu"))],
    )
    assert isinstance(outcome, Placement)
    assert outcome.node == "n2"
    assert outcome.results["default/x"].node_selector.to_dict() == selector


@st.composite
def _clusters(draw: st.DrawFn) -> tuple[list[dict[str, object]], list[tuple[str, int, bool]]]:
    slices = []
    for n in range(draw(st.integers(1, 5))):
        count = draw(st.integers(0, 3))
        models = [draw(st.sampled_from(["a", "b"])) for _ in range(count)]
        slices.append(
            slice_(node=f"n{n}", devices=[dev(f"gpu-{i}", attrs={"model": m}) for i, m in enumerate(models)])
        )
    if draw(st.booleans()):
        slices.append(
            slice_(node=None, pool="shared", all_nodes=True, devices=[dev("gpu-s", attrs={"model": "a"})])
        )
    # A script of pods: (model wanted or "", count, release an earlier pod first?)
    steps = draw(
        st.lists(
            st.tuples(st.sampled_from(["", "a", "b"]), st.integers(1, 2), st.booleans()),
            min_size=1,
            max_size=8,
        )
    )
    return slices, steps


@settings(max_examples=150, deadline=None)
@given(_clusters(), st.sampled_from(["first", "pack", "spread"]))
def test_node_choice_matches_trying_every_node_in_order(
    cluster: tuple[list[dict[str, object]], list[tuple[str, int, bool]]], policy: str
) -> None:
    slices, steps = cluster
    inventory = Inventory.build(classes=CLASSES, slices=slices)
    nodes = [Node(f"n{n}") for n in range(len(slices))]
    placed: list[dict[str, object]] = []
    for i, (model, count, release) in enumerate(steps):
        if release and placed:
            inventory.release(placed.pop(0))
        selectors = [f'device.attributes["gpu.example.com"].model == "{model}"'] if model else []
        data = claim(f"p{i}", req("gpu", count=count, selectors=selectors))
        outcome = place(inventory=inventory, nodes=nodes, claims=[data], policy=policy)  # type: ignore[arg-type]
        if policy == "first":
            order = sorted(nodes, key=lambda n: n.name)
        else:
            sign = -1 if policy == "pack" else 1
            order = sorted(nodes, key=lambda n: (sign * inventory.allocated_on_node(n.name), n.name))
        expected = None
        for node in order:
            attempt = allocate(inventory=inventory, node=node, claims=[data])
            if isinstance(attempt, Allocated):
                expected = attempt
                break
        if expected is None:
            assert isinstance(outcome, NoPlacement)
            continue
        assert isinstance(outcome, Placement)
        assert outcome.node == expected.node
        assert outcome.results[f"default/p{i}"].to_dict() == expected.results[f"default/p{i}"].to_dict()
        data["status"] = {"allocation": outcome.results[f"default/p{i}"].to_dict()}
        inventory.mark_allocated(data)
        placed.append(data)


def test_an_interrupt_only_turns_the_answer_into_an_interruption() -> None:
    from draco.allocator import SearchBudget
    from draco.errors import AllocationInterruptedError

    inventory = Inventory.build(
        classes=[device_class("gpu")],
        slices=[slice_(node=f"node-{n}", count=2) for n in range(3)],
    )
    nodes = [Node(f"node-{n}") for n in range(3)]
    claims = [claim("c", req("gpu", count=2))]
    plain = place(inventory=inventory, nodes=nodes, claims=claims)
    polled: list[int] = []

    def never() -> bool:
        polled.append(1)
        return False

    assert (
        place(inventory=inventory, nodes=nodes, claims=claims, budget=SearchBudget(interrupt=never)) == plain
    )
    assert polled
    with pytest.raises(AllocationInterruptedError):
        place(inventory=inventory, nodes=nodes, claims=claims, budget=SearchBudget(interrupt=lambda: True))
