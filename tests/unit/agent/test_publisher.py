"""Cutting a pool into slices and deciding what to write (no API: plans only)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from draco.agent.drivers.base import Device, Inventory
from draco.agent.health import unhealthy_taint
from draco.agent.publisher import desired_slices, plan_pool, published_devices, slice_name, spec_matches

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
LABELS = {"app.kubernetes.io/managed-by": "draco-agent"}


def inventory(n: int, *, taint_first: bool = False, counters: int = 0) -> Inventory:
    devices = [
        Device(
            name=f"dev-{i}",
            attributes={"index": {"int": i}},
            taints=[unhealthy_taint("x")] if taint_first and i == 0 else [],
        )
        for i in range(n)
    ]
    sets = [{"name": f"set-{i}", "counters": {"memory": {"value": "1Gi"}}} for i in range(counters)]
    return Inventory(devices=devices, shared_counters=sets)


def as_existing(plan_objects: list[dict[str, Any]], *, version: int = 1) -> list[dict[str, Any]]:
    """What the server would return after the plan's writes."""
    out = []
    for i, obj in enumerate(plan_objects):
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(version + i)
        stored["metadata"]["uid"] = f"uid-{i}"
        out.append(stored)
    return out


def test_300_devices_make_three_slices_with_the_right_count() -> None:
    desired = desired_slices(driver="gpu.draco.dev", node="n1", inventory=inventory(300), now=NOW)
    assert [len(spec["devices"]) for _, spec in desired] == [128, 128, 44]
    plan = plan_pool(desired, [], labels=LABELS)
    assert plan.generation == 1 and not plan.update and not plan.delete
    assert {o["spec"]["pool"]["resourceSliceCount"] for o in plan.create} == {3}
    assert {o["spec"]["pool"]["name"] for o in plan.create} == {"n1"}
    assert {o["spec"]["nodeName"] for o in plan.create} == {"n1"}
    assert [o["metadata"]["name"] for o in plan.create] == [
        "n1-gpu.draco.dev-0",
        "n1-gpu.draco.dev-1",
        "n1-gpu.draco.dev-2",
    ]


def test_taints_and_counters_cap_slices_at_64_and_counters_get_their_own_slices() -> None:
    desired = desired_slices(
        driver="d.x", node="n", inventory=inventory(130, taint_first=True, counters=9), now=NOW
    )
    kinds = [
        (
            "counters" if "sharedCounters" in spec else "devices",
            len(spec.get("devices", spec.get("sharedCounters"))),
        )
        for _, spec in desired
    ]
    assert kinds == [("counters", 8), ("counters", 1), ("devices", 64), ("devices", 64), ("devices", 2)]
    assert all(not ("devices" in spec and "sharedCounters" in spec) for _, spec in desired)


def test_an_empty_inventory_still_publishes_the_pool() -> None:
    desired = desired_slices(driver="d.x", node="n", inventory=Inventory(), now=NOW)
    assert [spec["devices"] for _, spec in desired] == [[]]


def test_unchanged_pool_plans_nothing_even_with_server_defaults() -> None:
    desired = desired_slices(driver="d.x", node="n", inventory=inventory(3), now=NOW)
    existing = as_existing(plan_pool(desired, [], labels=LABELS).create)
    existing[0]["spec"]["devices"][0]["bindsToNode"] = False  # a default the server added
    assert plan_pool(desired, existing, labels=LABELS).empty


def test_a_deleted_slice_is_recreated_with_the_same_generation() -> None:
    desired = desired_slices(driver="d.x", node="n", inventory=inventory(200), now=NOW)
    existing = as_existing(plan_pool(desired, [], labels=LABELS).create)
    plan = plan_pool(desired, existing[:1], labels=LABELS)
    assert plan.generation == 1
    assert [o["metadata"]["name"] for o in plan.create] == ["n-d.x-1"]
    assert not plan.update and not plan.delete


def test_changed_devices_bump_the_generation_and_rewrite_every_slice() -> None:
    before = desired_slices(driver="d.x", node="n", inventory=inventory(200), now=NOW)
    existing = as_existing(plan_pool(before, [], labels=LABELS).create)
    after = desired_slices(driver="d.x", node="n", inventory=inventory(100), now=NOW)
    plan = plan_pool(after, existing, labels=LABELS)
    assert plan.generation == 2
    assert [o["metadata"]["name"] for o in plan.update] == ["n-d.x-0"]
    assert plan.update[0]["metadata"]["resourceVersion"] == "1"
    assert plan.update[0]["spec"]["pool"] == {"name": "n", "generation": 2, "resourceSliceCount": 1}
    assert plan.delete == [("n-d.x-1", "2")]


def test_someone_elses_edit_is_undone_with_a_new_generation() -> None:
    desired = desired_slices(driver="d.x", node="n", inventory=inventory(2), now=NOW)
    existing = as_existing(plan_pool(desired, [], labels=LABELS).create)
    existing[0]["spec"]["devices"][1]["attributes"]["index"] = {"int": 99}
    plan = plan_pool(desired, existing, labels=LABELS)
    assert plan.generation == 2 and len(plan.update) == 1
    assert plan.update[0]["spec"]["devices"][1]["attributes"]["index"] == {"int": 1}


def test_taint_time_added_survives_a_restart() -> None:
    first = desired_slices(driver="d.x", node="n", inventory=inventory(2, taint_first=True), now=NOW)
    existing = as_existing(plan_pool(first, [], labels=LABELS).create)
    later = desired_slices(
        driver="d.x",
        node="n",
        inventory=inventory(2, taint_first=True),
        published=published_devices(existing),
        now=NOW + timedelta(hours=1),
    )
    assert later[0][1]["devices"][0]["taints"][0]["timeAdded"] == "2026-01-02T03:04:05Z"
    assert plan_pool(later, existing, labels=LABELS).empty


def test_owner_reference_to_the_node_is_set_when_known() -> None:
    desired = desired_slices(driver="d.x", node="n", inventory=inventory(1), now=NOW)
    owner = {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u", "controller": True}
    plan = plan_pool(desired, [], labels=LABELS, owner=owner)
    assert plan.create[0]["metadata"]["ownerReferences"] == [owner]
    assert plan.create[0]["apiVersion"] == "resource.draco.dev/v1"


def test_long_names_stay_valid_and_distinct() -> None:
    a = slice_name("n" * 200, "driver.example.com", "0")
    b = slice_name("n" * 200, "driver.example.org", "0")
    assert len(a) <= 253 and len(b) <= 253 and a != b


def test_spec_matches_is_a_subset_check() -> None:
    assert spec_matches({"a": [1, {"b": True}]}, {"a": [1, {"b": True, "c": 0}], "d": 1})
    assert not spec_matches({"a": [1]}, {"a": [1, 2]})
    assert not spec_matches({"a": True}, {"a": 1})
    assert not spec_matches({"a": "x"}, {})


def test_what_a_device_no_longer_has_is_a_change_not_a_server_default() -> None:
    """A recovered device's taint, a dropped attribute or share: the pool is rewritten."""

    def plan_after(before: Inventory, after: Inventory) -> Any:
        first = plan_pool(
            desired_slices(driver="d.x", node="n", inventory=before, now=NOW), [], labels=LABELS
        )
        existing = as_existing(first.create)
        return plan_pool(
            desired_slices(driver="d.x", node="n", inventory=after, now=NOW), existing, labels=LABELS
        )

    sick = Inventory(devices=[Device(name="dev-0", taints=[unhealthy_taint("xid-79")])])
    healthy = Inventory(devices=[Device(name="dev-0")])
    recovered = plan_after(sick, healthy)
    assert recovered.generation == 2 and len(recovered.update) == 1
    assert "taints" not in recovered.update[0]["spec"]["devices"][0]
    assert plan_after(healthy, healthy).empty
    shared = Inventory(
        devices=[
            Device(
                name="dev-0",
                attributes={"a": {"int": 1}, "b": {"int": 2}},
                capacity={"memory": {"value": "1Gi", "requestPolicy": {"default": "1Gi"}}},
                allow_multiple_allocations=True,
            )
        ]
    )
    plain = Inventory(
        devices=[Device(name="dev-0", attributes={"a": {"int": 1}}, capacity={"memory": {"value": "1Gi"}})]
    )
    assert not plan_after(shared, plain).empty
    # A default the server adds to a device is not the agent's: no rewrite.
    stored = as_existing(
        plan_pool(desired_slices(driver="d.x", node="n", inventory=plain, now=NOW), [], labels=LABELS).create
    )
    stored[0]["spec"]["devices"][0]["capacity"]["memory"]["extra"] = "server default"
    assert plan_pool(
        desired_slices(driver="d.x", node="n", inventory=plain, now=NOW), stored, labels=LABELS
    ).empty
