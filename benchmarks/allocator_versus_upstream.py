"""draco's allocator against upstream's Go allocator, case by case, interleaved.

Why: the allocator is the part of draco that replaces kube-scheduler's DRA plugin; its
speed means something next to upstream's (k8s.io/dynamic-resource-allocation v0.37.1,
run by hack/upstream-allocator, built and cached by hack/upstream-allocator.sh).

Run: ``make bench-allocator-versus`` or ``.venv/bin/python benchmarks/allocator_versus_upstream.py
[--rounds 5] [--repeat 200]``.

Each case is one allocation problem on one node (the scheduler's Filter for one node; the
operator's allocation for one candidate). Upstream solves it ``--repeat`` times in its own
process (``"repeat"`` in the JSON line: a fresh allocator each time, one CEL cache kept
across, as kube-scheduler keeps its compiled expressions) and reports each solve's wall
time; draco solves it as often in this process (a fresh ``Inventory`` each time, one
selector cache kept across, as the operator keeps it). Rounds alternate which goes first.
Printed per case: the median time per solve of each, the ratio draco/upstream (median and
min over rounds; below 1 draco is faster), both outcomes, and the machine load. The first
solve of a fresh process is printed apart (imports, compilation).

Cases: plain (1 of 8 devices), a quantity selector, 4 devices with matchAttribute (some
devices taken), partitionable devices (shared counters), consumable capacity (a shared
device's memory), and two unsatisfiable ones: 9 devices with one of 8 values on 64
devices (upstream searches exhaustively) and match + distinct refuted by search.
"""

from __future__ import annotations

import os
import sys

# benchmarks/ holds operator.py, named like the standard library's `operator`.
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]

import argparse
import copy
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from draco.allocator import Allocated, Inventory, Node, SelectorCache, allocate

ROOT = Path(__file__).resolve().parent.parent
DRIVER = "gpu.example.com"
Json = dict[str, Any]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def device_class(selectors: tuple[str, ...] = (f'device.driver == "{DRIVER}"',)) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu", "uid": "class-uid", "generation": 1},
        "spec": {"selectors": [{"cel": {"expression": s}} for s in selectors]},
    }


def gpu(index: int, *, numa: int, memory: str = "80Gi") -> Json:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "index": {"int": index},
            "numa": {"int": numa},
            "model": {"string": "a100"},
            "driverVersion": {"version": "1.2.3"},
        },
        "capacity": {"memory": {"value": memory}},
    }


def node_slice(
    devices: list[Json], *, extra: Json | None = None, name: str = "node-0-gpu", count: int = 1
) -> Json:
    spec: Json = {
        "driver": DRIVER,
        "nodeName": "node-0",
        "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": count},
        "devices": devices,
    }
    spec.update(extra or {})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def claim(
    name: str,
    *,
    count: int = 1,
    selectors: tuple[str, ...] = (),
    constraints: list[Json] | None = None,
    capacity: Json | None = None,
) -> Json:
    exactly: Json = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    devices: Json = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def allocated_claim(name: str, devices: list[str]) -> Json:
    out = claim(name, count=len(devices))
    out["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": d} for d in devices
                ]
            }
        }
    }
    return out


def problem(
    slices: list[Json],
    claims: list[Json],
    *,
    allocated: list[Json] | None = None,
    classes: list[Json] | None = None,
) -> Json:
    return {
        "node": {"name": "node-0", "labels": {"kubernetes.io/hostname": "node-0"}},
        "classes": classes or [device_class()],
        "slices": slices,
        "allocated": allocated or [],
        "claims": claims,
    }


def cases() -> dict[str, tuple[Json, int]]:
    """name -> (problem, repeat divisor: 1 for fast cases, more for slow ones)."""
    eight = [gpu(i, numa=i // 4) for i in range(8)]
    out: dict[str, tuple[Json, int]] = {}
    out["plain"] = (problem([node_slice(eight)], [claim("c")]), 1)
    out["quantity selector"] = (
        problem(
            [node_slice([gpu(i, numa=i // 4, memory="40Gi" if i % 2 else "80Gi") for i in range(8)])],
            [claim("c", selectors=(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("60Gi")) >= 0',))],
        ),
        1,
    )
    out["4-device matchAttribute"] = (
        problem(
            [node_slice(eight)],
            [claim("c", count=4, constraints=[{"matchAttribute": f"{DRIVER}/numa"}])],
            allocated=[allocated_claim("taken", ["gpu-0"])],
        ),
        1,
    )
    counters = [{"name": f"gpu-{g}", "counters": {"memory": {"value": "80Gi"}}} for g in range(2)]
    parts = []
    for g in range(2):
        for size, n in (("80Gi", 1), ("40Gi", 2), ("20Gi", 4)):
            for p in range(n):
                device = gpu(len(parts), numa=g, memory=size)
                device["name"] = f"gpu-{g}-{size.lower()}-{p}"
                device["consumesCounters"] = [
                    {"counterSet": f"gpu-{g}", "counters": {"memory": {"value": size}}}
                ]
                parts.append(device)
    out["partitionable"] = (
        problem(
            [
                node_slice([], extra={"sharedCounters": counters, "devices": None}, name="counters", count=2),
                node_slice(parts, name="devices", count=2),
            ],
            [claim("c", selectors=(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("20Gi")) == 0',))],
            allocated=[allocated_claim("taken", ["gpu-0-80gi-0"])],
        ),
        1,
    )
    shared = []
    for i in range(4):
        device = gpu(i, numa=0)
        device["allowMultipleAllocations"] = True
        device["capacity"]["memory"]["requestPolicy"] = {"default": "10Gi", "validRange": {"min": "1Gi"}}
        shared.append(device)
    out["consumable capacity"] = (
        problem([node_slice(shared)], [claim("c", count=2, capacity={"memory": "30Gi"})]),
        1,
    )
    wide = [gpu(i, numa=i % 8) for i in range(64)]
    out["unsatisfiable 9 of 64, matchAttribute"] = (
        problem(
            [node_slice(wide)], [claim("c", count=9, constraints=[{"matchAttribute": f"{DRIVER}/numa"}])]
        ),
        50,
    )
    slotted = copy.deepcopy(wide)
    for i, device in enumerate(slotted):
        device["attributes"]["slot"] = {"int": (i % 8 + (i // 8) % 4) % 8}
    out["unsatisfiable, match + distinct"] = (
        problem(
            [node_slice(slotted)],
            [
                claim(
                    "c",
                    count=5,
                    constraints=[
                        {"matchAttribute": f"{DRIVER}/numa"},
                        {"distinctAttribute": f"{DRIVER}/slot"},
                    ],
                )
            ],
        ),
        50,
    )
    for prob, _ in out.values():
        for slice_ in prob["slices"]:
            if slice_["spec"].get("devices") is None:
                slice_["spec"].pop("devices", None)
    return out


class Upstream:
    def __init__(self, binary: str) -> None:
        self.process = subprocess.Popen(
            [binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def bench(self, prob: Json, repeat: int) -> tuple[str, list[float]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({**prob, "id": "b", "repeat": repeat}) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if answer["outcome"] == "error":
            raise SystemExit(f"upstream: {answer.get('error')}")
        return answer["outcome"], [n / 1e9 for n in answer["nanos"]]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


def draco_bench(
    prob: Json, repeat: int, cache: SelectorCache, *, inventory: Inventory | None = None
) -> tuple[str, list[float]]:
    """Solve `repeat` times; with `inventory`, reuse it (the operator's view keeps one up to
    date instead of building it per pod), else build one per solve."""
    node = Node(prob["node"]["name"], dict(prob["node"]["labels"]))
    times = []
    kind = ""
    for _ in range(repeat):
        claims = copy.deepcopy(prob["claims"])
        started = time.perf_counter()
        current = inventory or Inventory.build(
            classes=prob["classes"], slices=prob["slices"], allocated_claims=prob["allocated"], cache=cache
        )
        out = allocate(inventory=current, node=node, claims=claims)
        times.append(time.perf_counter() - started)
        kind = "allocated" if isinstance(out, Allocated) else "unfit"
    return kind, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=200, help="solves per round of a fast case")
    parser.add_argument("--case", action="append", help="only these cases (substring match)")
    args = parser.parse_args()
    built = subprocess.run(
        [str(ROOT / "hack" / "upstream-allocator.sh")], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise SystemExit(f"hack/upstream-allocator.sh failed:\n{built.stderr[-3000:]}")
    binary = built.stdout.strip().splitlines()[-1]
    all_cases = cases()
    selected = {n: c for n, c in all_cases.items() if not args.case or any(s in n for s in args.case)}

    # First solve in a fresh process each: imports and compilation included.
    first_case = all_cases["plain"][0]
    started = time.perf_counter()
    upstream = Upstream(binary)
    upstream.bench(first_case, 1)
    upstream_first = time.perf_counter() - started
    upstream.close()
    started = time.perf_counter()
    cold = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json,sys; sys.path.insert(0, sys.argv[1]); "
            "from allocator_versus_upstream import draco_bench, cases, SelectorCache; "
            "draco_bench(cases()['plain'][0], 1, SelectorCache())",
            _HERE,
        ],
        check=False,
    )
    draco_first = time.perf_counter() - started
    print(
        f"first solve in a fresh process (start + imports + compile): draco {draco_first * 1000:.0f} ms"
        f"{'' if cold.returncode == 0 else ' (failed)'}, upstream {upstream_first * 1000:.0f} ms ({load()})\n"
    )

    upstream = Upstream(binary)
    print(
        f"{'case':<38} {'draco':>9} {'upstream':>9} {'ratio med':>9} {'min':>6} | "
        f"{'draco alloc':>11} {'ratio med':>9} {'min':>6}  outcomes  load"
    )
    try:
        for name, (prob, divisor) in selected.items():
            repeat = max(1, args.repeat // divisor)
            cache = SelectorCache()
            draco_bench(prob, 1, cache)  # warm: the operator's cache outlives one pod
            upstream.bench(prob, 1)
            inventory = Inventory.build(
                classes=prob["classes"],
                slices=prob["slices"],
                allocated_claims=prob["allocated"],
                cache=cache,
            )
            ratios, alloc_ratios, mine, alloc, theirs = [], [], [], [], []
            kinds: tuple[str, str] = ("", "")
            for round_ in range(args.rounds):
                if round_ % 2 == 0:
                    dk, dt = draco_bench(prob, repeat, cache)
                    _, at = draco_bench(prob, repeat, cache, inventory=inventory)
                    uk, ut = upstream.bench(prob, repeat)
                else:
                    uk, ut = upstream.bench(prob, repeat)
                    _, at = draco_bench(prob, repeat, cache, inventory=inventory)
                    dk, dt = draco_bench(prob, repeat, cache)
                d, a, u = statistics.median(dt), statistics.median(at), statistics.median(ut)
                mine.append(d)
                alloc.append(a)
                theirs.append(u)
                ratios.append(d / u)
                alloc_ratios.append(a / u)
                kinds = (dk, uk)
            print(
                f"{name:<38} {statistics.median(mine) * 1000:7.3f}ms {statistics.median(theirs) * 1000:7.3f}ms "
                f"{statistics.median(ratios):9.3f} {min(ratios):6.3f} | {statistics.median(alloc) * 1000:9.3f}ms "
                f"{statistics.median(alloc_ratios):9.3f} {min(alloc_ratios):6.3f}  {kinds[0]}/{kinds[1]}"
                f"{'' if kinds[0] == kinds[1] else ' DIFFER'}  {load()}",
                flush=True,
            )
    finally:
        upstream.close()
    print(
        "\nratio = draco time / upstream time per solve (below 1: draco faster), median and min over rounds;"
        "\ndraco = Inventory.build + allocate per solve; draco alloc = allocate on a kept inventory (the"
        "\noperator's view); upstream = NewAllocator + Allocate per solve, CEL compile cache kept"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
