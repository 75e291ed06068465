"""The claim lifecycle alone, at scale: claims created for N pods, then cleaned up after them.

Run: ``KUBEBUILDER_ASSETS=$(hack/controlplane.sh) .venv/bin/python benchmarks/lifecycle.py
[--pods 1000]``.

It starts the tests' control plane, a DeviceClass, a template and one shared user claim,
then ``draco operator`` as its own process, and creates ``--pods`` pods
(un-gated, so no allocation runs) that each name a template claim and the shared claim.

Printed, from the API's point of view (polling LISTs):
- create: pods/s from the first pod created until every pod has its claim recorded;
- teardown: every generated claim and the shared claim get "allocated" and reserved (as
  the scheduler would), all pods are marked Succeeded, and the time until every generated
  claim is deleted and the shared claim is deallocated with its finalizer removed;
- the operator's peak resident memory (VmHWM).
"""

from __future__ import annotations

import sys

# benchmarks/operator.py is named like the standard library's `operator`; run as a script,
# this folder comes first on sys.path and would shadow that module for every import below.
if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    del sys.path[0]

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from draco.api.constants import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION, FINALIZER
from draco.kube.client import (
    DEVICE_CLASSES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    Kube,
    connect,
)
from draco.logs import configure_logging
from draco.tools.dev.controlplane import ControlPlane, find_binaries

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "bench-lifecycle"
CLASS = "gpu.bench-lifecycle.draco.dev"


async def limited(coroutines: list[Any], *, limit: int = 32) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(coroutine: Any) -> None:
        async with semaphore:
            await coroutine

    await asyncio.gather(*(one(c) for c in coroutines))


def pod_body(index: int) -> dict[str, Any]:
    claims = [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
        {"name": "shared", "resourceClaimName": "shared"},
    ]
    return {
        "metadata": {"name": f"worker-{index:05d}", "annotations": {CLAIMS_ANNOTATION: json.dumps(claims)}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


def allocation(device: str) -> dict[str, Any]:
    return {"devices": {"results": [{"request": "gpu", "driver": CLASS, "pool": "node", "device": device}]}}


async def until(predicate: Any, *, limit_s: float, interval: float = 0.25) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if await predicate():
            return time.monotonic() - started
        await asyncio.sleep(interval)
    raise SystemExit(f"timed out after {limit_s}s")


async def reserve(kube: Kube, claim: dict[str, Any], pods: list[dict[str, Any]], device: str) -> None:
    claim["metadata"]["finalizers"] = [FINALIZER]
    claim = await kube.replace(RESOURCE_CLAIMS, claim)
    claim["status"] = {
        "allocation": allocation(device),
        "reservedFor": [
            {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods
        ],
    }
    await kube.replace_status(RESOURCE_CLAIMS, claim)


def start_operator(plane: ControlPlane, log_path: Path) -> subprocess.Popen[bytes]:
    argv = [str(ROOT / ".venv/bin/python"), "-m", "draco.cli", "operator", "--namespace", NAMESPACE]
    argv += ["--metrics-port", "0", "--health-port", "0"]
    with log_path.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=plane.env())


def peak_memory_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def run(plane: ControlPlane, pods: int, operator: subprocess.Popen[bytes]) -> None:
    os.environ["KUBECONFIG"] = str(plane.kubeconfig)
    kube = await connect()
    class_body = {
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{CLASS}"'}}]},
    }
    await kube.create(DEVICE_CLASSES, class_body)
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}}
    await kube.create(
        RESOURCE_CLAIM_TEMPLATES,
        {"metadata": {"name": "one-gpu"}, "spec": {"spec": spec}},
        namespace=NAMESPACE,
    )
    await kube.create(RESOURCE_CLAIMS, {"metadata": {"name": "shared"}, "spec": spec}, namespace=NAMESPACE)
    try:
        await asyncio.sleep(3)
        started = time.monotonic()
        await limited([kube.create(PODS, pod_body(i), namespace=NAMESPACE) for i in range(pods)])
        created_in = time.monotonic() - started

        async def all_recorded() -> bool:
            listed = await kube.list(PODS, namespace=NAMESPACE)
            return (
                sum(CLAIM_STATUSES_ANNOTATION in (p["metadata"].get("annotations") or {}) for p in listed)
                == pods
            )

        await until(all_recorded, limit_s=600)
        recorded_in = time.monotonic() - started
        print(
            f"create:   {pods} pods created in {created_in:.1f}s; all claims recorded after {recorded_in:.1f}s "
            f"({pods / recorded_in:.0f} pods/s)"
        )

        live = {p["metadata"]["name"]: p for p in await kube.list(PODS, namespace=NAMESPACE)}
        claims = await kube.list(RESOURCE_CLAIMS, namespace=NAMESPACE)
        shared = next(c for c in claims if c["metadata"]["name"] == "shared")
        generated = [c for c in claims if c["metadata"]["name"] != "shared"]
        owners = {c["metadata"]["name"]: c["metadata"]["ownerReferences"][0]["name"] for c in generated}
        await limited(
            [
                reserve(kube, c, [live[owners[c["metadata"]["name"]]]], f"d{i}")
                for i, c in enumerate(generated)
            ]
        )
        await reserve(kube, shared, list(live.values())[:256], "shared")

        started = time.monotonic()
        await limited(
            [
                kube.patch(
                    PODS, name, {"status": {"phase": "Succeeded"}}, namespace=NAMESPACE, subresource="status"
                )
                for name in live
            ]
        )
        marked_in = time.monotonic() - started

        async def all_cleaned() -> bool:
            remaining = await kube.list(RESOURCE_CLAIMS, namespace=NAMESPACE)
            if len(remaining) != 1:
                return False
            last = remaining[0]
            return not (last.get("status") or {}).get("allocation") and not last["metadata"].get("finalizers")

        await until(all_cleaned, limit_s=600)
        cleaned_in = time.monotonic() - started
        print(
            f"teardown: {pods} pods marked done in {marked_in:.1f}s; {len(generated)} claims deleted and the shared "
            f"claim deallocated after {cleaned_in:.1f}s ({pods / cleaned_in:.0f} pods/s)"
        )
        print(f"memory:   operator peak RSS {peak_memory_mb(operator.pid):.0f} MB")
    finally:
        await kube.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
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
                asyncio.run(run(plane, args.pods, operator))
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
