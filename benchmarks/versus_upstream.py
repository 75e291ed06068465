"""draco + kube-scheduler against upstream's kube-scheduler + kube-controller-manager, side by side.

Why: draco's speed means something only next to what users would otherwise run. This runs
one workload through both on the same machine, the same kube-apiserver build, interleaved,
each run on a fresh control plane:

- upstream: kube-scheduler (its DRA plugin allocates) + kube-controller-manager (only the
  resourceclaim-controller: it creates the template claims and releases them), pods with
  ``spec.resourceClaims``, objects of ``resource.k8s.io/v1``;
- draco: ``draco operator`` (lifecycle + allocation: pins and un-gates each pod) + the same
  kube-scheduler binding the pods, pods with the claims annotation and the scheduling gate,
  objects of ``resource.draco.dev/v1``.
- draco-bind: the same operator and kube-scheduler, pods that name draco as their
  scheduler (``spec.schedulerName: draco``, no gate): draco binds them itself
  (``--pod-binding=draco`` of the pod webhook); kube-scheduler runs and leaves them alone.

Both clients get QPS/burst 5000 (as upstream's scheduler_perf does). A pod counts when a
pod watch first sees ``spec.nodeName`` set: create → bound, the same end for both.

Two measures. Created while running (always): the components run, the harness creates the
pods (16 at a time), pods/s = pods / (first create → last bound). When a system keeps up
with the harness this is the harness's creation pace, not the system's throughput.
Backlog (a second run per system and round, on its own fresh control plane; on by
default for every workload but ``scale``, whose 20,000 pods would double a 40-minute run;
``--backlog``/``--no-backlog`` decide): every pod is created while nothing acts on pods (no kube-scheduler, no
kube-controller-manager, no operator: pending or gated, no claim yet, the same state for
both), then each system's components start together from cold processes (upstream:
kube-scheduler + kube-controller-manager; draco: the operator + kube-scheduler) and the
clock runs from that start to the last pod bound: pods/s = pods / that time, start-up
included for both; p50/p99 are then start → bound, and the first bound is printed. draco's
operator is started, settled and stopped once before the pods (its one-off Node writes),
so the timed start reads them back as a restarted operator does. In a backlog run the
CPU and request deltas cover only the timed part (no harness POST pod).

Run: ``make bench-versus`` or ``.venv/bin/python benchmarks/versus_upstream.py [--workload
plain|match|big|all] [--runs 3] [--nodes N] [--devices N] [--pods N] [--[no-]backlog]
[--json out.json] [--profile-operator DIR]``. kube-scheduler and kube-controller-manager are built by
``hack/controlplane.sh kube-scheduler kube-controller-manager`` (cached; the first build
takes many minutes).

Printed per run and summarised per system: pods/s, p50/p99 create→bound, CPU seconds per
process over the run (from the first pod created to the last one bound, children
included), peak resident memory (VmHWM), API requests per pod by verb and resource (the
deltas of kube-apiserver's ``apiserver_request_total``, watches left out), per pod the
request body bytes by verb and resource (``apiserver_request_body_size_bytes``), the
watch events kube-apiserver sent (``apiserver_watch_events_total``: each event once per
watcher) and their bytes, the run's pods and claims as stored at its end (JSON bytes, of
which managedFields, and how many managers), kube-apiserver's CPU ms per pod, the CPU ms
per pod of all the system's processes together (and the pods/s that caps on this machine's
cores once they are all busy: the bound on any ratio of two systems), and the
draco/upstream ratio of pods/s per round (min and median). ``os.getloadavg()`` is printed
beside every figure: on a shared machine read ratios of interleaved runs, not absolutes.
"""

from __future__ import annotations

import sys

# benchmarks/ holds operator.py, named like the standard library's `operator`; run as a
# script, this folder comes first on sys.path and would shadow it for every import below.
if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    del sys.path[0]

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draco.api.constants import (
    CLAIMS_ANNOTATION,
    IMPLICIT_EXTENDED_RESOURCE_PREFIX,
    SCHEDULER_NAME,
    SCHEDULING_GATE,
)
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
from draco.tools.dev import components
from draco.tools.dev.components import (
    NATIVE_CLASSES,
    NATIVE_SLICES,
    NATIVE_TEMPLATES,
    Startup,
    start_controller_manager,
    start_scheduler,
    stop,
)
from draco.tools.dev.controlplane import ControlPlane, find_binaries

Obj = dict[str, Any]

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"
DRIVER = "gpu.bench.draco.dev"
SYSTEMS = ("upstream", "draco", "draco-bind", "draco-base")

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Workload:
    name: str
    nodes: int
    devices: int
    pods: int
    per_claim: int = 1
    match_attribute: bool = False


WORKLOADS = {
    # One device per claim: the common case.
    "plain": Workload("plain", nodes=500, devices=8, pods=2000),
    # Allocation work: 4 devices per claim that must share a per-node attribute.
    "match": Workload("match", nodes=500, devices=8, pods=1000, per_claim=4, match_attribute=True),
    # Volume: 5,000 pods.
    "big": Workload("big", nodes=500, devices=12, pods=5000),
    # Scale: 5,000 nodes, 20,000 pods (not in "all": one round takes ~30 min on 2 cores).
    "scale": Workload("scale", nodes=5000, devices=8, pods=20000),
}
#: kube-scheduler's feature gates unless ``--scheduler-feature-gates`` says otherwise: what
#: Kubernetes 1.38 turns on by default (this build is 1.37, where it is off).
DEFAULT_SCHEDULER_GATES = "SchedulerPreQueueingHints=true"
#: What ``--workload all`` runs.
ALL_WORKLOADS = ("plain", "match", "big")


def load() -> str:
    one, five, _fifteen = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


# ---- processes: CPU and memory from /proc


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            out += [int(c) for c in text.split()]
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += _children(p)
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid`, its live descendants and its reaped children."""
    total = 0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime stime cutime cstime are fields 14-17 (1-based); here offset by the 2 cut.
        total += sum(int(v) for v in fields[11:15])
    return total / CLK_TCK


def peak_memory_mb(pid: int, *, tree: bool = True) -> float:
    """Peak resident memory (VmHWM) of `pid`, summed over its live descendants with `tree`."""
    total = 0.0
    for p in _tree(pid) if tree else [pid]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


# ---- the API server's counters: requests, their bytes, watch events


_SAMPLE = re.compile(r"^(?P<name>apiserver_[a-z_]+|etcd_requests_total)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: apiserver_request_body_size_bytes names the verb as the API server's handlers do.
_BODY_VERBS = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}
#: What `traffic` reads, by the sample it sums.
TRAFFIC_SERIES = {
    "apiserver_request_total": "requests",
    "apiserver_request_body_size_bytes_sum": "request_bytes",
    "apiserver_watch_events_total": "watch_events",
    "apiserver_watch_events_sizes_sum": "watch_bytes",
    "etcd_requests_total": "etcd_requests",
}


def _resource(labels: dict[str, str]) -> str:
    resource = labels["resource"]
    if labels.get("subresource"):
        resource += f"/{labels['subresource']}"
    group = labels.get("group", "")
    return f"{resource}.{group.split('.')[0]}" if group else resource


def traffic(plane: ControlPlane) -> dict[str, dict[str, float]]:
    """kube-apiserver's counters now, by what they count (:data:`TRAFFIC_SERIES`), each
    keyed ``VERB resource[/subresource].group`` (watch events: ``resource.group``):
    requests (watches left out), request body bytes (this metric has no subresource: a
    status PUT is a PUT of the resource), watch events sent (one per event per watcher)
    and their bytes."""
    text = plane.kubectl("get", "--raw", "/metrics", timeout=120).stdout
    counts: dict[str, dict[str, float]] = {kind: {} for kind in TRAFFIC_SERIES.values()}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match["name"] not in TRAFFIC_SERIES:
            continue
        kind = TRAFFIC_SERIES[match["name"]]
        labels = dict(_LABEL.findall(match["labels"]))
        if kind == "etcd_requests":
            # What kube-apiserver asked of etcd, by operation and object type: reads
            # that no watch cache answered show here and in no request count.
            kind_of = labels.get("type") or (_resource(labels) if labels.get("resource") else "")
            key = f"{labels.get('operation', '')} {kind_of}"
            counts[kind][key] = counts[kind].get(key, 0.0) + float(match["value"])
            continue
        if not labels.get("resource"):
            continue
        if kind in ("watch_events", "watch_bytes"):
            key = _resource(labels)
        elif kind == "request_bytes":
            key = f"{_BODY_VERBS.get(labels.get('verb', ''), labels.get('verb', ''))} {_resource(labels)}"
        else:
            verb = labels.get("verb", "")
            if verb in ("WATCH", "CONNECT"):
                continue
            key = f"{verb} {_resource(labels)}"
        counts[kind][key] = counts[kind].get(key, 0.0) + float(match["value"])
    return counts


def per_pod(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], pods: int
) -> dict[str, dict[str, float]]:
    """``after - before`` divided by ``pods``, the keys that moved only."""
    return {
        kind: {
            k: (v - before[kind].get(k, 0.0)) / pods
            for k, v in after[kind].items()
            if v > before[kind].get(k, 0.0)
        }
        for kind in after
    }


def stored_sizes(plane: ControlPlane, *, claims: str) -> dict[str, float]:
    """The mean JSON size of the run's pods and claims as stored, and of their
    managedFields: what each write of them re-encodes, re-stores and sends to watchers."""
    sizes: dict[str, float] = {}
    for name, resource in (("pod", "pods"), ("claim", claims)):
        text = plane.kubectl(
            "get", resource, "-n", NAMESPACE, "-o", "json", "--show-managed-fields", timeout=300
        ).stdout
        items = json.loads(text).get("items") or []
        if not items:
            continue
        whole = [len(json.dumps(item, separators=(",", ":"))) for item in items]
        managed = [
            len(json.dumps((item.get("metadata") or {}).get("managedFields") or [], separators=(",", ":")))
            for item in items
        ]
        sizes[f"{name}_bytes"] = statistics.mean(whole)
        sizes[f"{name}_managed_fields_bytes"] = statistics.mean(managed)
        sizes[f"{name}_managers"] = statistics.mean(
            len((item.get("metadata") or {}).get("managedFields") or []) for item in items
        )
    return sizes


# ---- the cluster


async def gather_limited(coroutines: list[Awaitable[Any]], *, limit: int = 32) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(coroutine: Awaitable[Any]) -> None:
        async with semaphore:
            await coroutine

    await asyncio.gather(*(one(c) for c in coroutines))


async def build_cluster(kube: Kube, workload: Workload, *, system: str) -> None:
    slices, classes, templates = (
        (NATIVE_SLICES, NATIVE_CLASSES, NATIVE_TEMPLATES)
        if system == "upstream"
        else (RESOURCE_SLICES, DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES)
    )
    names = [f"node-{i:04d}" for i in range(workload.nodes)]
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
    # Admission taints new Nodes not-ready; no node controller here lifts it.
    await gather_limited([kube.patch(NODES, n, {"spec": {"taints": None}}) for n in names])
    await kube.create(
        classes,
        {
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )
    await gather_limited(
        [
            kube.create(
                slices,
                {
                    "metadata": {"name": f"{n}-gpu"},
                    "spec": {
                        "driver": DRIVER,
                        "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                        "nodeName": n,
                        "devices": [
                            {
                                "name": f"gpu-{d}",
                                "attributes": {
                                    "index": {"int": d},
                                    "model": {"string": "A100"},
                                    "node": {"string": n},
                                },
                                "capacity": {"memory": {"value": "80Gi"}},
                            }
                            for d in range(workload.devices)
                        ],
                    },
                },
            )
            for n in names
        ]
    )
    request: dict[str, Any] = {"deviceClassName": "gpu"}
    if workload.per_claim > 1:
        request["count"] = workload.per_claim
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": request}]}
    if workload.match_attribute:
        devices["constraints"] = [{"requests": ["gpu"], "matchAttribute": f"{DRIVER}/node"}]
    await kube.create(
        templates,
        {"metadata": {"name": "gpus", "namespace": NAMESPACE}, "spec": {"spec": {"devices": devices}}},
    )


def pod_body(index: int, *, system: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.invalid/none",
        "resources": {"requests": {"cpu": "100m"}},
    }
    body: dict[str, Any] = {
        "metadata": {"name": f"pod-{index:05d}", "namespace": NAMESPACE},
        "spec": {"containers": [container]},
    }
    if system == "upstream":
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpus"}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    else:
        body["metadata"]["annotations"] = {
            CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": "gpus"}])
        }
        if system == "draco-bind":
            body["spec"]["schedulerName"] = SCHEDULER_NAME  # draco binds it (no gate, no pin)
        else:
            body["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return body


async def watch_lines(
    kube: Kube, path: str, on_object: Callable[[Obj], bool], *, done: asyncio.Event
) -> None:
    """Watch `path` (raw, JSON lines) and hand every object to `on_object` until it returns
    True or `done` is set."""
    resource_version = "0"
    while not done.is_set():
        response = await kube.api.call_api(
            path,
            "GET",
            query_params=[("watch", "true"), ("resourceVersion", resource_version), ("timeoutSeconds", 300)],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=600,
        )
        try:
            async for line in response.content:
                obj = json.loads(line).get("object") or {}
                resource_version = (obj.get("metadata") or {}).get("resourceVersion", resource_version)
                if on_object(obj):
                    return
        finally:
            # Also when cancelled mid-read: else the connection is garbage-collected open
            # and aiohttp reports it ("Unclosed connection").
            response.close()


async def watch_bound(kube: Kube, seen: dict[str, float], *, expected: int, done: asyncio.Event) -> None:
    """Record when each pod is first seen with `spec.nodeName`."""

    def on_pod(obj: Obj) -> bool:
        name = (obj.get("metadata") or {}).get("name")
        if name and name not in seen and (obj.get("spec") or {}).get("nodeName"):
            seen[name] = time.monotonic()
            if len(seen) >= expected:
                done.set()
                return True
        return False

    await watch_lines(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", on_pod, done=done)


async def watch_allocated(
    kube: Kube, group: str, allocated: dict[str, float], *, done: asyncio.Event
) -> None:
    """Record when each pod's generated claim is first seen allocated (keyed by the pod):
    with pod create and bind, it splits create → bound into allocation and binding."""

    def on_claim(obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        owners = [ref["name"] for ref in meta.get("ownerReferences") or [] if ref.get("kind") == "Pod"]
        if owners and owners[0] not in allocated and (obj.get("status") or {}).get("allocation"):
            allocated[owners[0]] = time.monotonic()
        return False

    await watch_lines(kube, f"/apis/{group}/v1/namespaces/{NAMESPACE}/resourceclaims", on_claim, done=done)


# ---- the components


def start_operator(
    plane: ControlPlane,
    workdir: Path,
    *,
    profile: Path | None,
    source: Path | None,
    trace_memory: Path | None = None,
    log_name: str = "draco-operator.log",
    ready_timeout_s: float = 600.0,
) -> tuple[subprocess.Popen[bytes], Startup]:
    """`draco operator` on the bench namespace, from this checkout or from `source` (a
    folder holding the `draco` package, e.g. a copy of an earlier commit's ``operator/``)
    to compare two versions; with `profile`, under py-spy; with `trace_memory`, under
    tracemalloc (`tracemem.py`: SIGUSR2 writes that file)."""
    python: list[str] = [sys.executable, "-m", "draco.cli"]
    if trace_memory is not None:
        python = [
            sys.executable,
            str(ROOT / "benchmarks" / "tracemem.py"),
            str(trace_memory),
            "1",
            "draco.cli",
        ]
    wrapper: list[str] = []
    if profile is not None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        wrapper = [spy, "record", "--nonblocking", "--format", "speedscope", "-o", str(profile), "--"]
    return components.start_operator(
        plane,
        workdir,
        args=["--namespace", NAMESPACE],
        python=python,
        wrapper=wrapper,
        source=source,
        log_name=log_name,
        ready_timeout_s=ready_timeout_s,
    )


def dump_memory_trace(process: subprocess.Popen[bytes], path: Path, *, timeout_s: float = 1200) -> bool:
    """Ask a traced operator (`start_operator(trace_memory=...)`) to write its trace, and
    wait for it (grouping millions of traces takes minutes on a busy machine)."""
    path.unlink(missing_ok=True)
    os.kill(process.pid, signal.SIGUSR2)
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
    time.sleep(1)  # written in one call, but let it finish
    print(f"      memory trace: {path if path.exists() else 'not written in time'}", flush=True)
    return path.exists()


# ---- one run


@dataclass
class Run:
    system: str
    round: int
    pods: int = 0
    pods_per_s: float = 0.0
    p50_s: float = float("nan")
    p99_s: float = float("nan")
    #: Backlog: every pod created before kube-scheduler and kube-controller-manager or the
    #: operator start; the clock starts at their start (else at the first create).
    backlog: bool = False
    create_s: float = 0.0  # first create → last create (the harness's pace)
    first_bound_s: float = float("nan")  # the clock's start → the first pod bound
    allocated_p50_s: float = float("nan")  # create → claim allocated
    allocated_p99_s: float = float("nan")
    bind_p50_s: float = float("nan")  # claim allocated → pod bound
    bind_p99_s: float = float("nan")
    cpu_s: dict[str, float] = field(default_factory=dict)
    memory_mb: dict[str, float] = field(default_factory=dict)
    requests: dict[str, float] = field(default_factory=dict)
    #: Per pod, keyed as `traffic` keys them: request body bytes, watch events sent (each
    #: event once per watcher) and their bytes.
    request_bytes: dict[str, float] = field(default_factory=dict)
    watch_events: dict[str, float] = field(default_factory=dict)
    watch_bytes: dict[str, float] = field(default_factory=dict)
    #: What kube-apiserver asked of etcd per pod, keyed ``operation type``.
    etcd_requests: dict[str, float] = field(default_factory=dict)
    #: The run's pods and claims as stored at its end (`stored_sizes`).
    stored: dict[str, float] = field(default_factory=dict)
    #: draco only: the operator's start-up on the empty cluster, and (``--restart``) again
    #: over what the run left (every pod bound, every claim allocated).
    startup: Startup | None = None
    restart: Startup | None = None
    restart_memory_mb: float = float("nan")
    load_before: tuple[float, ...] = ()
    load_after: tuple[float, ...] = ()

    def load_text(self) -> str:
        return f"load {self.load_before[0]:.2f}→{self.load_after[0]:.2f}"


async def settle_operator(kube: Kube, *, timeout_s: float = 600.0) -> None:
    """Wait until the operator's one-off start-up writes are done before the clock starts:
    it advertises each DeviceClass's implicit extended resource on every Node (one status
    write per Node, once). A cluster runs the operator for days; those writes are not a
    per-pod cost, and timed in a 2,000-pod run they would count as 0.25 requests per pod."""
    started = time.monotonic()
    while True:
        nodes = await kube.list(NODES)
        # Listing thousands of Nodes is work for the API server too: less often then.
        interval = max(0.5, len(nodes) / 2000)
        missing = [
            n
            for n in nodes
            if not any(
                str(r).startswith(IMPLICIT_EXTENDED_RESOURCE_PREFIX)
                for r in ((n.get("status") or {}).get("capacity") or {})
            )
        ]
        if not missing:
            print(
                f"      operator settled in {time.monotonic() - started:.1f}s (load {os.getloadavg()[0]:.2f})"
            )
            return
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"operator did not advertise on {len(missing)} nodes within {timeout_s:.0f}s")
        await asyncio.sleep(interval)


def start_apiserver_profile(plane: ControlPlane, path: Path, *, seconds: int) -> subprocess.Popen[bytes]:
    """kube-apiserver's own CPU profile (Go pprof, served at /debug/pprof with profiling on,
    its default) over the first `seconds` of the pods' creation; read it with
    `go tool pprof -top <file>`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        return subprocess.Popen(
            [
                str(plane.binaries / "kubectl"),
                f"--kubeconfig={plane.kubeconfig}",
                f"--request-timeout={seconds + 60}s",
                "get",
                "--raw",
                f"/debug/pprof/profile?seconds={seconds}",
            ],
            stdout=out,
        )


def _pid_of(plane: ControlPlane, name: str) -> int:
    for process in plane._processes:  # the harness reads its own children's /proc
        if process.name == name:
            return int(process.popen.pid)
    raise LookupError(name)


async def run_once(
    system: str,
    workload: Workload,
    round_: int,
    args: argparse.Namespace,
    assets: Path,
    workdir: Path,
    *,
    backlog: bool = False,
) -> Run:
    result = Run(system, round_, backlog=backlog, load_before=os.getloadavg())
    suffix = "-backlog" if backlog else ""
    with ControlPlane(binaries=assets) as plane:
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        plane.kubectl("create", "namespace", NAMESPACE)
        kube = await connect()
        components: dict[str, subprocess.Popen[bytes]] = {}
        source = args.baseline if system == "draco-base" else args.draco_source

        async def start_components() -> None:
            """kube-scheduler with kube-controller-manager (upstream) or with the operator
            (draco), started together; the blocking starts run in threads so the watches
            below keep timing while they wait, and each process is in `components` (to be
            stopped) as soon as it is spawned and healthy, even when the other fails."""

            def scheduler() -> None:
                gates = args.scheduler_feature_gates
                components["kube-scheduler"] = start_scheduler(
                    plane, assets, workdir, args=[f"--feature-gates={gates}"] if gates else []
                )

            def manager() -> None:
                components["kube-controller-manager"] = start_controller_manager(plane, assets, workdir)

            def operator() -> None:
                profile = (
                    args.profile_operator / f"operator-{workload.name}-{round_}{suffix}.json"
                    if (args.profile_operator)
                    else None
                )
                trace = workdir / "memory-trace.txt" if args.trace_memory and system == "draco" else None
                components["draco-operator"], result.startup = start_operator(
                    plane, workdir, profile=profile, source=source, trace_memory=trace
                )

            starts = (scheduler, manager if system == "upstream" else operator)
            outcomes = await asyncio.gather(*(asyncio.to_thread(s) for s in starts), return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            if result.startup is not None:
                print(f"      operator started: {result.startup.text()} ({load()})", flush=True)

        try:
            await build_cluster(kube, workload, system=system)
            if not backlog:
                await start_components()
                if system != "upstream":
                    await settle_operator(kube, timeout_s=max(600.0, workload.nodes / 5))
            elif system != "upstream":
                # The operator's one-off writes (each Node's extended resource) come before
                # the backlog: started once, settled and stopped, so the timed start finds
                # them done and reads them back (as a restarted operator does).
                settler, _ = await asyncio.to_thread(
                    start_operator,
                    plane,
                    workdir,
                    profile=None,
                    source=source,
                    log_name="draco-operator-settle.log",
                )
                try:
                    await settle_operator(kube, timeout_s=max(600.0, workload.nodes / 5))
                finally:
                    await asyncio.to_thread(stop, settler)
            pids = {name: p.pid for name, p in components.items()}
            pids["kube-apiserver"] = _pid_of(plane, "kube-apiserver")
            pids["etcd"] = _pid_of(plane, "etcd")

            seen: dict[str, float] = {}
            created: dict[str, float] = {}
            done = asyncio.Event()
            allocated: dict[str, float] = {}
            watcher = asyncio.create_task(watch_bound(kube, seen, expected=workload.pods, done=done))
            claim_group = "resource.k8s.io" if system == "upstream" else "resource.draco.dev"
            claim_watcher = asyncio.create_task(watch_allocated(kube, claim_group, allocated, done=done))

            async def create(index: int) -> None:
                body = pod_body(index, system=system)
                await kube.create(PODS, body)
                created[body["metadata"]["name"]] = time.monotonic()

            if backlog:
                # Every pod exists before anything acts on it: gated with no claim (draco),
                # pending with no claim (upstream). Not timed, not counted.
                first = time.monotonic()
                await gather_limited([create(i) for i in range(workload.pods)], limit=16)
                result.create_s = time.monotonic() - first
                print(f"      backlog of {workload.pods} pods created in {result.create_s:.1f}s ({load()})")
            traffic_before = traffic(plane)
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            harness_before = time.process_time()

            apiserver_profile = (
                start_apiserver_profile(
                    plane,
                    args.profile_apiserver / f"apiserver-{system}-{workload.name}-{round_}{suffix}.pprof",
                    seconds=args.profile_seconds,
                )
                if args.profile_apiserver
                else None
            )
            # The clock: the first create, or (backlog) the components' start.
            first = time.monotonic()
            if backlog:
                await start_components()
                # Started after the clock: every second of their CPU counts.
                pids.update({name: p.pid for name, p in components.items()})
                cpu_before.update({name: 0.0 for name in components})
            else:
                await gather_limited([create(i) for i in range(workload.pods)], limit=16)
                result.create_s = time.monotonic() - first
            timeout = (
                args.upstream_timeout if system == "upstream" and args.upstream_timeout else args.timeout
            )
            try:
                await asyncio.wait_for(done.wait(), timeout=timeout)
            except TimeoutError:
                print(
                    f"  timed out: {len(seen)}/{workload.pods} pods bound {timeout:.0f}s after the last was "
                    f"created ({time.monotonic() - first:.0f}s after the first)"
                )
            watcher.cancel()
            claim_watcher.cancel()
            # Wait for both to unwind, so that their watch responses are released before the
            # client closes (else aiohttp reports an unclosed connection).
            await asyncio.gather(watcher, claim_watcher, return_exceptions=True)
            if apiserver_profile is not None:
                await asyncio.to_thread(apiserver_profile.wait, args.profile_seconds + 120)
            result.cpu_s = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
            result.cpu_s["harness"] = time.process_time() - harness_before
            result.memory_mb = {name: peak_memory_mb(pid) for name, pid in pids.items()}
            if "draco-operator" in pids:
                # The operator's own process, without its CEL worker.
                result.memory_mb["draco-operator/main"] = peak_memory_mb(pids["draco-operator"], tree=False)
            result.load_after = os.getloadavg()
            moved = per_pod(traffic_before, traffic(plane), max(len(seen), 1))
            result.requests = moved["requests"]
            result.request_bytes = moved["request_bytes"]
            result.watch_events = moved["watch_events"]
            result.watch_bytes = moved["watch_bytes"]
            result.etcd_requests = moved["etcd_requests"]
            result.stored = stored_sizes(
                plane,
                claims="resourceclaims.resource.k8s.io"
                if system == "upstream"
                else "resourceclaims.resource.draco.dev",
            )
            # Each pod's latency from its create, or (backlog) from the components' start.
            origin = dict.fromkeys(created, first) if backlog else created
            latencies = sorted(seen[n] - origin[n] for n in seen if n in origin)
            last = max(seen.values()) if seen else first
            result.pods = len(seen)
            result.pods_per_s = len(seen) / (last - first) if seen else 0.0
            result.first_bound_s = min(seen.values()) - first if seen else float("nan")
            if len(latencies) > 1:
                quantiles = statistics.quantiles(latencies, n=100)
                result.p50_s, result.p99_s = quantiles[49], quantiles[98]
            to_allocated = sorted(allocated[n] - origin[n] for n in allocated if n in origin)
            to_bound = sorted(seen[n] - allocated[n] for n in seen if n in allocated)
            if len(to_allocated) > 1 and len(to_bound) > 1:
                a, b = statistics.quantiles(to_allocated, n=100), statistics.quantiles(to_bound, n=100)
                result.allocated_p50_s, result.allocated_p99_s = a[49], a[98]
                result.bind_p50_s, result.bind_p99_s = b[49], b[98]
            operator = components.get("draco-operator")
            traced = operator is not None and args.trace_memory and system == "draco"
            if traced and operator is not None and dump_memory_trace(operator, workdir / "memory-trace.txt"):
                shutil.copy(
                    workdir / "memory-trace.txt", args.trace_memory / f"{workload.name}-{round_}{suffix}.txt"
                )
            if operator is not None and args.restart:
                # The same operator again, over everything the run left: every pod and claim.
                stop(operator)
                source = args.baseline if system == "draco-base" else args.draco_source
                operator, result.restart = start_operator(
                    plane, workdir, profile=None, source=source, log_name="draco-operator-restart.log"
                )
                components["draco-operator"] = operator
                result.restart_memory_mb = peak_memory_mb(operator.pid, tree=False)
                print(
                    f"      operator restarted over {result.pods} pods: {result.restart.text()}, "
                    f"peak {result.restart_memory_mb:.0f} MB ({load()})",
                    flush=True,
                )
        finally:
            for name, process in components.items():
                if name == "draco-operator" and args.profile_operator:
                    # py-spy writes its profile when its child exits: SIGINT to both.
                    os.killpg(process.pid, signal.SIGINT)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(60)
                stop(process)
            await kube.close()
    return result


# ---- reporting


def _fmt_cpu(cpu: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))


def _system_cpu_ms_per_pod(run: Run) -> float:
    """CPU ms per pod of every process the system runs (the harness left out).

    On a machine whose cores are all busy, as two cores are here, pods/s cannot pass
    cores x 1000 / this figure, so the ratio of two systems' pods/s is bounded by the
    inverse ratio of this one: it is the first figure to read when a ratio stalls.
    """
    spent = sum(seconds for name, seconds in run.cpu_s.items() if name != "harness")
    return spent * 1000 / max(run.pods, 1)


def _ceiling_text(system_ms: list[float]) -> str:
    cores = os.cpu_count() or 1
    median = statistics.median(system_ms)
    return (
        f"all its processes CPU ms/pod per run: {', '.join(f'{x:.1f}' for x in system_ms)} "
        f"(median {median:.1f}: at most {cores * 1000 / median:.0f} pods/s on {cores} cores)"
    )


def _per_pod_text(figures: dict[str, float], *, unit: str = "", scale: float = 1.0, digits: int = 2) -> str:
    total = sum(figures.values()) / scale
    return f"{total:.{digits}f}{unit}: " + ", ".join(
        f"{k} {v / scale:.{digits}f}"
        for k, v in sorted(figures.items(), key=lambda kv: -kv[1])
        if v / scale >= 0.01
    )


def traffic_text(traffic_: dict[str, dict[str, float]], stored: dict[str, float], *, indent: str) -> str:
    """The per-pod traffic figures (`Run`'s request_bytes … etcd_requests, `stored`), one line each."""
    lines = [
        f"request bodies KB/pod {_per_pod_text(traffic_['request_bytes'], scale=1000)}",
        f"watch events/pod (each per watcher) {_per_pod_text(traffic_['watch_events'])}",
        f"watch event KB/pod {_per_pod_text(traffic_['watch_bytes'], scale=1000)}",
        f"etcd requests/pod {_per_pod_text(traffic_.get('etcd_requests', {}))}",
    ]
    if stored:
        lines.append(
            "stored at the end, bytes: "
            + ", ".join(
                f"{what} {stored[f'{what}_bytes']:.0f} (managedFields {stored[f'{what}_managed_fields_bytes']:.0f}, "
                f"{stored[f'{what}_managers']:.1f} managers)"
                for what in ("pod", "claim")
                if f"{what}_bytes" in stored
            )
        )
    return "".join(f"\n{indent}{line}" for line in lines)


def _traffic_of(run: Run) -> dict[str, dict[str, float]]:
    return {
        "request_bytes": run.request_bytes,
        "watch_events": run.watch_events,
        "watch_bytes": run.watch_bytes,
        "etcd_requests": run.etcd_requests,
    }


def print_run(run: Run, workload: Workload) -> None:
    top = sorted(run.requests.items(), key=lambda kv: -kv[1])
    origin = "start" if run.backlog else "create"
    print(
        f"  [{run.system:8} round {run.round}{' backlog' if run.backlog else ''}] {run.pods}/{workload.pods} "
        f"bound, {run.pods_per_s:.1f} pods/s, p50 {run.p50_s:.1f}s p99 {run.p99_s:.1f}s {origin} → bound "
        f"({run.load_text()})\n"
        f"      created in {run.create_s:.1f}s; first bound {run.first_bound_s:.1f}s after the "
        f"{'components started' if run.backlog else 'first create'}\n"
        f"      {origin} → allocated p50 {run.allocated_p50_s:.1f}s "
        f"p99 {run.allocated_p99_s:.1f}s; allocated → bound p50 {run.bind_p50_s:.1f}s p99 {run.bind_p99_s:.1f}s\n"
        f"      CPU s: {_fmt_cpu(run.cpu_s)}\n"
        f"      peak MB: {', '.join(f'{k} {v:.0f}' for k, v in run.memory_mb.items())}\n"
        f"      requests/pod {sum(run.requests.values()):.2f}: "
        + ", ".join(f"{k} {v:.2f}" for k, v in top if v >= 0.01)
        + traffic_text(_traffic_of(run), run.stored, indent="      ")
        + (f"\n      operator start-up: {run.startup.text()}" if run.startup else "")
        + (
            f"\n      operator restart over the run's pods and claims: {run.restart.text()}, "
            f"peak {run.restart_memory_mb:.0f} MB"
            if run.restart
            else ""
        ),
        flush=True,
    )


def summarise(runs: list[Run], workload: Workload, *, backlog: bool = False) -> dict[str, Any]:
    measure = (
        "backlog: pods / (components' start → last bound); latencies from that start"
        if backlog
        else "created while running: pods / (first create → last bound); latencies from each create"
    )
    print(
        f"\n== {workload.name}: {workload.nodes} nodes x {workload.devices} devices, {workload.pods} pods, "
        f"{workload.per_claim} device(s)/claim{' + matchAttribute' if workload.match_attribute else ''}\n"
        f"   {measure}"
    )
    summary: dict[str, Any] = {}
    for system in SYSTEMS:
        mine = [r for r in runs if r.system == system]
        if not mine:
            continue
        rates = [r.pods_per_s for r in mine]
        loads = [r.load_before[0] for r in mine] + [r.load_after[0] for r in mine]
        cpu_keys = sorted({k for r in mine for k in r.cpu_s})
        cpu = {k: statistics.median(r.cpu_s.get(k, 0.0) for r in mine) for k in cpu_keys}
        memory = {
            k: max(r.memory_mb.get(k, 0.0) for r in mine) for k in {k for r in mine for k in r.memory_mb}
        }
        request_keys = {k for r in mine for k in r.requests}
        requests = {k: statistics.median(r.requests.get(k, 0.0) for r in mine) for k in request_keys}
        traffic_ = {
            kind: {
                k: statistics.median(figures.get(k, 0.0) for figures in per_run)
                for k in {k for figures in per_run for k in figures}
            }
            for kind, per_run in (
                (kind, [_traffic_of(r)[kind] for r in mine])
                for kind in ("request_bytes", "watch_events", "watch_bytes", "etcd_requests")
            )
        }
        stored = {
            k: statistics.median(r.stored[k] for r in mine if k in r.stored)
            for k in {k for r in mine for k in r.stored}
        }
        apiserver_ms = [r.cpu_s.get("kube-apiserver", 0.0) * 1000 / max(r.pods, 1) for r in mine]
        system_ms = [_system_cpu_ms_per_pod(r) for r in mine]
        summary[system] = {
            "pods_per_s": rates,
            "p50_s": [r.p50_s for r in mine],
            "p99_s": [r.p99_s for r in mine],
            "create_s": [r.create_s for r in mine],
            "first_bound_s": [r.first_bound_s for r in mine],
            "allocated_p50_s": [r.allocated_p50_s for r in mine],
            "allocated_p99_s": [r.allocated_p99_s for r in mine],
            "bind_p50_s": [r.bind_p50_s for r in mine],
            "bind_p99_s": [r.bind_p99_s for r in mine],
            "cpu_s_median": cpu,
            "memory_mb_max": memory,
            "requests_per_pod_median": requests,
            **{f"{kind}_per_pod_median": figures for kind, figures in traffic_.items()},
            "stored_median": stored,
            "apiserver_cpu_ms_per_pod": apiserver_ms,
            "system_cpu_ms_per_pod": system_ms,
            "load1": loads,
        }
        startups = [r.startup.startup_s for r in mine if r.startup]
        restarts = [r.restart.startup_s for r in mine if r.restart]
        if startups:
            summary[system]["startup_s"] = startups
        if restarts:
            summary[system]["restart_startup_s"] = restarts
            summary[system]["restart_memory_mb"] = [r.restart_memory_mb for r in mine if r.restart]
        print(
            f"{system:10} pods/s min/median/max {min(rates):.1f}/{statistics.median(rates):.1f}/{max(rates):.1f}  "
            f"p50 median {statistics.median(r.p50_s for r in mine):.1f}s  "
            f"p99 median {statistics.median(r.p99_s for r in mine):.1f}s  "
            f"first bound median {statistics.median(r.first_bound_s for r in mine):.1f}s  "
            f"(load1 {min(loads):.2f}-{max(loads):.2f})\n"
            f"         CPU s median: {_fmt_cpu(cpu)}\n"
            f"         CPU ms/pod median: "
            + ", ".join(
                f"{k} {v * 1000 / workload.pods:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])
            )
            + f"\n         peak MB: {', '.join(f'{k} {v:.0f}' for k, v in sorted(memory.items()))}\n"
            f"         kube-apiserver CPU ms/pod per run: {', '.join(f'{x:.1f}' for x in apiserver_ms)} "
            f"(median {statistics.median(apiserver_ms):.1f})\n"
            f"         {_ceiling_text(system_ms)}\n"
            f"         requests/pod {sum(requests.values()):.2f}: "
            + ", ".join(
                f"{k} {v:.2f}" for k, v in sorted(requests.items(), key=lambda kv: -kv[1]) if v >= 0.01
            )
            + traffic_text(traffic_, stored, indent="         ")
            + (
                f"\n         start-up (first LIST → ready): {', '.join(f'{x:.1f}s' for x in startups)}"
                if startups
                else ""
            )
            + (
                f"; again over the run's objects: {', '.join(f'{x:.1f}s' for x in restarts)}"
                if restarts
                else ""
            )
        )
    rounds = sorted({r.round for r in runs})
    ratios = []
    for round_ in rounds:
        pair = {r.system: r for r in runs if r.round == round_}
        for system in ("draco", "draco-bind", "draco-base"):
            if system in pair and "upstream" in pair and pair["upstream"].pods_per_s > 0:
                ratios.append((system, pair[system].pods_per_s / pair["upstream"].pods_per_s))
        for system, other in (("draco", "draco-base"), ("draco-bind", "draco")):
            if system in pair and other in pair and pair[other].pods_per_s > 0:
                ratios.append((f"{system}/{other}", pair[system].pods_per_s / pair[other].pods_per_s))
    for system in ("draco", "draco-bind", "draco-base", "draco/draco-base", "draco-bind/draco"):
        mine_ratios = [x for s, x in ratios if s == system]
        if mine_ratios:
            summary[f"ratio_pods_per_s_{system}"] = mine_ratios
            label = (system if "/" in system else f"{system}/upstream") + (" backlog" if backlog else "")
            print(
                f"{label} pods/s per round: {', '.join(f'{x:.2f}' for x in mine_ratios)}  "
                f"min {min(mine_ratios):.2f} median {statistics.median(mine_ratios):.2f}  ({load()} now)"
            )
    return summary


def backlog_for(args: argparse.Namespace, workload: Workload) -> bool:
    """Whether `workload`'s rounds include the backlog runs (the module docstring)."""
    return bool(args.backlog) if args.backlog is not None else workload.name != "scale"


async def main_async(args: argparse.Namespace, assets: Path) -> dict[str, Any]:
    names = list(ALL_WORKLOADS) if args.workload == "all" else args.workload.split(",")
    report: dict[str, Any] = {}
    for name in names:
        base = WORKLOADS[name]
        workload = Workload(
            name,
            nodes=args.nodes or base.nodes,
            devices=args.devices or base.devices,
            pods=args.pods or base.pods,
            per_claim=base.per_claim,
            match_attribute=base.match_attribute,
        )
        if workload.pods * workload.per_claim > workload.nodes * workload.devices:
            raise SystemExit(
                f"{name}: {workload.pods} pods need more devices than {workload.nodes}x{workload.devices}"
            )
        gates = args.scheduler_feature_gates or "kube-scheduler's default feature gates"
        print(f"-- {name}: {workload}; {gates} ({load()})", flush=True)
        runs: list[Run] = []
        for round_ in range(args.runs):
            # Interleaved, and the order alternates so neither system always goes first.
            order = [s for s in SYSTEMS if s in args.systems.split(",")]
            if round_ % 2:
                order.reverse()
            # With the backlog runs, each system's backlog run follows the round's created-while-running runs.
            for backlog in (False, True) if backlog_for(args, workload) else (False,):
                for system in order:
                    workdir = Path(tempfile.mkdtemp(prefix=f"versus-{system}-", dir=args.workdir))
                    run = await run_once(system, workload, round_, args, assets, workdir, backlog=backlog)
                    print_run(run, workload)
                    runs.append(run)
                    if not args.keep:
                        shutil.rmtree(workdir, ignore_errors=True)
                    else:
                        print(f"      logs: {workdir}")
        report[name] = {
            "workload": workload.__dict__,
            "scheduler_feature_gates": args.scheduler_feature_gates,
            "summary": summarise([r for r in runs if not r.backlog], workload),
            "runs": [r.__dict__ for r in runs],
        }
        if backlog_for(args, workload):
            report[name]["summary_backlog"] = summarise(
                [r for r in runs if r.backlog], workload, backlog=True
            )
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload", default="plain", help="plain, match, big, scale, a comma list, or all (all but scale)"
    )
    parser.add_argument(
        "--systems",
        default="upstream,draco,draco-bind",
        help="which systems to run, of upstream, draco, draco-bind and draco-base "
        "(default upstream,draco,draco-bind: draco with either binding, beside upstream)",
    )
    parser.add_argument(
        "--draco-source", type=Path, help="run draco's operator from this folder's `draco` package"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also run system draco-base: the operator from this folder's `draco` package",
    )
    parser.add_argument("--runs", type=int, default=3, help="rounds; each runs both systems once")
    parser.add_argument("--nodes", type=int, default=0, help="override the workload's node count")
    parser.add_argument("--devices", type=int, default=0, help="override the devices per node")
    parser.add_argument("--pods", type=int, default=0, help="override the pod count")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for every pod of a run")
    parser.add_argument(
        "--upstream-timeout",
        type=float,
        default=0.0,
        help="upstream's own --timeout (a bounded run where upstream is far slower; its figures say how many it bound)",
    )
    parser.add_argument("--json", type=Path, help="write every figure here as JSON")
    parser.add_argument(
        "--profile-operator", type=Path, help="record the operator with py-spy into this folder"
    )
    parser.add_argument(
        "--profile-apiserver",
        type=Path,
        help="save kube-apiserver's CPU profile of each run into this folder",
    )
    parser.add_argument(
        "--profile-seconds",
        type=int,
        default=10,
        help="length of the kube-apiserver profile (from the first create)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="after each draco run, restart the operator over what the run left and time its start-up",
    )
    parser.add_argument(
        "--trace-memory",
        type=Path,
        help="run draco's operator under tracemalloc and write where its memory is, per run, into this folder",
    )
    parser.add_argument(
        "--backlog",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run each system over a backlog: every pod created first, then its components started "
        "and timed (default: on, but for the scale workload)",
    )
    parser.add_argument(
        "--scheduler-feature-gates",
        default=DEFAULT_SCHEDULER_GATES,
        metavar="GATES",
        help="kube-scheduler's --feature-gates for both systems (default %(default)s: upstream's fix for "
        "re-queueing every pending pod on each claim event, off by default in 1.37 and on in 1.38; "
        "'' for 1.37's defaults); printed beside every summary",
    )
    parser.add_argument("--workdir", default=None, help="where runs keep their logs (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep each run's logs")
    args = parser.parse_args()
    if args.baseline and "draco-base" not in args.systems:
        args.systems += ",draco-base"
    configure_logging(fmt="text", level="WARNING")
    assets = find_binaries()
    needed = ["kube-scheduler"] + (["kube-controller-manager"] if "upstream" in args.systems else [])
    for binary in needed:
        if not os.access(assets / binary, os.X_OK):
            raise SystemExit(
                f"{assets} lacks {binary}: run hack/controlplane.sh kube-scheduler kube-controller-manager"
            )
    for folder in (args.profile_operator, args.trace_memory):
        if folder:
            folder.mkdir(parents=True, exist_ok=True)
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so every control plane and
    # component this run started is stopped rather than left running.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    report = asyncio.run(main_async(args, assets))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
