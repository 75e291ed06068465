"""The operator end to end: gated pods with template claims, from creation to un-gated.

Run: ``KUBEBUILDER_ASSETS=$(hack/controlplane.sh) .venv/bin/python benchmarks/operator.py
[--nodes 500] [--devices 8] [--pods 2000]``.

It starts the tests' control plane (etcd + kube-apiserver), installs the CRDs, creates
``--nodes`` Node objects and one ResourceSlice per node with ``--devices`` devices
(directly, no agent), a DeviceClass and a one-device ResourceClaimTemplate, then starts
``draco operator`` as its own process and creates ``--pods`` gated pods, each naming one
claim from the template. Every pod goes the whole way: the lifecycle creates its claim,
the allocation allocates it, pins the pod and removes the gate. A watch on the pods
records when each one is seen un-gated.

Printed: pods/s from the first pod created to the last one un-gated, p50/p99/max latency
per pod (its create call returning to its un-gated event), and the operator's peak
resident memory (``VmHWM`` of its process). Targets: >= 50 pods/s, < 300 MB.
"""

from __future__ import annotations

import sys

# This file is named like the standard library's `operator`; run as a script, its folder
# comes first on sys.path and would shadow that module for every import below.
if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    del sys.path[0]

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.kube.client import (
    DEVICE_CLASSES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    Kube,
    connect,
)
from draco.logs import configure_logging
from draco.tools.dev.controlplane import ControlPlane, find_binaries

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"
DRIVER = "gpu.bench.draco.dev"


async def gather_limited(coroutines: list[Any], *, limit: int = 32) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(coroutine: Any) -> None:
        async with semaphore:
            await coroutine

    await asyncio.gather(*(one(c) for c in coroutines))


async def build_cluster(kube: Kube, *, nodes: int, devices: int) -> None:
    names = [f"node-{i:04d}" for i in range(nodes)]
    await gather_limited(
        [
            kube.create(
                NODES,
                {
                    "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
                    "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
                },
            )
            for n in names
        ]
    )
    # Admission taints new Nodes not-ready; no node controller here will lift it.
    await gather_limited([kube.patch(NODES, n, {"spec": {"taints": None}}) for n in names])
    await kube.create(
        DEVICE_CLASSES,
        {
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )
    await gather_limited(
        [
            kube.create(
                RESOURCE_SLICES,
                {
                    "metadata": {"name": f"{n}-gpu"},
                    "spec": {
                        "driver": DRIVER,
                        "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                        "nodeName": n,
                        "devices": [
                            {
                                "name": f"gpu-{d}",
                                "attributes": {"index": {"int": d}, "model": {"string": "A100"}},
                                "capacity": {"memory": {"value": "80Gi"}},
                            }
                            for d in range(devices)
                        ],
                    },
                },
            )
            for n in names
        ]
    )
    await kube.create(
        RESOURCE_CLAIM_TEMPLATES,
        {
            "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}
            },
        },
    )


def pod_body(index: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"pod-{index:05d}",
            "namespace": NAMESPACE,
            "annotations": {
                CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
            },
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "containers": [
                {"name": "main", "image": "registry.invalid/none", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }


async def watch_ungated(kube: Kube, seen: dict[str, float], *, expected: int, done: asyncio.Event) -> None:
    """Record when each pod is first seen without the gate (raw watch, JSON lines)."""
    resource_version = "0"
    while not done.is_set():
        response = await kube.api.call_api(
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            "GET",
            query_params=[("watch", "true"), ("resourceVersion", resource_version), ("timeoutSeconds", 300)],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=600,
        )
        async for line in response.content:
            event = json.loads(line)
            obj = event.get("object") or {}
            resource_version = (obj.get("metadata") or {}).get("resourceVersion", resource_version)
            gates = (obj.get("spec") or {}).get("schedulingGates") or []
            name = (obj.get("metadata") or {}).get("name")
            if name and name not in seen and not any(g.get("name") == SCHEDULING_GATE for g in gates):
                seen[name] = time.monotonic()
                if len(seen) >= expected:
                    done.set()
                    response.close()
                    return


def start_operator(plane: ControlPlane, log_path: Path, *, level: str) -> subprocess.Popen[bytes]:
    """`draco operator` as its own process, for the benchmark's namespace only."""
    argv = [sys.executable, "-m", "draco.cli", "--log-level", level, "operator", "--namespace", NAMESPACE]
    argv += ["--metrics-port", "0", "--health-port", "0"]
    with log_path.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=plane.env())


def peak_memory_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(plane: ControlPlane, args: argparse.Namespace) -> dict[str, float]:
    kube = await connect()
    try:
        plane.kubectl("create", "namespace", NAMESPACE)
        started = time.monotonic()
        await build_cluster(kube, nodes=args.nodes, devices=args.devices)
        print(f"cluster: {args.nodes} nodes x {args.devices} devices in {time.monotonic() - started:.1f}s")

        log_path = Path(tempfile.mkdtemp(prefix="draco-bench-")) / "operator.log"
        operator = start_operator(plane, log_path, level=args.log_level)
        try:
            ready_by = time.monotonic() + 120
            while "Allocation started" not in log_path.read_text(errors="replace"):
                if operator.poll() is not None or time.monotonic() > ready_by:
                    raise SystemExit(f"operator did not start; see {log_path}")
                await asyncio.sleep(0.2)
            print(f"operator ready; log: {log_path}")

            seen: dict[str, float] = {}
            done = asyncio.Event()
            watcher = asyncio.create_task(watch_ungated(kube, seen, expected=args.pods, done=done))
            created: dict[str, float] = {}

            async def create(index: int) -> None:
                body = pod_body(index)
                await kube.create(PODS, body)
                created[body["metadata"]["name"]] = time.monotonic()

            first = time.monotonic()
            await gather_limited([create(i) for i in range(args.pods)], limit=16)
            creation_s = time.monotonic() - first
            try:
                await asyncio.wait_for(done.wait(), timeout=args.timeout)
            except TimeoutError:
                print(f"timed out: {len(seen)}/{args.pods} pods un-gated after {args.timeout}s")
            watcher.cancel()
            memory = peak_memory_mb(operator.pid)
        finally:
            operator.terminate()
            try:
                operator.wait(20)
            except subprocess.TimeoutExpired:
                operator.kill()
        latencies = sorted(seen[n] - created[n] for n in seen if n in created)
        last = max(seen.values()) if seen else first
        quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
        return {
            "pods": float(len(seen)),
            "creation_s": creation_s,
            "total_s": last - first,
            "pods_per_s": len(seen) / (last - first) if seen else 0.0,
            "p50_s": quantiles[49],
            "p99_s": quantiles[98],
            "max_s": latencies[-1] if latencies else float("nan"),
            "memory_mb": memory,
        }
    finally:
        await kube.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every pod")
    parser.add_argument("--log-level", default="INFO", help="the operator's log level")
    args = parser.parse_args()
    if args.pods > args.nodes * args.devices:
        parser.error("--pods must not exceed --nodes x --devices (every pod needs a device)")
    configure_logging(fmt="text", level="WARNING")
    with ControlPlane(binaries=find_binaries()) as plane:
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        figures = asyncio.run(run(plane, args))
    print(
        f"operator: {int(figures['pods'])}/{args.pods} pods un-gated in {figures['total_s']:.1f}s "
        f"(created in {figures['creation_s']:.1f}s)\n"
        f"  throughput: {figures['pods_per_s']:.1f} pods/s (target >= 50)\n"
        f"  latency per pod: p50 {figures['p50_s'] * 1000:.0f} ms, p99 {figures['p99_s'] * 1000:.0f} ms, "
        f"max {figures['max_s'] * 1000:.0f} ms\n"
        f"  operator peak memory (VmHWM): {figures['memory_mb']:.0f} MB (target < 300)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
