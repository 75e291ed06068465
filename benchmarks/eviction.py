"""Device-taint eviction at scale: a NoExecute rule over 1,000 running pods, and the cost of
a rule change with 10,000 allocated claims.

Run: ``KUBEBUILDER_ASSETS=$(hack/controlplane.sh) .venv/bin/python benchmarks/eviction.py
[--pods 1000] [--claims 10000] [--changes 5]``.

It starts the tests' control plane and ``draco operator`` as its own process.

1. ``--pods`` running pods: bound pods (``spec.nodeName`` set at creation), each using a
   user claim allocated to a device of its own and reserved for it; devices published in
   ResourceSlices of 10 pools. Then one NoExecute DeviceTaintRule selecting the driver is
   created. Printed: the time from the rule's creation until the last pod has been
   deleted (has a deletionTimestamp: there is no kubelet to finish the deletion), the
   rule's final condition, and the operator's memory.
2. ``--claims`` more allocated claims (no pods). A NoExecute rule selecting no device in
   use is changed ``--changes`` times (its ``timeAdded``, a spec change: every allocated
   claim is re-evaluated, as upstream): printed, the time from each change until the
   rule's condition shows the new generation. The pure part's own cost for the same
   change (``EvictionState.on_rule`` with the same number of claims, in this process),
   and the `None` effect's simulation over every claim, are printed beside it.

The machine's load (``os.getloadavg()``) is printed with the figures: they mean little
on a busy machine.
"""

from __future__ import annotations

import sys

# benchmarks/operator.py is named like the standard library's `operator`; run as a script,
# this folder comes first on sys.path and would shadow that module for every import below.
if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    del sys.path[0]

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from draco.api.constants import CLAIMS_ANNOTATION
from draco.kube.client import DEVICE_TAINT_RULES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Kube, connect
from draco.logs import configure_logging
from draco.scheduling.eviction import EvictionState
from draco.tools.dev.controlplane import ControlPlane, find_binaries

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "bench-eviction"
DRIVER = "gpu.bench-eviction.draco.dev"
IDLE_DRIVER = "idle.bench-eviction.draco.dev"
POOLS = 10
PER_SLICE = 100


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}/{fifteen:.1f} on {os.cpu_count()} CPUs"


def now_stamp(offset_s: int = 0) -> str:
    return stamp(datetime.datetime.now(datetime.UTC), offset_s)


def stamp(base: datetime.datetime, offset_s: int = 0) -> str:
    return (base + datetime.timedelta(seconds=offset_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def limited(coroutines: list[Any], *, limit: int = 32) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(coroutine: Any) -> None:
        async with semaphore:
            await coroutine

    await asyncio.gather(*(one(c) for c in coroutines))


async def until(predicate: Any, *, limit_s: float, interval: float = 0.25) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if await predicate():
            return time.monotonic() - started
        await asyncio.sleep(interval)
    raise SystemExit(f"timed out after {limit_s}s")


def slices(driver: str, devices: int) -> list[dict[str, Any]]:
    bodies = []
    for index in range(0, devices, PER_SLICE):
        pool = f"node-{(index // PER_SLICE) % POOLS}"
        names = [f"d{i}" for i in range(index, min(index + PER_SLICE, devices))]
        bodies.append(
            {
                "metadata": {"name": f"{driver}-{index // PER_SLICE}"},
                "spec": {
                    "driver": driver,
                    "pool": {
                        "name": pool,
                        "generation": 1,
                        "resourceSliceCount": devices // PER_SLICE // POOLS or 1,
                    },
                    "nodeName": pool,
                    "devices": [{"name": name} for name in names],
                },
            }
        )
    return bodies


def device_of(driver: str, index: int) -> tuple[str, str]:
    return (f"node-{(index // PER_SLICE) % POOLS}", f"d{index}")


def claim_body(name: str) -> dict[str, Any]:
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "unused"}}]}}
    return {"metadata": {"name": name}, "spec": spec}


async def allocated_claim(
    kube: Kube, name: str, *, driver: str, index: int, pod: dict[str, Any] | None
) -> dict[str, Any]:
    claim = await kube.create(RESOURCE_CLAIMS, claim_body(name), namespace=NAMESPACE)
    pool, device = device_of(driver, index)
    claim["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": driver, "pool": pool, "device": device}]},
        }
    }
    if pod is not None:
        claim["status"]["reservedFor"] = [
            {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        ]
    result: dict[str, Any] = await kube.replace_status(RESOURCE_CLAIMS, claim)
    return result


async def running_pod(kube: Kube, index: int) -> None:
    name = f"worker-{index:05d}"
    body = {
        "metadata": {
            "name": name,
            "annotations": {CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimName": name}])},
        },
        "spec": {
            "nodeName": device_of(DRIVER, index)[0],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    pod = await kube.create(PODS, body, namespace=NAMESPACE)
    await allocated_claim(kube, name, driver=DRIVER, index=index, pod=pod)


def rule_body(
    name: str, driver: str, *, device: str | None = None, time_added: str | None = None
) -> dict[str, Any]:
    selector = {"driver": driver} | ({"device": device} if device else {})
    return {
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": selector,
            "taint": {"key": "bench/drain", "effect": "NoExecute", "timeAdded": time_added or now_stamp()},
        },
    }


def memory_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of `pid` in MB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def condition(rule: dict[str, Any]) -> dict[str, Any]:
    for found in (rule.get("status") or {}).get("conditions") or []:
        if found.get("type") == "EvictionInProgress":
            return dict(found)
    return {}


async def evict_running(kube: Kube, pods: int, operator: subprocess.Popen[bytes]) -> None:
    await limited([kube.create(RESOURCE_SLICES, body) for body in slices(DRIVER, pods)])
    started = time.monotonic()
    await limited([running_pod(kube, i) for i in range(pods)])
    print(
        f"setup:    {pods} running pods with allocated, reserved claims in {time.monotonic() - started:.1f}s"
    )

    async def operator_knows() -> bool:
        # The operator has seen everything once a None rule's simulation counts every pod.
        rule = await kube.get_or_none(DEVICE_TAINT_RULES, "bench-preview")
        return rule is not None and f"{pods} pods would be evicted" in condition(rule).get("message", "")

    preview = rule_body("bench-preview", DRIVER)
    preview["spec"]["taint"]["effect"] = "None"
    started = time.monotonic()
    await kube.create(DEVICE_TAINT_RULES, preview)
    seen_in = await until(operator_knows, limit_s=900)
    print(f"preview:  a None rule showed all {pods} pods that would be evicted after {seen_in:.1f}s")
    await kube.delete(DEVICE_TAINT_RULES, "bench-preview")
    rss, peak = memory_mb(operator.pid)
    print(f"memory:   operator before the eviction: RSS {rss:.0f} MB, peak {peak:.0f} MB ({load()})")

    async def all_deleted() -> bool:
        listed = await kube.list(PODS, namespace=NAMESPACE)
        return sum(bool(p["metadata"].get("deletionTimestamp")) for p in listed) == pods

    started = time.monotonic()
    await kube.create(DEVICE_TAINT_RULES, rule_body("bench-drain", DRIVER))
    took = await until(all_deleted, limit_s=900)
    rss, peak = memory_mb(operator.pid)
    print(
        f"evict:    NoExecute rule over {pods} running pods: last pod deleted {took:.1f}s after the rule was "
        f"created ({pods / took:.0f} pods/s; {load()})"
    )
    print(f"memory:   operator after the eviction: RSS {rss:.0f} MB, peak {peak:.0f} MB")

    async def completed() -> bool:
        return condition(await kube.get(DEVICE_TAINT_RULES, "bench-drain")).get("reason") == "Completed"

    await until(completed, limit_s=120)
    final = condition(await kube.get(DEVICE_TAINT_RULES, "bench-drain"))
    print(f"status:   {final.get('reason')}: {final.get('message')}")
    await kube.delete(DEVICE_TAINT_RULES, "bench-drain")


async def rule_changes(kube: Kube, claims: int, changes: int, operator: subprocess.Popen[bytes]) -> None:
    await limited([kube.create(RESOURCE_SLICES, body) for body in slices(IDLE_DRIVER, claims)])
    started = time.monotonic()
    created: list[dict[str, Any]] = []

    async def one(index: int) -> None:
        created.append(
            await allocated_claim(kube, f"idle-{index:05d}", driver=IDLE_DRIVER, index=index, pod=None)
        )

    await limited([one(i) for i in range(claims)])
    print(f"setup:    {claims} more allocated claims in {time.monotonic() - started:.1f}s")

    rule = await kube.create(DEVICE_TAINT_RULES, rule_body("bench-change", IDLE_DRIVER, device="none-such"))

    async def observed(generation: int) -> bool:
        found = await kube.get(DEVICE_TAINT_RULES, "bench-change")
        return condition(found).get("observedGeneration") == generation

    await until(lambda: observed(rule["metadata"]["generation"]), limit_s=300)
    took: list[float] = []
    base = datetime.datetime.now(datetime.UTC)
    for change in range(changes):
        # A distinct timeAdded each time (computed from a fixed base: a no-op patch would
        # not bump the generation).
        body = rule_body(
            "bench-change", IDLE_DRIVER, device="none-such", time_added=stamp(base, -60 * change - 60)
        )
        started = time.monotonic()
        changed = await kube.patch(DEVICE_TAINT_RULES, "bench-change", {"spec": body["spec"]})
        generation = changed["metadata"]["generation"]
        assert generation > rule["metadata"]["generation"] + change, "the patch changed nothing"
        await until(lambda generation=generation: observed(generation), limit_s=300, interval=0.05)
        took.append(time.monotonic() - started)
    rss, peak = memory_mb(operator.pid)
    print(
        f"change:   rule spec change with {claims} idle allocated claims known to the operator: status "
        f"shows the new generation after {min(took):.2f}s min / {sorted(took)[len(took) // 2]:.2f}s median / "
        f"{max(took):.2f}s max over {changes} changes ({load()})"
    )
    print(f"memory:   operator: RSS {rss:.0f} MB, peak {peak:.0f} MB")

    # The pure part alone, in this process: the same claims, the same rule change.
    state = EvictionState()
    for body in slices(IDLE_DRIVER, claims):
        state.on_slice(body, deleted=False)
    for claim in created:
        state.on_claim(claim, deleted=False)
    state.on_rule(rule, deleted=False)
    timings = []
    for change in range(changes):
        body = rule_body(
            "bench-change", IDLE_DRIVER, device="none-such", time_added=stamp(base, -60 * change - 3600)
        )
        body["metadata"] = dict(rule["metadata"], generation=rule["metadata"]["generation"] + change + 1)
        started = time.perf_counter()
        state.on_rule(body, deleted=False)
        timings.append(time.perf_counter() - started)
    every = rule_body("bench-sim", IDLE_DRIVER)
    every["spec"]["taint"]["effect"] = "None"
    every["metadata"]["uid"] = "sim"
    state.on_rule(every, deleted=False)
    started = time.perf_counter()
    simulation = state.simulate(state.rules["bench-sim"])
    simulated = time.perf_counter() - started
    print(
        f"pure:     EvictionState.on_rule over {len(state.claims)} claims: {min(timings) * 1000:.0f} ms min / "
        f"{max(timings) * 1000:.0f} ms max; None-rule simulation over {simulation.allocated_devices} allocated "
        f"devices: {simulated * 1000:.0f} ms ({load()})"
    )


async def run(plane: ControlPlane, args: argparse.Namespace, operator: subprocess.Popen[bytes]) -> None:
    os.environ["KUBECONFIG"] = str(plane.kubeconfig)
    kube = await connect()
    try:
        print(f"start:    {load()}")
        if args.pods:
            await evict_running(kube, args.pods, operator)
        if args.claims:
            await rule_changes(kube, args.claims, args.changes, operator)
    finally:
        await kube.close()


def start_operator(plane: ControlPlane, log_path: Path) -> subprocess.Popen[bytes]:
    argv = [str(ROOT / ".venv/bin/python"), "-m", "draco.cli", "operator", "--namespace", NAMESPACE]
    argv += ["--metrics-port", "0", "--health-port", "0"]
    with log_path.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=plane.env())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000, help="running pods evicted by one rule (0: skip)")
    parser.add_argument("--claims", type=int, default=10000, help="idle allocated claims (0: skip)")
    parser.add_argument("--changes", type=int, default=5, help="rule changes timed")
    args = parser.parse_args()
    configure_logging(fmt="text", level="WARNING")
    plane = ControlPlane(binaries=find_binaries()).start()
    try:
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        plane.kubectl("create", "namespace", NAMESPACE)
        with tempfile.TemporaryDirectory() as folder:
            log_path = Path(folder) / "operator.log"
            operator = start_operator(plane, log_path)
            try:
                asyncio.run(run(plane, args, operator))
            except BaseException:
                print(log_path.read_text()[-4000:])
                raise
            finally:
                operator.terminate()
                operator.wait(30)
    finally:
        plane.stop()


if __name__ == "__main__":
    main()
