"""What the operator advertises on each Node for extended resources backed by classes."""

from __future__ import annotations

from typing import Any

from draco.allocator.inventory import Inventory
from draco.operator.scheduler.nodecapacity import desired_capacity


def _class(name: str, driver: str, *, ext: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if ext:
        spec["extendedResourceName"] = ext
    return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


def _slice(name: str, driver: str, devices: int, **where: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            **where,
            "devices": [{"name": f"d-{i}"} for i in range(devices)],
        },
    }


def test_devices_reaching_each_node_are_counted_per_mapped_name() -> None:
    classes = {
        "gpu": _class("gpu", "gpu.example.com", ext="example.com/gpu"),
        "nic": _class("nic", "nic.example.com"),
    }
    slices = [
        _slice("n1-gpu", "gpu.example.com", 3, nodeName="n1"),
        _slice("all-gpu", "gpu.example.com", 1, allNodes=True),
        _slice(
            "rack-gpu",
            "gpu.example.com",
            2,
            nodeSelector={
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}
                ]
            },
        ),
    ]
    inventory = Inventory.build(classes=classes.values(), slices=slices)
    wanted = desired_capacity(inventory, classes, {"n1": {"rack": "a"}, "n2": {}})
    assert wanted == {
        "n1": {
            "example.com/gpu": 6,
            "deviceclass.resource.draco.dev/gpu": 6,
            "deviceclass.resource.kubernetes.io/gpu": 6,
        },
        "n2": {
            "example.com/gpu": 1,
            "deviceclass.resource.draco.dev/gpu": 1,
            "deviceclass.resource.kubernetes.io/gpu": 1,
        },
    }


def test_a_device_the_selector_errors_on_is_not_capacity_and_a_broken_class_is_left_out() -> None:
    classes = {
        "gpu": _class("gpu", "gpu.example.com"),
        "picky": {
            "metadata": {"name": "picky", "creationTimestamp": "2026-01-01T00:00:00Z"},
            # No device publishes this attribute: a runtime error on each, so none can be allocated.
            "spec": {
                "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "x"'}}]
            },
        },
        "broken": {
            "metadata": {"name": "broken", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
        },
    }
    inventory = Inventory.build(classes=[], slices=[_slice("n1-gpu", "gpu.example.com", 2, nodeName="n1")])
    assert desired_capacity(inventory, classes, {"n1": {}}) == {
        "n1": {"deviceclass.resource.draco.dev/gpu": 2, "deviceclass.resource.kubernetes.io/gpu": 2}
    }
