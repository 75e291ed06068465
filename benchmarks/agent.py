"""Node agent: publishing many simulated nodes, and prepare/unprepare latency per claim.

Run: ``KUBEBUILDER_ASSETS=$(hack/controlplane.sh) .venv/bin/python benchmarks/agent.py
[--nodes 500] [--devices 8] [--claims 50]``.

It starts the tests' control plane (etcd + kube-apiserver), installs the CRDs and runs the
agent in this process on fake devices:

1. publish: one agent for `--nodes` nodes x `--devices` devices, from start until every
   pool is written (Node objects are created first and timed on their own);
2. prepare/unprepare: claims allocated one at a time (the allocation written into the
   claim status, as the operator does), timed from the status write until the claim shows
   `Ready` in `status.devices`, then deallocated and timed until the agent's checkpoint has
   let go of it. The agent's own view (files + status write) is its
   `draco_agent_prepare_claim_duration_seconds` histogram.
"""

from __future__ import annotations

import os
import sys

# Python puts this script's folder first on the path, where benchmarks/operator.py would
# shadow the standard `operator` module; take the folder off again (os.path only).
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from draco.agent.drivers.fake import load_fake_drivers
from draco.agent.main import Agent, AgentConfig
from draco.agent.nodes import ensure_node
from draco.agent.publisher import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from draco.kube.client import NAMESPACES, RESOURCE_CLAIMS, RESOURCE_SLICES, connect
from draco.logs import configure_logging
from draco.runtime.metrics import REGISTRY
from draco.tools.dev.controlplane import ControlPlane, find_binaries

ROOT = Path(__file__).resolve().parent.parent

DEVICES = """
name: gpu.draco.dev
cdiClass: gpu
devices:
- name: gpu-{{index}}
  count: {count}
  attributes:
    model: A100
    index: {{int: "{{index}}"}}
    uuid: "gpu-{{index}}"
    driverVersion: {{version: 550.54.15}}
  capacity: {{memory: 80Gi}}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


async def wait_until(predicate: Any, *, interval: float = 0.005, attempts: int = 6000) -> None:
    """Poll the API (what a user of the claim would see), not the agent's memory."""
    for _ in range(attempts):
        if await predicate():
            return
        await asyncio.sleep(interval)
    raise TimeoutError("benchmark condition not reached")


async def publish(args: argparse.Namespace, work: Path) -> None:
    config_path = work / "devices.yaml"
    config_path.write_text(DEVICES.format(count=args.devices))
    drivers, watcher = load_fake_drivers(config_path)
    kube = await connect(field_manager="draco-agent")
    nodes = [f"bench-{i}" for i in range(args.nodes)]
    try:
        started = time.perf_counter()
        limit = asyncio.Semaphore(16)  # the API server answers 429 past its in-flight limit

        async def create(name: str) -> None:
            async with limit:
                await ensure_node(kube, name, labels={})

        await asyncio.gather(*(create(n) for n in nodes))
        created = time.perf_counter() - started
        print(f"create {args.nodes} Node objects: {created:.2f} s")

        agent = Agent(
            AgentConfig(
                nodes=nodes,
                drivers=drivers,
                cdi_dir=work / "cdi",
                state_dir=work / "state",
                workers=args.workers,
            ),
            kube=kube,
        )
        started = time.perf_counter()
        task = asyncio.create_task(agent.run())
        await agent.wait_synced()
        took = time.perf_counter() - started
        listed = await kube.list(RESOURCE_SLICES, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
        mine = [s for s in listed if s["spec"]["nodeName"].startswith("bench-")]
        devices = sum(len(s["spec"].get("devices") or []) for s in mine)
        print(
            f"publish {args.nodes} nodes x {args.devices} devices: {took:.2f} s "
            f"({args.nodes / took:.0f} pools/s; {len(mine)} slices, {devices} devices)"
        )

        started = time.perf_counter()
        config_path.write_text(DEVICES.format(count=args.devices).replace("A100", "H100"))
        watcher.reload()
        agent.resync_pools()
        await agent.wait_synced()
        print(
            f"republish all pools after a device change (new generation): {time.perf_counter() - started:.2f} s"
        )
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        await kube.close()


async def prepare_latency(args: argparse.Namespace, work: Path) -> None:
    config_path = work / "devices-1.yaml"
    config_path.write_text(DEVICES.format(count=8))
    drivers, _ = load_fake_drivers(config_path)
    kube = await connect(field_manager="draco-agent")
    node = "bench-prepare"
    agent = Agent(
        AgentConfig(nodes=[node], drivers=drivers, cdi_dir=work / "cdi-1", state_dir=work / "state-1"),
        kube=kube,
    )
    task = asyncio.create_task(agent.run())
    await agent.wait_synced()
    await kube.create(NAMESPACES, {"metadata": {"name": "bench"}})
    preparer = agent.preparers[node]
    prepare_s: list[float] = []
    unprepare_s: list[float] = []
    try:
        for i in range(args.claims):
            name = f"claim-{i}"
            body = {
                "apiVersion": "resource.draco.dev/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "bench"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
            }
            created = await kube.create(RESOURCE_CLAIMS, body)
            uid = created["metadata"]["uid"]
            allocation = {
                "status": {
                    "nodeName": node,
                    "allocation": {
                        "devices": {
                            "results": [
                                {
                                    "request": "gpu",
                                    "driver": "gpu.draco.dev",
                                    "pool": node,
                                    "device": f"gpu-{i % 8}",
                                }
                            ]
                        }
                    },
                }
            }

            async def ready(name: str = name) -> bool:
                claim = await kube.get(RESOURCE_CLAIMS, name, namespace="bench")
                entries = (claim.get("status") or {}).get("devices") or []
                return any(
                    c["type"] == "Ready" and c["status"] == "True" for e in entries for c in e["conditions"]
                )

            started = time.perf_counter()
            # As the operator writes an allocation: with the node the agent selects on.
            await kube.patch(RESOURCE_CLAIMS, name, allocation, namespace="bench", subresource="status")
            await wait_until(ready)
            prepare_s.append(time.perf_counter() - started)

            started = time.perf_counter()
            await kube.patch(
                RESOURCE_CLAIMS,
                name,
                {"status": {"allocation": None, "devices": None, "nodeName": None}},
                namespace="bench",
                subresource="status",
            )

            async def released(uid: str = uid) -> bool:
                return uid not in preparer.prepared_uids()

            await wait_until(released)
            unprepare_s.append(time.perf_counter() - started)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.close()
    for label, values in (
        ("prepare (allocation written -> Ready seen)", prepare_s),
        ("unprepare (deallocated -> files gone)", unprepare_s),
    ):
        print(
            f"{label}: n={len(values)} p50 {ms(statistics.median(values))} "
            f"p95 {ms(percentile(values, 0.95))} max {ms(max(values))}"
        )
    samples = {
        sample.name: sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.labels.get("result") == "success"
    }
    total = samples.get("draco_agent_prepare_claim_duration_seconds_sum", 0.0)
    count = samples.get("draco_agent_prepare_claim_duration_seconds_count", 0.0)
    if count:
        print(f"agent-side prepare (files + status write): mean {ms(total / count)} over {int(count)} claims")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="draco-bench-agent-") as tmp:
        work = Path(tmp)
        await publish(args, work)
        await prepare_latency(args, work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--claims", type=int, default=50)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    configure_logging(fmt="text", level="WARNING")
    with ControlPlane(binaries=find_binaries()) as plane:
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
