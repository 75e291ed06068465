"""Shared helpers for the CEL tests: a typical GPU device and a one-call evaluator."""

from __future__ import annotations

from typing import Any

from draco.api.quantity import Quantity
from draco.cel import DeviceView, SemVer, compile_selector

DRIVER = "gpu.example.com"


def gpu(**overrides: Any) -> DeviceView:
    attributes: dict[str, Any] = {
        "model": "a100",
        "index": 2,
        "driverVersion": SemVer.parse("1.3.0"),
        "uuid": "GPU-0f3e",
        "mig": True,
        "numa.example.com/node": 1,
        "tags": ["training", "fast"],
    }
    attributes.update(overrides.pop("attributes", {}))
    capacity = {
        "memory": Quantity("80Gi"),
        "cores": Quantity(108),
        "numa.example.com/bandwidth": Quantity("1500m"),
    }
    capacity.update(overrides.pop("capacity", {}))
    return DeviceView(
        overrides.pop("driver", DRIVER),
        attributes,
        capacity,
        overrides.pop("allow_multiple_allocations", False),
        name="gpu-0",
        pool="node-a",
    )


def evaluate(expression: str, device: DeviceView | None = None) -> bool:
    return compile_selector(expression).matches(device or gpu(), context='class "gpu" selector #0')
