"""DeviceClass status rules: which devices count, what the `Valid` condition says."""

from __future__ import annotations

from typing import Any

import pytest

from draco.allocator.inventory import Inventory
from draco.allocator.selectors import SelectorCache
from draco.operator.deviceclassstatus import status as cs

DRIVER = "gpu.example.com"
NOW = "2026-01-01T00:00:00Z"
EARLIER = "2025-06-01T12:00:00Z"


def device(name: str, **attributes: Any) -> dict[str, Any]:
    attrs = {
        key: {"int": value} if isinstance(value, int) else {"string": value}
        for key, value in attributes.items()
    }
    return {"name": name, "attributes": attrs}


def slice_(
    name: str,
    devices: list[dict[str, Any]],
    *,
    pool: str = "node-a",
    generation: int = 1,
    count: int = 1,
    driver: str = DRIVER,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "nodeName": pool,
            "devices": devices,
        },
    }


def device_class(*expressions: str, name: str = "gpus", generation: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "generation": generation},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def published(*slices: dict[str, Any], cache: SelectorCache) -> list[Any]:
    return cs.published_devices(Inventory.build(classes=(), slices=slices, cache=cache))


def keys(*names: str, pool: str = "node-a") -> frozenset[cs.DeviceKey]:
    return frozenset((DRIVER, pool, name) for name in names)


# --- published devices --------------------------------------------------------------------------


def test_only_the_newest_generation_of_a_pool_is_published() -> None:
    cache = SelectorCache()
    devices = published(
        slice_("old", [device("gpu-0"), device("gpu-1"), device("gpu-2")], generation=1),
        slice_("new", [device("gpu-0")], generation=2),
        slice_("other", [device("gpu-9")], pool="node-b", generation=1),
        cache=cache,
    )
    assert sorted(d.key for d in devices) == sorted([*keys("gpu-0"), *keys("gpu-9", pool="node-b")])


def test_devices_of_every_slice_at_the_newest_generation_count() -> None:
    cache = SelectorCache()
    devices = published(
        slice_("a", [device("gpu-0")], count=2),
        slice_("b", [device("gpu-1")], count=2),
        cache=cache,
    )
    assert {d.key for d in devices} == keys("gpu-0", "gpu-1")


def test_a_device_listed_twice_in_a_pool_counts_once() -> None:
    cache = SelectorCache()
    devices = published(slice_("a", [device("gpu-0"), device("gpu-0")]), cache=cache)
    assert [d.key for d in devices] == [(DRIVER, "node-a", "gpu-0")]


# --- selection -----------------------------------------------------------------------------------


def test_selection_needs_every_selector() -> None:
    cache = SelectorCache()
    devices = published(
        slice_("a", [device("gpu-0", model="a100", mem=40), device("gpu-1", model="a100", mem=80)]),
        slice_("b", [device("nic-0")], driver="nic.example.com", pool="node-b"),
        cache=cache,
    )
    selectors = cs.selectors_of(
        device_class(f'device.driver == "{DRIVER}"', f'device.attributes["{DRIVER}"].mem >= 80')
    )
    selection = cs.select_devices(selectors, devices, cache=cache)
    assert selection.selected == keys("gpu-1")
    assert selection.failure is None


def test_a_class_without_selectors_selects_every_published_device() -> None:
    cache = SelectorCache()
    devices = published(slice_("a", [device("gpu-0"), device("gpu-1")]), cache=cache)
    selection = cs.select_devices(cs.selectors_of(device_class()), devices, cache=cache)
    assert selection.selected == keys("gpu-0", "gpu-1")


def test_runtime_errors_count_as_not_selected_and_the_first_is_reported() -> None:
    cache = SelectorCache()
    devices = published(
        slice_("a", [device("gpu-0", model="a100"), device("gpu-1"), device("gpu-2")]),
        cache=cache,
    )
    selectors = cs.selectors_of(device_class(f'device.attributes["{DRIVER}"].model == "a100"'))
    selection = cs.select_devices(selectors, devices, cache=cache)
    assert selection.selected == keys("gpu-0")
    assert selection.failure is not None
    assert selection.failure.device == (DRIVER, "node-a", "gpu-1")
    assert selection.failed == keys("gpu-1", "gpu-2")
    assert selection.failure.selector == cs.Selector(0, f'device.attributes["{DRIVER}"].model == "a100"')


def test_a_selector_that_rejects_first_stops_evaluation_like_allocation() -> None:
    cache = SelectorCache()
    devices = published(slice_("a", [device("gpu-0"), device("gpu-1", model="x")]), cache=cache)
    # The second selector would fail on gpu-0, but the first already rejects it.
    selectors = cs.selectors_of(
        device_class(
            f'"model" in device.attributes["{DRIVER}"]', f'device.attributes["{DRIVER}"].model == "x"'
        )
    )
    selection = cs.select_devices(selectors, devices, cache=cache)
    assert selection.selected == keys("gpu-1")
    assert selection.failure is None


# --- verdicts ------------------------------------------------------------------------------------


def test_a_sound_class_has_no_static_verdict() -> None:
    assert cs.judge_class(device_class(f'device.driver == "{DRIVER}"'), cache=SelectorCache()) is None


def test_a_selector_that_does_not_compile_is_named() -> None:
    verdict = cs.judge_class(device_class('device.driver == "x"', "device.driver =="), cache=SelectorCache())
    assert verdict is not None
    assert not verdict.valid
    assert verdict.reason == cs.REASON_INVALID_SELECTOR
    assert "spec.selectors[1].cel.expression" in verdict.message
    assert "'device.driver =='" in verdict.message
    assert "\n" not in verdict.message


def test_a_selector_of_the_wrong_type_does_not_compile() -> None:
    verdict = cs.judge_class(device_class("device.driver"), cache=SelectorCache())
    assert verdict is not None and verdict.reason == cs.REASON_INVALID_SELECTOR


def test_a_spec_the_api_server_rejects_is_invalid_spec() -> None:
    broken = device_class(f'device.driver == "{DRIVER}"')
    broken["spec"]["extendedResourceName"] = "not a resource name!"
    verdict = cs.judge_class(broken, cache=SelectorCache())
    assert verdict is not None
    assert verdict.reason == cs.REASON_INVALID_SPEC
    assert "spec.extendedResourceName" in verdict.message


def test_a_runtime_failure_makes_the_class_invalid_with_the_device_named() -> None:
    failure = cs.RuntimeFailure(
        selector=cs.Selector(0, 'device.attributes["x"].y'),
        device=(DRIVER, "node-a", "gpu-1"),
        error="no such key: y",
    )
    verdict = cs.final_verdict(None, cs.Selection(frozenset(), keys("gpu-1", "gpu-2", "gpu-3"), failure))
    assert not verdict.valid
    assert verdict.reason == cs.REASON_SELECTOR_RUNTIME_ERROR
    assert f"{DRIVER}/node-a/gpu-1" in verdict.message
    assert "and on 2 more devices" in verdict.message
    assert "no such key: y" in verdict.message


def test_selections_of_slices_merge_with_the_first_failure() -> None:
    first = cs.RuntimeFailure(cs.Selector(0, "e"), (DRIVER, "node-a", "gpu-1"), "boom")
    later = cs.RuntimeFailure(cs.Selector(0, "e"), (DRIVER, "node-b", "gpu-1"), "boom")
    merged = cs.merge_selections(
        [
            cs.Selection(keys("gpu-0")),
            cs.Selection(keys("gpu-2"), keys("gpu-1"), first),
            cs.Selection(frozenset(), keys("gpu-1", pool="node-b"), later),
        ]
    )
    assert merged.selected == keys("gpu-0", "gpu-2")
    assert merged.failed == keys("gpu-1") | keys("gpu-1", pool="node-b")
    assert merged.failure == first


def test_the_static_verdict_wins() -> None:
    static = cs.Verdict(valid=False, reason=cs.REASON_INVALID_SPEC, message="m")
    assert cs.final_verdict(static, cs.Selection(frozenset())) is static


def test_a_class_that_evaluates_everywhere_is_valid() -> None:
    verdict = cs.final_verdict(None, cs.Selection(keys("gpu-0")))
    assert verdict.valid and verdict.reason == cs.REASON_VALID


# --- allocated devices ---------------------------------------------------------------------------


def claim(*results: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"allocation": {"devices": {"results": list(results)}}}}


def result(name: str, **extra: Any) -> dict[str, Any]:
    return {"request": "r", "driver": DRIVER, "pool": "node-a", "device": name, **extra}


def test_admin_access_results_hold_no_device() -> None:
    held = cs.allocated_device_keys(claim(result("gpu-0"), result("gpu-1", adminAccess=True)))
    assert held == keys("gpu-0")


def test_shared_results_hold_their_device() -> None:
    held = cs.allocated_device_keys(claim(result("gpu-0", shareID="abc")))
    assert held == keys("gpu-0")


def test_a_claim_without_allocation_holds_nothing() -> None:
    assert cs.allocated_device_keys({"status": {}}) == frozenset()
    assert cs.allocated_device_keys({}) == frozenset()


def test_allocated_counts_only_selected_devices() -> None:
    assert cs.count_allocated(keys("gpu-0", "gpu-1"), keys("gpu-1", "gpu-7")) == 1


# --- the status written --------------------------------------------------------------------------

VALID = cs.Verdict(valid=True, reason=cs.REASON_VALID, message="ok")
INVALID = cs.Verdict(valid=False, reason=cs.REASON_INVALID_SELECTOR, message="bad")


def test_a_first_status_has_the_counts_and_a_fresh_condition() -> None:
    status = cs.desired_status(None, generation=3, selected=4, allocated=1, verdict=VALID, now=NOW)
    assert status == {
        "selectedDevices": 4,
        "allocatedDevices": 1,
        "conditions": [
            {
                "type": "Valid",
                "status": "True",
                "reason": "Valid",
                "message": "ok",
                "lastTransitionTime": NOW,
                "observedGeneration": 3,
            }
        ],
    }


def test_the_transition_time_stays_while_the_condition_status_stays() -> None:
    before = cs.desired_status(None, generation=1, selected=4, allocated=1, verdict=VALID, now=EARLIER)
    after = cs.desired_status(before, generation=2, selected=5, allocated=2, verdict=VALID, now=NOW)
    assert after["conditions"][0]["lastTransitionTime"] == EARLIER
    assert after["conditions"][0]["observedGeneration"] == 2


def test_the_transition_time_moves_when_the_condition_flips() -> None:
    before = cs.desired_status(None, generation=1, selected=4, allocated=1, verdict=VALID, now=EARLIER)
    after = cs.desired_status(before, generation=2, selected=0, allocated=0, verdict=INVALID, now=NOW)
    condition = after["conditions"][0]
    assert (condition["status"], condition["reason"], condition["lastTransitionTime"]) == (
        "False",
        "InvalidSelector",
        NOW,
    )


def test_other_conditions_are_kept() -> None:
    other = {"type": "Audited", "status": "True", "reason": "R", "message": "", "lastTransitionTime": EARLIER}
    status = cs.desired_status(
        {"conditions": [other]}, generation=1, selected=0, allocated=0, verdict=VALID, now=NOW
    )
    assert [c["type"] for c in status["conditions"]] == ["Audited", "Valid"]


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({}, False),
        ({"selectedDevices": 5}, True),
        ({"allocatedDevices": 0}, True),
    ],
)
def test_status_differs_only_on_a_real_change(change: dict[str, Any], differs: bool) -> None:
    current = cs.desired_status(None, generation=1, selected=4, allocated=1, verdict=VALID, now=EARLIER)
    desired = cs.desired_status(current, generation=1, selected=4, allocated=1, verdict=VALID, now=NOW)
    assert cs.status_differs(current, {**desired, **change}) is differs


def test_an_empty_status_differs_from_any_desired_one() -> None:
    desired = cs.desired_status(None, generation=1, selected=0, allocated=0, verdict=VALID, now=NOW)
    assert cs.status_differs({}, desired)
    assert cs.status_differs(None, desired)


# --- the controller's caches (no API calls: only the inputs and `desired`) ----------------------


async def test_the_controller_counts_from_its_caches_and_follows_claims() -> None:
    from draco.operator.deviceclassstatus.service import ClassStatusService
    from draco.runtime.workqueue import WorkQueue

    controller = ClassStatusService(kube=None, queue=WorkQueue("test_class_status"))  # type: ignore[arg-type]
    gpu_class = device_class(f'device.attributes["{DRIVER}"].mem >= 80')
    controller.prime(
        classes=[gpu_class],
        slices=[slice_("a", [device("gpu-0", mem=40), device("gpu-1", mem=80), device("gpu-2", mem=80)])],
        claims=[{"metadata": {"namespace": "ns", "name": "c1"}, **claim(result("gpu-1"), result("gpu-0"))}],
    )
    status = controller.desired("gpus")
    assert status is not None
    assert (status["selectedDevices"], status["allocatedDevices"]) == (2, 1)

    second = {
        "metadata": {"namespace": "ns", "name": "c2"},
        **claim(result("gpu-1", shareID="s"), result("gpu-2")),
    }
    controller.on_claim(second, deleted=False)
    assert controller.desired("gpus")["allocatedDevices"] == 2  # type: ignore[index]
    controller.on_claim({"metadata": {"namespace": "ns", "name": "c1"}, "status": {}}, deleted=False)
    assert controller.desired("gpus")["allocatedDevices"] == 2  # type: ignore[index]
    controller.on_claim(second, deleted=True)
    assert controller.desired("gpus")["allocatedDevices"] == 0  # type: ignore[index]
    assert not controller.allocated

    controller.on_slice(slice_("a", [device("gpu-0", mem=80)], generation=2), deleted=False)
    assert controller.desired("gpus")["selectedDevices"] == 1  # type: ignore[index]
    controller.on_slice(slice_("a", []), deleted=True)
    assert controller.desired("gpus")["selectedDevices"] == 0  # type: ignore[index]
    controller.queue.shut_down()


async def test_a_class_that_does_not_compile_selects_nothing() -> None:
    from draco.operator.deviceclassstatus.service import ClassStatusService
    from draco.runtime.workqueue import WorkQueue

    controller = ClassStatusService(kube=None, queue=WorkQueue("test_class_status"))  # type: ignore[arg-type]
    controller.prime(
        classes=[device_class("device.driver ==")], slices=[slice_("a", [device("gpu-0")])], claims=[]
    )
    status = controller.desired("gpus")
    assert status is not None
    assert status["selectedDevices"] == 0
    assert status["conditions"][-1]["reason"] == cs.REASON_INVALID_SELECTOR
    controller.queue.shut_down()


async def test_the_controller_counts_the_newest_generation_across_slices() -> None:
    from draco.operator.deviceclassstatus.service import ClassStatusService
    from draco.runtime.workqueue import WorkQueue

    controller = ClassStatusService(kube=None, queue=WorkQueue("test_class_status"))  # type: ignore[arg-type]
    controller.prime(
        classes=[device_class(f'device.driver == "{DRIVER}"')],
        slices=[
            slice_("old", [device("gpu-0"), device("gpu-1"), device("gpu-2")], generation=1),
            slice_("other", [device("gpu-0")], pool="node-b"),
        ],
        claims=[],
    )
    assert controller.desired("gpus")["selectedDevices"] == 4  # type: ignore[index]
    controller.on_slice(slice_("new", [device("gpu-0")], generation=2), deleted=False)
    assert controller.desired("gpus")["selectedDevices"] == 2  # type: ignore[index]
    controller.on_slice(slice_("new", []), deleted=True)
    assert controller.desired("gpus")["selectedDevices"] == 4  # type: ignore[index]
    # A changed selector re-counts every slice.
    controller.on_class(
        device_class(f'device.driver == "{DRIVER}"', 'device.attributes["other"].x == 1', generation=4),
        deleted=False,
    )
    status = controller.desired("gpus")
    assert status is not None
    assert status["selectedDevices"] == 0
    assert status["conditions"][-1]["reason"] == cs.REASON_SELECTOR_RUNTIME_ERROR
    assert "and on 3 more devices" in status["conditions"][-1]["message"]
    controller.queue.shut_down()
