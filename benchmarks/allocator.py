"""Allocator throughput, cold start, memory and the unsatisfiable-constraint case.

Run: ``.venv/bin/python benchmarks/allocator.py [--nodes 500] [--claims 4000]``.

The inventory mirrors upstream's scheduler_perf ``selector_empty_500nodes``: 500 nodes
with 8 devices each (attributes and a memory capacity) and a class with a CEL selector.
Claims are placed one pod at a time through node choice (:func:`draco.allocator.place`),
and the allocated state is updated after each (the operator does the same with
in-flight allocations). Targets on a 2-core machine: >= 1,000 allocations/s plain,
>= 200/s matchAttribute, the unsatisfiable case < 50 ms, cold start < 2 s.
"""

from __future__ import annotations

import os
import sys

# Python puts this script's folder first on the path; a sibling benchmark named like a
# standard module (operator.py) would shadow it, so the folder is taken off again
# (with os.path only: pathlib itself imports the module that would be shadowed).
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]

import argparse
import resource
import time
from collections.abc import Callable
from typing import Any

from draco.allocator import Inventory, Node, Placement, SelectorCache, allocate, place

DRIVER = "gpu.example.com"
CLASS_SELECTOR = (
    f'device.attributes["{DRIVER}"].driverVersion.major() >= 1 && '
    f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("1Mi"))'
)
REQUEST_SELECTOR = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]},
    }


def gpu(node: int, index: int, *, numa: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "model": {"string": "a100" if index % 2 else "h100"},
            "uuid": {"string": f"gpu-{node:04d}-{index:03d}"},
            "numa": {"int": numa},
            "driverVersion": {"version": "1.2.3"},
        },
        "capacity": {"memory": {"value": "80Gi" if index % 2 else "40Gi"}},
    }


def plain_slices(nodes: int, per_node: int = 8) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"node-{n:04d}-gpu"},
            "spec": {
                "driver": DRIVER,
                "nodeName": f"node-{n:04d}",
                "pool": {"name": f"node-{n:04d}", "generation": 1, "resourceSliceCount": 1},
                "devices": [gpu(n, i, numa=i // 4) for i in range(per_node)],
            },
        }
        for n in range(nodes)
    ]


def partitionable_slices(nodes: int) -> list[dict[str, Any]]:
    """Per node two physical GPUs, each split into a whole, two halves and four quarters."""
    result = []
    for n in range(nodes):
        counters = [{"name": f"gpu-{g}", "counters": {"memory": {"value": "80Gi"}}} for g in range(2)]
        devices = []
        for g in range(2):
            for size, parts in (("80Gi", 1), ("40Gi", 2), ("20Gi", 4)):
                for p in range(parts):
                    device = gpu(n, len(devices), numa=g)
                    device["name"] = f"gpu-{g}-{size.lower()}-{p}"
                    device["capacity"] = {"memory": {"value": size}}
                    device["consumesCounters"] = [
                        {"counterSet": f"gpu-{g}", "counters": {"memory": {"value": size}}}
                    ]
                    devices.append(device)
        pool = {"name": f"node-{n:04d}", "generation": 1, "resourceSliceCount": 2}
        result.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"node-{n:04d}-counters"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": f"node-{n:04d}",
                    "pool": pool,
                    "sharedCounters": counters,
                },
            }
        )
        result.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"node-{n:04d}-devices"},
                "spec": {"driver": DRIVER, "nodeName": f"node-{n:04d}", "pool": pool, "devices": devices},
            }
        )
    return result


def claim(
    name: str, *, count: int = 1, selectors: tuple[str, ...] = (), match: str | None = None
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def run_placements(
    inventory: Inventory, nodes: list[Node], make_claim: Callable[[int], dict[str, Any]], count: int
) -> tuple[int, float]:
    """Place ``count`` single-claim pods one at a time; returns (placed, seconds)."""
    placed = 0
    start = time.perf_counter()
    for i in range(count):
        data = make_claim(i)
        outcome = place(inventory=inventory, nodes=nodes, claims=[data])
        if not isinstance(outcome, Placement):
            break
        allocation = outcome.results[f"bench/{data['metadata']['name']}"]
        data["status"] = {"allocation": allocation.to_dict()}
        inventory.mark_allocated(data)
        placed += 1
    return placed, time.perf_counter() - start


def report(label: str, placed: int, seconds: float, target: float | None = None) -> None:
    rate = placed / seconds if seconds else float("inf")
    verdict = ""
    if target is not None:
        verdict = f"  (target >= {target:.0f}/s: {'ok' if rate >= target else 'MISSED'})"
    print(f"{label:<44} {placed:>6} placed in {seconds:7.2f} s = {rate:8.0f} allocations/s{verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--claims", type=int, default=4000)
    args = parser.parse_args(argv)
    nodes = [Node(f"node-{n:04d}") for n in range(args.nodes)]
    classes = [device_class()]
    slices = plain_slices(args.nodes)
    print(f"inventory: {args.nodes} nodes x 8 devices, class selector: {CLASS_SELECTOR}")

    # Cold start: build the inventory and evaluate the selectors on every device once.
    start = time.perf_counter()
    inventory = Inventory.build(classes=classes, slices=slices, cache=SelectorCache())
    built = time.perf_counter() - start
    first = place(inventory=inventory, nodes=nodes, claims=[claim("cold")])
    cold = time.perf_counter() - start
    assert isinstance(first, Placement)
    ok = "ok" if cold < 2 else "MISSED"
    print(
        f"{'cold start (build + first selector pass)':<44} {cold:7.3f} s (build {built:.3f} s)  (target < 2 s: {ok})"
    )

    inventory = Inventory.build(classes=classes, slices=slices, cache=inventory.cache)
    placed, seconds = run_placements(inventory, nodes, lambda i: claim(f"plain-{i}"), args.claims)
    report("1-device claims", placed, seconds, 1000)

    inventory = Inventory.build(classes=classes, slices=slices, cache=inventory.cache)
    placed, seconds = run_placements(
        inventory, nodes, lambda i: claim(f"sel-{i}", selectors=(REQUEST_SELECTOR,)), args.claims
    )
    report("1-device claims, request selector (quantity)", placed, seconds, 1000)

    inventory = Inventory.build(classes=classes, slices=slices, cache=inventory.cache)
    placed, seconds = run_placements(
        inventory, nodes, lambda i: claim(f"match-{i}", count=4, match=f"{DRIVER}/numa"), args.claims // 4
    )
    report("4-device claims, matchAttribute numa", placed, seconds, 200)

    part_slices = partitionable_slices(args.nodes)
    inventory = Inventory.build(classes=classes, slices=part_slices, cache=inventory.cache)
    quarter = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("20Gi")) == 0'
    placed, seconds = run_placements(
        inventory, nodes, lambda i: claim(f"part-{i}", selectors=(quarter,)), args.claims
    )
    report("partitionable: 1 quarter-GPU per claim", placed, seconds)

    # Unsatisfiable: 9 devices with one numa value on a node with 8 values x 8 devices.
    wide = plain_slices(1, per_node=64)
    for i, device in enumerate(wide[0]["spec"]["devices"]):
        device["attributes"]["numa"] = {"int": i % 8}
    inventory = Inventory.build(classes=classes, slices=wide, cache=inventory.cache)
    hard = claim("nine", count=9, match=f"{DRIVER}/numa")
    allocate(inventory=inventory, node=Node("node-0000"), claims=[hard])  # warm the selector cache
    start = time.perf_counter()
    outcome = allocate(inventory=inventory, node=Node("node-0000"), claims=[hard])
    elapsed = (time.perf_counter() - start) * 1000
    ok = "ok" if elapsed < 50 else "MISSED"
    print(
        f"{'unsatisfiable 9-device matchAttribute (64 dev)':<44} {elapsed:7.2f} ms -> {type(outcome).__name__}  (target < 50 ms: {ok})"
    )

    # The same node, but the bounds hold and the search must refute: 5 devices with one numa
    # value and pairwise different slots, where every numa value has only 4 slots.
    for i, device in enumerate(wide[0]["spec"]["devices"]):
        device["attributes"]["slot"] = {"int": (i % 8 + (i // 8) % 4) % 8}
    inventory = Inventory.build(classes=classes, slices=wide, cache=inventory.cache)
    tricky = claim("five", count=5, match=f"{DRIVER}/numa")
    tricky["spec"]["devices"]["constraints"].append({"distinctAttribute": f"{DRIVER}/slot"})
    allocate(inventory=inventory, node=Node("node-0000"), claims=[tricky])
    start = time.perf_counter()
    outcome = allocate(inventory=inventory, node=Node("node-0000"), claims=[tricky])
    elapsed = (time.perf_counter() - start) * 1000
    print(
        f"{'unsatisfiable, refuted by search (match+distinct)':<44} {elapsed:7.2f} ms -> {type(outcome).__name__}"
    )

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    print(f"{'peak memory (max RSS of the process)':<44} {peak * scale / 2**20:7.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
