"""The hint a device-plugin-style pod gets where kube-scheduler only says "Insufficient"."""

from __future__ import annotations

from typing import Any

from draco.operator.scheduler.hints import hint_message, insufficient_names


def unschedulable(message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ]
        },
    }


def test_the_names_kube_scheduler_found_short_are_read_from_its_condition() -> None:
    pod = unschedulable(
        "0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient nvidia.com/gpu, 3 Insufficient example.com/fpga. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    assert insufficient_names(pod) == ["example.com/fpga", "nvidia.com/gpu"]
    assert insufficient_names(unschedulable("0/1 nodes are available: 1 Insufficient memory.")) == []
    assert insufficient_names({"status": {}}) == []


def test_a_class_named_after_the_resource_gives_a_hint() -> None:
    compat = {"gpu.nvidia.com": {"spec": {"selectors": []}}}
    hint = hint_message("nvidia.com/gpu", compat)
    assert hint is not None
    assert (
        "DeviceClass gpu.nvidia.com can serve it: set its spec.extendedResourceName to nvidia.com/gpu" in hint
    )
    assert "deviceclass.resource.draco.dev/gpu.nvidia.com" in hint
    mapped = {**compat, "gpus": {"spec": {"extendedResourceName": "nvidia.com/gpu"}}}
    assert hint_message("nvidia.com/gpu", mapped) is None  # a class maps it: another Event's case
    assert hint_message("example.com/fpga", compat) is None  # draco has nothing to say
