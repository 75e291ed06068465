"""`status.devices` entries: conditions, binding conditions, merging with other drivers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from draco.agent.prepare import DeviceOutcome
from draco.agent.status import device_entries, merge_device_statuses
from tests.unit.agent.support import result

NOW = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)


def conditions(entry: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {c["type"]: c["status"] for c in entry["conditions"]}


def test_prepared_device_is_ready_with_its_binding_condition_true() -> None:
    outcome = DeviceOutcome(
        result(
            "gpu-0",
            bindingConditions=["draco.dev/prepared"],
            bindingFailureConditions=["draco.dev/prepare-failed"],
        ),
        cdi_device_ids=("a/b=c",),
    )
    (entry,) = device_entries([outcome], existing=[], now=NOW)
    assert {k: entry[k] for k in ("driver", "pool", "device")} == {
        "driver": "gpu.draco.dev",
        "pool": "node-a",
        "device": "gpu-0",
    }
    assert conditions(entry) == {
        "Ready": "True",
        "draco.dev/prepared": "True",
        "draco.dev/prepare-failed": "False",
    }
    assert entry["data"] == {"cdiDeviceIDs": ["a/b=c"]}
    assert all(
        c["lastTransitionTime"] == "2026-05-06T07:08:09Z" and c["reason"] == "Prepared"
        for c in entry["conditions"]
    )


def test_failed_device_sets_the_failure_condition_and_says_why() -> None:
    outcome = DeviceOutcome(
        result(
            "gpu-0",
            shareID="3e1d4ad4-0000-4000-8000-000000000001",
            bindingConditions=["draco.dev/prepared"],
            bindingFailureConditions=["draco.dev/prepare-failed"],
        ),
        error="link down",
    )
    (entry,) = device_entries([outcome], existing=[], now=NOW)
    assert entry["shareID"] == "3e1d4ad4-0000-4000-8000-000000000001"
    assert conditions(entry) == {
        "Ready": "False",
        "draco.dev/prepared": "False",
        "draco.dev/prepare-failed": "True",
    }
    assert {c["message"] for c in entry["conditions"]} == {"link down"}
    assert "data" not in entry


def test_transition_times_are_kept_while_the_status_holds() -> None:
    outcome = DeviceOutcome(result("gpu-0"), cdi_device_ids=("x",))
    first = device_entries([outcome], existing=[], now=NOW)
    second = device_entries([outcome], existing=first, now=NOW + timedelta(minutes=5))
    assert second == first


def test_merge_keeps_other_drivers_entries() -> None:
    theirs = {"driver": "other.dev", "pool": "node-a", "device": "x", "conditions": []}
    old_mine = {"driver": "gpu.draco.dev", "pool": "node-a", "device": "gpu-0"}
    new_mine = {
        "driver": "gpu.draco.dev",
        "pool": "node-a",
        "device": "gpu-0",
        "conditions": [{"type": "Ready"}],
    }
    merged = merge_device_statuses(
        [theirs, old_mine], [new_mine], owned=lambda e: e["driver"] == "gpu.draco.dev"
    )
    assert merged == [theirs, new_mine]


def test_an_unhealthy_device_gets_a_healthy_false_condition_that_recovery_removes() -> None:
    outcome = DeviceOutcome(result("gpu-0"), cdi_device_ids=("a/b=c",), notes=("share not enforced",))
    (sick,) = device_entries(
        [outcome], existing=[], now=NOW, health={("gpu.draco.dev", "node-a", "gpu-0"): "xid-79"}
    )
    assert conditions(sick) == {"Ready": "True", "Healthy": "False"}
    healthy = next(c for c in sick["conditions"] if c["type"] == "Healthy")
    assert healthy["reason"] == "Unhealthy"
    assert healthy["message"] == (
        "device gpu.draco.dev/node-a/gpu-0 is unhealthy: XID 79 (GPU has fallen off the bus)"
    )
    ready = next(c for c in sick["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "share not enforced"  # what the driver could not enforce
    (again,) = device_entries([outcome], existing=[sick], now=NOW + timedelta(minutes=1), health={})
    assert conditions(again) == {"Ready": "True"}
    # Another device's problem is not this one's.
    (other,) = device_entries(
        [outcome], existing=[], now=NOW, health={("gpu.draco.dev", "node-a", "gpu-1"): "x"}
    )
    assert conditions(other) == {"Ready": "True"}


def test_a_pods_message_names_every_unhealthy_device_of_its_claims() -> None:
    from draco.agent.podhealth import pod_message, reserving_pods

    message = pod_message(
        {
            "ns/b": {("gpu.nvidia.com", "n1", "gpu-1"): "gpu-lost"},
            "ns/a": {("gpu.nvidia.com", "n1", "gpu-0"): "xid-48"},
        }
    )
    assert message == (
        "ResourceClaim ns/a: device gpu.nvidia.com/n1/gpu-0 is unhealthy: XID 48 (double-bit ECC error); "
        "ResourceClaim ns/b: device gpu.nvidia.com/n1/gpu-1 is unhealthy: the GPU is lost (NVML cannot reach it)"
    )
    claim = {
        "status": {
            "reservedFor": [
                {"resource": "pods", "name": "p", "uid": "u1"},
                {"apiGroup": "batch", "resource": "jobs", "name": "j", "uid": "u2"},
            ]
        }
    }
    assert reserving_pods(claim) == [("p", "u1")]
