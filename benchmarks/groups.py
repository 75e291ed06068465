"""Groups of pods placed all or nothing, at scale: draco's operator alone (no upstream
counterpart: kube-scheduler's gang scheduling is off by default in 1.37 and absent before).

Why: a group is placed by one decision over its members under the allocation's decision
lock, written whole and only then un-gated; this measures what that costs where it
matters, on the 5,000-node cluster of ``versus_upstream.py``'s scale workload (8 devices
per node), with 1,000 groups of 8 pods (one device each) by default. Side by side, the
same pods as single pods (``single``: no PodGroup, no label), on a fresh control plane of
their own, so the ratio says what grouping costs.

The harness creates the groups 16 at a time (a PodGroup with ``minCount`` = the group's
size, then its pods), or at ``--groups-per-s`` (below draco's pace no group queues behind
another, so a group's latency is its own), and a pod watch records when each pod is first seen without draco's
gate. Printed per run: groups/s = groups / (first create → last pod un-gated), pods/s,
the time from a group's last pod created to its last pod un-gated (p50, p99, max), the
largest spread between a group's first and last pod un-gated, CPU seconds of the operator,
kube-apiserver and etcd over the run, and the load average beside each figure (on a
shared machine read the ratio, not the absolutes).

Run: ``.venv/bin/python benchmarks/groups.py [--nodes 5000] [--devices 8] [--groups 1000]
[--size 8] [--systems groups,single] [--runs 1] [--json out.json]``.
"""

from __future__ import annotations

import sys

# benchmarks/ holds operator.py, named like the standard library's `operator`; run as a
# script, this folder comes first on sys.path and would shadow it for every import below.
if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    # ... and the checkout's root in its place: this script reuses versus_upstream.py's harness.
    sys.path[0] = sys.path[0].rstrip("/").removesuffix("benchmarks").rstrip("/") or "."

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.versus_upstream import (
    NAMESPACE,
    ROOT,
    Workload,
    _pid_of,
    build_cluster,
    cpu_seconds,
    gather_limited,
    load,
    pod_body,
    settle_operator,
    start_operator,
    watch_lines,
)

from draco.api.constants import POD_GROUP_LABEL, SCHEDULING_API_VERSION, SCHEDULING_GATE
from draco.kube.client import PODS, Kube, connect
from draco.logs import configure_logging
from draco.operator.informers import POD_GROUPS
from draco.tools.dev.components import stop
from draco.tools.dev.controlplane import ControlPlane, find_binaries

Obj = dict[str, Any]


async def watch_ungated(kube: Kube, seen: dict[str, float], *, expected: int, done: asyncio.Event) -> None:
    """Record when each pod is first seen without draco's gate."""

    def on_pod(obj: Obj) -> bool:
        name = (obj.get("metadata") or {}).get("name")
        gates = (obj.get("spec") or {}).get("schedulingGates") or []
        if name and name not in seen and not any(g.get("name") == SCHEDULING_GATE for g in gates):
            seen[name] = time.monotonic()
            if len(seen) >= expected:
                done.set()
                return True
        return False

    await watch_lines(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", on_pod, done=done)


async def create_group(
    kube: Kube, group: int, size: int, *, grouped: bool, created: dict[int, float]
) -> None:
    name = f"group-{group:04d}"
    if grouped:
        await kube.create(
            POD_GROUPS,
            {
                "apiVersion": SCHEDULING_API_VERSION,
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
            },
            namespace=NAMESPACE,
        )

    async def member(index: int) -> None:
        body = pod_body(group * size + index, system="draco")
        body["metadata"]["name"] = f"{name}-{index}"
        if grouped:
            body["metadata"]["labels"] = {POD_GROUP_LABEL: name}
        await kube.create(PODS, body)

    await asyncio.gather(*(member(i) for i in range(size)))
    created[group] = time.monotonic()


async def run_once(system: str, args: argparse.Namespace, assets: Path, workdir: Path) -> dict[str, Any]:
    pods = args.groups * args.size
    workload = Workload("groups", nodes=args.nodes, devices=args.devices, pods=pods)
    result: dict[str, Any] = {"system": system, "load_before": os.getloadavg()}
    with ControlPlane(binaries=assets) as plane:
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        plane.kubectl("create", "namespace", NAMESPACE)
        kube = await connect()
        operator = None
        try:
            await build_cluster(kube, workload, system="draco")
            operator, startup = await asyncio.to_thread(
                start_operator,
                plane,
                workdir,
                profile=args.profile / f"operator-{system}.json" if args.profile else None,
                source=None,
            )
            print(f"      operator started: {startup.text()} ({load()})", flush=True)
            await settle_operator(kube, timeout_s=max(600.0, workload.nodes / 5))
            pids = {
                "draco-operator": operator.pid,
                "kube-apiserver": _pid_of(plane, "kube-apiserver"),
                "etcd": _pid_of(plane, "etcd"),
            }
            cpu_before = {k: cpu_seconds(p) for k, p in pids.items()}
            seen: dict[str, float] = {}
            created: dict[int, float] = {}
            done = asyncio.Event()
            watcher = asyncio.create_task(watch_ungated(kube, seen, expected=pods, done=done))
            first = time.monotonic()

            async def paced(group: int) -> None:
                if args.groups_per_s:  # no backlog: each group's latency is its own
                    await asyncio.sleep(max(0.0, first + group / args.groups_per_s - time.monotonic()))
                await create_group(kube, group, args.size, grouped=system == "groups", created=created)

            await gather_limited([paced(g) for g in range(args.groups)], limit=16)
            result["create_s"] = time.monotonic() - first
            try:
                await asyncio.wait_for(done.wait(), timeout=args.timeout)
            except TimeoutError:
                print(f"  timed out: {len(seen)}/{pods} pods un-gated")
            watcher.cancel()
            result["cpu_s"] = {k: cpu_seconds(p) - cpu_before[k] for k, p in pids.items()}
            result["load_after"] = os.getloadavg()
            last = max(seen.values()) if seen else first
            complete = [g for g in created if all(f"group-{g:04d}-{i}" in seen for i in range(args.size))]
            latencies = sorted(
                max(seen[f"group-{g:04d}-{i}"] for i in range(args.size)) - created[g] for g in complete
            )
            spreads = [
                max(seen[f"group-{g:04d}-{i}"] for i in range(args.size))
                - min(seen[f"group-{g:04d}-{i}"] for i in range(args.size))
                for g in complete
            ]
            result.update(
                pods=len(seen),
                groups=len(complete),
                groups_per_s=len(complete) / (last - first) if seen else 0.0,
                pods_per_s=len(seen) / (last - first) if seen else 0.0,
            )
            if len(latencies) > 1:
                q = statistics.quantiles(latencies, n=100)
                result.update(p50_s=q[49], p99_s=q[98], max_s=latencies[-1], max_spread_s=max(spreads))
        finally:
            if operator is not None:
                if args.profile:
                    # py-spy writes its profile when its child exits: SIGINT to both.
                    os.killpg(operator.pid, signal.SIGINT)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        operator.wait(60)
                stop(operator)
            await kube.close()
    return result


def report(run: dict[str, Any], args: argparse.Namespace) -> None:
    cpu = ", ".join(f"{k} {v:.0f}" for k, v in sorted(run["cpu_s"].items(), key=lambda kv: -kv[1]))
    print(
        f"  [{run['system']:6}] {run['groups']}/{args.groups} groups of {args.size} whole, {run['pods']} pods: "
        f"{run['groups_per_s']:.2f} groups/s ({run['pods_per_s']:.1f} pods/s); last pod created → last "
        f"pod un-gated p50 {run.get('p50_s', float('nan')):.1f}s p99 {run.get('p99_s', float('nan')):.1f}s "
        f"max {run.get('max_s', float('nan')):.1f}s; widest spread within a group "
        f"{run.get('max_spread_s', float('nan')):.2f}s (load {run['load_before'][0]:.2f}→{run['load_after'][0]:.2f})\n"
        f"      created in {run['create_s']:.1f}s; CPU s: {cpu}",
        flush=True,
    )


async def main_async(args: argparse.Namespace, assets: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    systems = args.systems.split(",")
    print(
        f"-- {args.groups} groups of {args.size} pods on {args.nodes} nodes x {args.devices} devices ({load()})",
        flush=True,
    )
    for round_ in range(args.runs):
        for system in systems if round_ % 2 == 0 else list(reversed(systems)):
            workdir = Path(tempfile.mkdtemp(prefix=f"groups-{system}-"))
            run = await run_once(system, args, assets, workdir)
            run["round"] = round_
            report(run, args)
            runs.append(run)
            if args.keep:
                print(f"      logs: {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    for system in systems:
        mine = [r for r in runs if r["system"] == system]
        if mine:
            rates = [r["pods_per_s"] for r in mine]
            print(f"{system:6} pods/s median {statistics.median(rates):.1f} over {len(mine)} run(s)")
    by_round = {(r["round"], r["system"]): r for r in runs}
    ratios = [
        by_round[(n, "groups")]["pods_per_s"] / by_round[(n, "single")]["pods_per_s"]
        for n in range(args.runs)
        if (n, "groups") in by_round and (n, "single") in by_round and by_round[(n, "single")]["pods_per_s"]
    ]
    if ratios:
        print(f"groups/single pods/s per round: {', '.join(f'{x:.2f}' for x in ratios)} ({load()} now)")
    return {"runs": runs, "ratio_pods_per_s_groups_single": ratios}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--size", type=int, default=8, help="pods per group (each takes one device)")
    parser.add_argument("--systems", default="groups,single", help="groups, single, or both")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument(
        "--groups-per-s",
        type=float,
        default=0.0,
        help="create the groups at this pace (default: 16 at a time, as fast as the API server takes "
        "them, which queues them behind each other); below draco's pace, a group's latency is its own",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", type=Path, help="record the operator with py-spy into this folder")
    parser.add_argument(
        "--keep", action="store_true", help="keep each run's logs (the operator's among them)"
    )
    args = parser.parse_args()
    if args.groups * args.size > args.nodes * args.devices:
        raise SystemExit("more pods than devices")
    configure_logging(fmt="text", level="WARNING")
    assets = find_binaries()
    # SIGTERM (a timeout, `kill`) unwinds like Ctrl-C: every control plane is stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(main_async(args, assets))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
