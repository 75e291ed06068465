"""kube-apiserver's CPU per write, shape by shape: what one claim status write, pod pin or
Event costs the API server when it is a PUT of the whole object, a merge patch of what
changes, or a server-side apply.

Why: on one machine draco and upstream both saturate kube-apiserver, and on a real cluster
its CPU is what the control plane pays per pod (issue #50). `versus_upstream.py` measures
whole runs, whose figures move with the machine's load; this measures one request shape at
a time on one idle kube-apiserver, from ``/proc/<pid>/stat`` (its user + system CPU over a
batch of writes, divided by their number), the shapes interleaved in batches so that drift
in the machine's load falls on all of them alike.

Each shape writes the same change to fresh objects of its own (a claim allocated and
reserved for a pod, as draco's allocation writes it), sequentially, one client.

Run: ``.venv/bin/python benchmarks/write_shapes.py [--objects 300] [--rounds 4]`` (the
control-plane binaries of ``hack/controlplane.sh``). Prints CPU ms per request per shape
(median over rounds, min-max beside), the body bytes each sent, and the load.
"""

from __future__ import annotations

import sys

if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    del sys.path[0]

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draco.api import summarize_claim_status
from draco.kube.client import RESOURCE_CLAIMS, Kube, Resource, connect
from draco.logs import configure_logging
from draco.tools.dev.components import NATIVE_CLAIMS
from draco.tools.dev.controlplane import ControlPlane, find_binaries

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "shapes"
CLK_TCK = os.sysconf("SC_CLK_TCK")
Obj = dict[str, Any]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:13]) / CLK_TCK


def claim_body(index: int, shape: str, round_: int) -> Obj:
    uid = f"00000000-0000-0000-0000-{index:012d}"
    return {
        "metadata": {
            "name": f"{shape}-{round_}-{index}",
            "namespace": NAMESPACE,
            "annotations": {"resource.draco.dev/pod-claim-name": "gpu"},
            "finalizers": ["resource.draco.dev/delete-protection"],
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": f"pod-{index}",
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }


def allocated_status(index: int) -> Obj:
    node = f"node-{index % 100:04d}"
    status: Obj = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.bench.draco.dev", "pool": node, "device": "gpu-0"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "nodeName": node,
        "reservedFor": [
            {"resource": "pods", "name": f"pod-{index}", "uid": f"00000000-0000-0000-0000-{index:012d}"}
        ],
    }
    return dict(summarize_claim_status(status, deleting=False))  # type: ignore[arg-type]


def start_profile(plane: ControlPlane, path: Path, *, seconds: int) -> subprocess.Popen[bytes]:
    """kube-apiserver's Go CPU profile over the next `seconds` (``go tool pprof -top``)."""
    with path.open("wb") as out:
        return subprocess.Popen(
            [
                str(plane.binaries / "kubectl"),
                f"--kubeconfig={plane.kubeconfig}",
                "get",
                "--raw",
                f"/debug/pprof/profile?seconds={seconds}",
            ],
            stdout=out,
        )


async def put_status(kube: Kube, resource: Resource, claim: Obj, status: Obj) -> Any:
    meta = {k: v for k, v in claim["metadata"].items() if k != "managedFields"}
    return await kube.replace_status(resource, {**claim, "metadata": meta, "status": status})


async def put_status_only(kube: Kube, resource: Resource, claim: Obj, status: Obj) -> Any:
    meta = claim["metadata"]
    identity = {k: meta[k] for k in ("name", "namespace", "resourceVersion")}
    body = {"apiVersion": claim["apiVersion"], "kind": claim["kind"], "metadata": identity, "status": status}
    return await kube.replace_status(resource, body)


async def patch_status(kube: Kube, resource: Resource, claim: Obj, status: Obj) -> Any:
    # The claim has no status yet: the merge patch of the change is the whole new status.
    patch = {"metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]}, "status": status}
    meta = claim["metadata"]
    return await kube.patch(resource, meta["name"], patch, namespace=meta["namespace"], subresource="status")


@dataclass(frozen=True)
class Shape:
    """A claim status write of one shape, on claims of ``resource`` (their creates are
    measured too, as "POST" of that resource)."""

    resource: Resource
    write: Callable[[Kube, Resource, Obj, Obj], Awaitable[Any]]
    #: The status the write carries: draco's with its printer-column summary, upstream's without.
    summary: bool = True


SHAPES: dict[str, Shape] = {
    "draco: PUT status, whole object (what draco sends)": Shape(RESOURCE_CLAIMS, put_status),
    "draco: PATCH status, merge patch + resourceVersion": Shape(RESOURCE_CLAIMS, patch_status),
    "draco: PUT status, status + name/namespace/rv only": Shape(RESOURCE_CLAIMS, put_status_only),
    "native resource.k8s.io: PUT status, whole object": Shape(NATIVE_CLAIMS, put_status, summary=False),
}


def status_for(index: int, shape: Shape) -> Obj:
    status = allocated_status(index)
    if not shape.summary:
        for key in ("state", "allocatedDevices", "nodeName"):
            status.pop(key, None)
    return status


async def main_async(args: argparse.Namespace) -> None:
    configure_logging(fmt="text", level="WARNING")
    with ControlPlane(binaries=find_binaries()) as plane:
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        plane.kubectl("create", "namespace", NAMESPACE)
        pid = next(int(p.popen.pid) for p in plane._processes if p.name == "kube-apiserver")
        kube = await connect()
        cpu: dict[str, list[float]] = {}
        try:
            for round_ in range(args.rounds):
                order = list(SHAPES) if round_ % 2 == 0 else list(reversed(SHAPES))
                for name in order:
                    shape = SHAPES[name]
                    key = f"s{list(SHAPES).index(name)}"
                    before = cpu_seconds(pid)
                    claims = [
                        await kube.create(shape.resource, claim_body(i, key, round_))
                        for i in range(args.objects)
                    ]
                    creates = f"{'native' if shape.resource is NATIVE_CLAIMS else 'draco'}: POST claim"
                    cpu.setdefault(creates, []).append((cpu_seconds(pid) - before) * 1000 / args.objects)
                    await asyncio.sleep(1)  # the creates' watch events settle first
                    profile = None
                    if args.profile and round_ == 0:
                        args.profile.mkdir(parents=True, exist_ok=True)
                        profile = start_profile(
                            plane, args.profile / f"{key}.pprof", seconds=args.profile_seconds
                        )
                        await asyncio.sleep(0.5)
                    before = cpu_seconds(pid)
                    for i, claim in enumerate(claims):
                        await shape.write(kube, shape.resource, claim, status_for(i, shape))
                    cpu.setdefault(name, []).append((cpu_seconds(pid) - before) * 1000 / args.objects)
                    if profile is not None:
                        await asyncio.to_thread(profile.wait)
        finally:
            await kube.close()
    one, five, _ = os.getloadavg()
    print(
        f"kube-apiserver CPU ms per request, {args.objects} writes x {args.rounds} rounds "
        f"(load {one:.2f}/{five:.2f}), one client, sequential:"
    )
    for name, figures in cpu.items():
        print(
            f"  {name:56} median {statistics.median(figures):.2f} (min {min(figures):.2f}, max {max(figures):.2f})"
        )
    example = claim_body(0, "s0", 0)
    put_bytes = len(json.dumps({**example, "status": allocated_status(0)}, separators=(",", ":")))
    patch_bytes = len(
        json.dumps(
            {"metadata": {"resourceVersion": "12345"}, "status": allocated_status(0)}, separators=(",", ":")
        )
    )
    print(f"  body bytes: whole-object PUT {put_bytes}, PATCH or status-only PUT ~{patch_bytes}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=300, help="writes per shape per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds, the shapes' order alternating")
    parser.add_argument(
        "--profile",
        type=Path,
        help="save kube-apiserver's CPU profile of each shape's first batch here (s0.pprof, s1.pprof, ...)",
    )
    parser.add_argument("--profile-seconds", type=int, default=5, help="length of each profile")
    args = parser.parse_args()
    started = time.monotonic()
    asyncio.run(main_async(args))
    print(f"  ({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
