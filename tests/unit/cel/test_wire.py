"""`DeviceView.from_wire` (the published JSON) sees a device exactly as `from_device` does."""

from __future__ import annotations

from typing import Any

import pytest

from draco.api import Device
from draco.cel import DeviceView, SelectorRuntimeError, compile_selector
from tests.unit.cel.kit import DRIVER

DEVICES: dict[str, dict[str, Any]] = {
    "every-kind": {
        "name": "gpu-7",
        "attributes": {
            "model": {"string": "h100"},
            "index": {"int": 3},
            "ecc": {"bool": False},
            "driverVersion": {"version": "535.104.5"},
            "numa.example.com/node": {"int": 1},
            "sockets": {"ints": [0, 1]},
            "flags": {"bools": [True, False]},
            "tags": {"strings": ["training", "fast"]},
            "firmware": {"versions": ["1.0.0", "1.1.0-rc.1"]},
        },
        "capacity": {
            "memory": {"value": "80Gi"},
            "cores": {"value": 108},
            "numa.example.com/bandwidth": {"value": "1500m"},
            "slices": {"value": "7", "requestPolicy": {"default": "1", "validValues": ["1", "7"]}},
        },
        "allowMultipleAllocations": True,
    },
    "bare": {"name": "nic-0"},
    "empty-maps": {"name": "nic-1", "attributes": {}, "capacity": {}, "allowMultipleAllocations": False},
    "unusable-version": {
        "name": "gpu-8",
        "attributes": {"model": {"string": "a100"}, "v": {"version": "1.2"}},
        "capacity": {"memory": {"value": "40Gi"}},
    },
    "unusable-version-in-a-list": {
        "name": "gpu-9",
        "attributes": {"firmware": {"versions": ["1.0.0", "01.0.0"]}},
    },
    "no-value-set": {"name": "gpu-10", "attributes": {"odd": {}, "model": {"string": "a10"}}},
    "both-spellings": {
        "name": "gpu-11",
        "attributes": {f"{DRIVER}/model": {"string": "q"}, "model": {"string": "u"}},
        "capacity": {"memory": {"value": "1Gi"}, f"{DRIVER}/memory": {"value": "1024Mi"}},
    },
    "other-node-fields": {
        "name": "gpu-12",
        "attributes": {"model": {"string": "a100"}},
        "nodeName": "node-3",
        "taints": [{"key": "k", "effect": "NoSchedule"}],
        "bindsToNode": True,
    },
}


def _typed(value: Any) -> Any:
    """A value with its type, so `True` and `1`, or `1Gi` and `1024Mi`, stay apart."""
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_typed(item) for item in value))
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    return (type(value).__name__, str(value), getattr(value, "original", None))


def _shape(view: DeviceView) -> dict[str, Any]:
    return {
        "id": view.id,
        "unusable": view.unusable,
        "attributes": _typed(view.attributes),
        "capacity": _typed(view.capacity),
        "allow_multiple_allocations": _typed(view.allow_multiple_allocations),
        "cel_value": _typed(dict(view.cel_value)),
    }


@pytest.mark.parametrize("raw", DEVICES.values(), ids=DEVICES.keys())
def test_from_wire_equals_from_device(raw: dict[str, Any]) -> None:
    from_model = DeviceView.from_device(Device.from_dict(raw), driver=DRIVER, pool="node-b")
    from_json = DeviceView.from_wire(raw, driver=DRIVER, pool="node-b")
    assert _shape(from_json) == _shape(from_model)


SELECTORS = [
    'device.attributes["gpu.example.com"].model == "h100"',
    'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("500.0.0"))',
    'device.attributes["gpu.example.com"].firmware.includes(semver("1.1.0-rc.1"))',
    'device.attributes["gpu.example.com"].sockets.includes(1)',
    'device.capacity["gpu.example.com"].memory.compareTo(quantity("64Gi")) > 0',
    'device.capacity["numa.example.com"].bandwidth == quantity("1.5")',
    "device.allowMultipleAllocations",
    'device.attributes["gpu.example.com"].ecc',
]


@pytest.mark.parametrize("raw", DEVICES.values(), ids=DEVICES.keys())
def test_selectors_answer_the_same_on_both_views(raw: dict[str, Any]) -> None:
    views = [
        DeviceView.from_device(Device.from_dict(raw), driver=DRIVER),
        DeviceView.from_wire(raw, driver=DRIVER),
    ]
    for expression in SELECTORS:
        selector = compile_selector(expression)
        answers: list[object] = []
        for view in views:
            try:
                answers.append(selector.matches(view))
            except SelectorRuntimeError as err:
                answers.append(str(err))
        assert answers[0] == answers[1], expression


def test_an_unusable_wire_device_fails_every_selector_with_the_reason() -> None:
    view = DeviceView.from_wire(DEVICES["unusable-version"], driver=DRIVER)
    with pytest.raises(SelectorRuntimeError, match="attribute v: parse semantic version"):
        compile_selector("true").matches(view)
