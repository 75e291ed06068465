"""Explanations a user can act on: funnels, constraints, pools, summaries over nodes."""

from __future__ import annotations

from draco.allocator import Inventory, Node, NoPlacement, Unfit, allocate, place

from .kit import (
    GPU,
    allocated,
    claim,
    dev,
    device_class,
    distinct,
    match,
    req,
    res,
    slice_,
    taint,
    taint_rule,
)


def _inventory(**kwargs: object) -> Inventory:
    kwargs.setdefault("classes", [device_class("gpu", selectors=['device.attributes["gpu.example.com"].ok'])])
    return Inventory.build(**kwargs)  # type: ignore[arg-type]


def test_funnel_counts_each_step_once_in_order() -> None:
    devices = [dev(f"gpu-{i}", attrs={"ok": i >= 4}) for i in range(8)]
    inventory = _inventory(
        slices=[slice_(devices=devices)],
        allocated_claims=[allocated(f"used-{i}", res("gpu", f"gpu-{i}")) for i in (4, 5, 6)],
        taint_rules=[taint_rule("xid", taint("gpu.example.com/xid", "NoExecute", "79"), device="gpu-7")],
    )
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("want", req("gpu"))])
    assert isinstance(outcome, Unfit)
    funnel = outcome.reasons[0].funnel
    assert funnel is not None
    assert funnel.considered == 8
    assert [(s.reason, s.count) for s in funnel.steps] == [
        ("rejected by selector #1 of class gpu", 4),
        ("in use", 3),
        ("tainted gpu.example.com/xid=79:NoExecute", 1),
    ]
    assert funnel.available == 0
    assert (
        "8 devices on the node: 4 rejected by selector #1 of class gpu, 3 in use, "
        "1 tainted gpu.example.com/xid=79:NoExecute; 0 left" in outcome.explanation
    )
    assert "claim default/want, request gpu needs 1 device of class gpu, 0 available" in outcome.explanation


def test_tolerated_and_informational_taints_do_not_block() -> None:
    devices = [
        dev("gpu-0", attrs={"ok": True}, taints=[taint("a", "NoSchedule")]),
        dev("gpu-1", attrs={"ok": True}, taints=[taint("b", "None"), taint("c", "SomeFutureEffect")]),
    ]
    inventory = _inventory(slices=[slice_(devices=devices)])
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu"))])
    assert not isinstance(outcome, Unfit)
    assert outcome.results["default/c"].devices.results[0].device == "gpu-1"


def test_rule_without_selector_taints_nothing() -> None:
    inventory = _inventory(
        slices=[slice_(devices=[dev("gpu-0", attrs={"ok": True})])],
        taint_rules=[taint_rule("all", taint("k", "NoSchedule"), no_selector=True)],
    )
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu"))])
    assert not isinstance(outcome, Unfit)
    tainted = _inventory(
        slices=[slice_(devices=[dev("gpu-0", attrs={"ok": True})])],
        taint_rules=[taint_rule("all", taint("k", "NoSchedule"))],
    )
    outcome = allocate(inventory=tainted, node=Node("node-1"), claims=[claim("c", req("gpu"))])
    assert isinstance(outcome, Unfit)
    assert "1 tainted k:NoSchedule" in outcome.explanation


def test_incomplete_pool_is_named() -> None:
    inventory = _inventory(slices=[slice_(count=2, devices=[dev("gpu-0", attrs={"ok": True})])])
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu"))])
    assert isinstance(outcome, Unfit)
    kinds = [r.kind for r in outcome.reasons]
    assert "incomplete-pool" in kinds
    assert f"resource pool {GPU}/node-1 is incomplete (1 of 2 slices at generation 0)" in outcome.explanation


def test_invalid_pool_is_named() -> None:
    devices = [dev("gpu-0", attrs={"ok": True}), dev("gpu-0", attrs={"ok": True})]
    inventory = _inventory(slices=[slice_(devices=devices)])
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu"))])
    assert isinstance(outcome, Unfit)
    assert "is invalid (device name gpu-0 is used more than once)" in outcome.explanation


def test_match_attribute_bound_names_the_best_value() -> None:
    devices = [dev(f"gpu-{i}", attrs={"ok": True, "numa": i % 8}) for i in range(64)]
    inventory = _inventory(slices=[slice_(devices=devices)])
    wanted = claim("nine", req("gpu", count=9), constraints=[match(f"{GPU}/numa")])
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[wanted])
    assert isinstance(outcome, Unfit)
    assert outcome.reasons[0].kind == "constraint"
    assert "constraint #0 (matchAttribute gpu.example.com/numa) of claim default/nine" in outcome.explanation
    assert "need 9 devices with one common value" in outcome.explanation
    assert "is held by 8" in outcome.explanation


def test_distinct_attribute_bound_counts_values() -> None:
    devices = [dev(f"gpu-{i}", attrs={"ok": True, "numa": i % 2}) for i in range(6)]
    inventory = _inventory(slices=[slice_(devices=devices)])
    wanted = claim("three", req("gpu", count=3), constraints=[distinct(f"{GPU}/numa")])
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[wanted])
    assert isinstance(outcome, Unfit)
    assert "only 2 distinct values exist" in outcome.explanation


def test_requests_competing_for_the_same_devices() -> None:
    inventory = _inventory(slices=[slice_(devices=[dev(f"gpu-{i}", attrs={"ok": True}) for i in range(3)])])
    claims = [claim("a", req("gpu", count=2)), claim("b", req("gpu", count=2))]
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=claims)
    assert isinstance(outcome, Unfit)
    assert "can only use the same 3 devices but need 4 together" in outcome.explanation


def test_search_failure_reports_the_rejecting_constraint() -> None:
    # Every bound holds (each numa value has an "a" and a "b" device, two slots exist),
    # but the devices sharing a numa value also share their slot.
    devices = [
        dev(f"gpu-{i}", attrs={"ok": True, "kind": "ab"[i % 2], "numa": i // 2, "slot": i // 2})
        for i in range(4)
    ]
    inventory = _inventory(slices=[slice_(devices=devices)])
    wanted = claim(
        "pair",
        req("x", selectors=['device.attributes["gpu.example.com"].kind == "a"']),
        req("y", selectors=['device.attributes["gpu.example.com"].kind == "b"']),
        constraints=[match(f"{GPU}/numa"), distinct(f"{GPU}/slot")],
    )
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[wanted])
    assert isinstance(outcome, Unfit)
    text = outcome.explanation
    assert "distinctAttribute gpu.example.com/slot) of claim default/pair rejected" in text
    assert "no combination of the candidate devices" in text


def test_no_placement_summarises_over_nodes() -> None:
    slices = [
        slice_(node="node-1", devices=[dev("gpu-0", attrs={"ok": False})]),
        slice_(node="node-2", devices=[dev("gpu-0", attrs={"ok": False})]),
        slice_(node="node-3", devices=[dev("gpu-0", attrs={"ok": True})]),
    ]
    inventory = _inventory(
        slices=slices, allocated_claims=[allocated("used", res("gpu", "gpu-0", pool="node-3"), node="node-3")]
    )
    nodes = [Node("node-1"), Node("node-2"), Node("node-3")]
    outcome = place(inventory=inventory, nodes=nodes, claims=[claim("c", req("gpu"))])
    assert isinstance(outcome, NoPlacement)
    assert sorted(outcome.per_node) == ["node-1", "node-2", "node-3"]
    assert "fit on none of 3 node(s)" in outcome.explanation
    assert "3 node(s): claim default/c, request gpu needs 1 device(s) of class gpu" in outcome.explanation
    assert "2 rejected by selector #1 of class gpu, 1 in use; 0 left" in outcome.explanation
