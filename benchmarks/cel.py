"""Compile and evaluation times of typical DRA selectors: draco's evaluator vs stock cel-python.

The allocator evaluates every class selector on every candidate device (thousands at cold
start), so evaluation time per device is the figure that matters; compile time is paid
once per expression (then cached). Run: `.venv/bin/python benchmarks/cel.py`.
"""

from __future__ import annotations

import os
import sys

# Python puts this script's folder first on the path, where benchmarks/operator.py would
# shadow the standard `operator` module; take the folder off again (os.path only).
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]

import time
from collections.abc import Callable
from typing import Any

import celpy
from celpy import celtypes

from draco.api import Device
from draco.api.quantity import Quantity
from draco.cel import DeviceView, SemVer, compile_selector
from draco.cel.compiler import compile_tree
from draco.cel.parser import parse

SELECTORS = [
    'device.driver == "gpu.example.com"',
    'device.attributes["gpu.example.com"].model == "a100"',
    'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.2.0"))',
    '"gpu.example.com" in device.attributes && device.attributes["gpu.example.com"].index < 4',
    'device.attributes["x"].?foo.orValue(false) == false',
    'device.attributes["gpu.example.com"].model.matches("^a[0-9]+$") && device.allowMultipleAllocations == false',
    'device.attributes["gpu.example.com"].all(k, k.size() < 20)',
]
DEVICES = 4000


def make_devices(count: int) -> list[DeviceView]:
    return [
        DeviceView(
            "gpu.example.com",
            {
                "model": "a100" if i % 2 else "h100",
                "index": i % 8,
                "driverVersion": SemVer.parse(f"1.{i % 5}.0"),
                "uuid": f"gpu-{i:08d}",
                "numa.example.com/node": i % 2,
            },
            {"memory": Quantity("80Gi" if i % 2 else "40Gi"), "cores": Quantity(108)},
            False,
            name=f"gpu-{i}",
            pool=f"node-{i // 8}",
        )
        for i in range(count)
    ]


def per_call(fn: Callable[[], Any], *, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


# --- stock cel-python, for comparison ----------------------------------------------------


def to_celpy(device: DeviceView) -> celtypes.MapType:
    def value(v: Any) -> Any:
        if isinstance(v, bool):
            return celtypes.BoolType(v)
        if isinstance(v, int):
            return celtypes.IntType(v)
        if isinstance(v, str):
            return celtypes.StringType(v)
        if isinstance(v, dict):
            return celtypes.MapType({celtypes.StringType(k): value(x) for k, x in v.items()})
        return v  # Quantity and SemVer pass through as opaque objects

    return value(dict(device.cel_value))


def _celpy_functions() -> dict[str, Any]:
    def compare_to(a: Any, b: Any) -> Any:
        return celtypes.IntType(a.compare(b))

    return {
        "quantity": lambda s: Quantity(str(s)),
        "semver": lambda s: SemVer.parse(str(s)),
        "compareTo": compare_to,
        "isGreaterThan": lambda a, b: celtypes.BoolType(a.compare(b) > 0),
    }


def bench_celpy(expression: str, activation: dict[str, Any]) -> tuple[str, str]:
    celpy.CELParser.CEL_PARSER = None
    env = celpy.Environment()
    try:
        start = time.perf_counter()
        program = env.program(env.compile(expression), functions=_celpy_functions())
        compile_s = time.perf_counter() - start
        result = program.evaluate(activation)
        if isinstance(result, Exception):
            raise result
        evaluate_s = per_call(lambda: program.evaluate(activation), repeat=200)
    except Exception as err:  # stock celpy lacks some syntax (`.?`) and raises its own types
        return "unsupported", type(err).__name__
    return f"{compile_s * 1e3:8.2f} ms", f"{evaluate_s * 1e6:8.1f} µs"


def main() -> None:
    devices = make_devices(DEVICES)
    start = time.perf_counter()
    parse("true")  # build the parser once; it is shared by every later compile
    print(f"parser construction (once per process): {(time.perf_counter() - start) * 1e3:.0f} ms")
    api_device = Device.model_validate(
        {
            "name": "gpu-0",
            "attributes": {
                "model": {"string": "a100"},
                "driverVersion": {"version": "1.2.3"},
                "index": {"int": 1},
                "numa.example.com/node": {"int": 0},
            },
            "capacity": {"memory": {"value": "40Gi"}},
        }
    )
    build_s = per_call(
        lambda: DeviceView.from_device(api_device, driver="gpu.example.com", pool="p"), repeat=2000
    )
    print(f"DeviceView.from_device (once per device): {build_s * 1e6:.1f} µs")
    print(f"{DEVICES} devices; evaluation time is the mean per device\n")
    header = (
        f"{'selector':<78} {'draco compile':>14} {'draco eval':>11} {'celpy compile':>14} {'celpy eval':>11}"
    )
    print(header)
    print("-" * len(header))
    celpy_device = {"device": to_celpy(devices[0])}
    total_per_device = 0.0
    for expression in SELECTORS:
        compile_s = per_call(lambda e=expression: compile_tree(parse(e), text=e), repeat=20)
        selector = compile_selector(expression)
        start = time.perf_counter()
        matched = sum(selector.matches(device) for device in devices)
        evaluate_s = (time.perf_counter() - start) / len(devices)
        total_per_device += evaluate_s
        stock_compile, stock_eval = bench_celpy(expression, celpy_device)
        shown = expression if len(expression) <= 76 else expression[:73] + "..."
        print(
            f"{shown:<78} {compile_s * 1e3:11.2f} ms {evaluate_s * 1e6:8.2f} µs "
            f"{stock_compile:>14} {stock_eval:>11}   ({matched} match)"
        )
    print(
        f"\ncold start, every selector above on {DEVICES} devices: {total_per_device * DEVICES:.3f} s "
        f"({len(SELECTORS) * DEVICES} evaluations)"
    )


if __name__ == "__main__":
    main()
