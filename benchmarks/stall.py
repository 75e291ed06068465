"""Does one tenant's legal but costly selector stall the operator?

Run: ``KUBEBUILDER_ASSETS=$(hack/controlplane.sh) .venv/bin/python benchmarks/stall.py
[--nodes 130] [--devices 100] [--pieces 240]``.

It starts the tests' control plane, publishes ``--nodes`` x ``--devices`` devices (13,000
by default; one ResourceSlice per node, no agent), an ordinary DeviceClass ``gpu`` and a
one-device template, then starts ``draco webhook`` (admission, its own process, on the
API server's admission path) and ``draco operator`` as processes, the operator with its
probes and metrics. Then, at once:

- it stores DeviceClass ``slow`` whose selector is ``--pieces`` chained string
  concatenations (``device.attributes[...].model + "aaaaa" + ... == "A100aaaaa..."``,
  about 3.7 KB, accepted by validation and under the CEL cost limit, milliseconds per
  device), a claim of that class and a claim of class ``gpu`` whose request carries the
  same selector, each with a gated pod (the DeviceClass status controller evaluates the
  class over every device; allocation evaluates both selectors over every device);
- it GETs the operator's ``/healthz`` every 0.1 s, creates an unrelated valid DeviceClass
  through the webhook every second (``dryRun=All``: admitted like a create, stored
  nowhere), scrapes ``draco_event_loop_lag_seconds`` every second;
- it creates gated pods with ordinary claims at ``--rate`` per second and records when
  each is un-gated.

First ``--baseline`` seconds of the same probes and ordinary pods without the slow
selector, on the same (shared, noisy) machine, for comparison. The window ends when both
slow pods are allocated and the slow class's status counts its
devices (or after ``--duration`` seconds). Then the operator is restarted with the slow
class stored and ``/healthz`` is probed for ``--restart-window`` seconds from its first
answer. Printed: ``/healthz`` p50/p99/max latency and failures, webhook create latency,
loop lag, ordinary pods un-gated per second during the window, how long the slow pods
and the class status took, and the machine load. Targets: ``/healthz`` p99 <= 1 s,
webhook <= 2 s, ordinary pods keep being allocated.
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
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.kube.client import (
    DEVICE_CLASSES,
    EVENTS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Kube,
    connect,
)
from draco.logs import configure_logging
from draco.tools.dev.controlplane import ControlPlane, find_binaries, free_port

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "stall"
DRIVER = "gpu.bench.draco.dev"
PROBE_TIMEOUT_S = 10.0


def pathological_selector(pieces: int) -> str:
    """``pieces`` chained concatenations of short literals onto the model, compared with
    what they make for an A100: true on every device of the benchmark, and slow."""
    literals = [chr(ord("a") + i % 26) * 5 for i in range(pieces)]
    chain = " + ".join([f'device.attributes["{DRIVER}"].model', *(f'"{text}"' for text in literals)])
    return f'{chain} == "A100{"".join(literals)}"'


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cpus)"


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
                    "status": {"allocatable": {"cpu": "640", "memory": "5120Gi", "pods": "1100"}},
                },
            )
            for n in names
        ]
    )
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
                                # A uuid, as real GPUs have: every device's content differs, so
                                # selector results cannot be shared between devices.
                                "attributes": {
                                    "index": {"int": d},
                                    "model": {"string": "A100"},
                                    "uuid": {"string": f"GPU-{n}-{d:04d}"},
                                },
                                "capacity": {"memory": {"value": "80Gi"}},
                            }
                            for d in range(devices)
                        ],
                    },
                },
            )
            for n in names
        ],
        limit=8,
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


def pod_body(name: str, claim: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", **claim}])},
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "containers": [
                {"name": "main", "image": "registry.invalid/none", "resources": {"requests": {"cpu": "10m"}}}
            ],
        },
    }


@dataclass
class Probes:
    healthz: list[tuple[float, float]] = field(default_factory=list)  # (when, latency)
    healthz_failed: int = 0
    webhook: list[tuple[float, float]] = field(default_factory=list)
    webhook_failed: list[str] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    ungated: dict[str, float] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)


async def probe_healthz(
    session: aiohttp.ClientSession, url: str, probes: Probes, stop: asyncio.Event
) -> None:
    while not stop.is_set():
        started = time.monotonic()
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as response:
                await response.read()
                if response.status != 200:
                    probes.healthz_failed += 1
        except (TimeoutError, aiohttp.ClientError):
            probes.healthz_failed += 1
        probes.healthz.append((started, time.monotonic() - started))
        await asyncio.sleep(0.1)


async def probe_lag(session: aiohttp.ClientSession, url: str, probes: Probes, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                for line in (await response.text()).splitlines():
                    if line.startswith("draco_event_loop_lag_seconds "):
                        probes.lag.append(float(line.split()[1]))
        except (TimeoutError, aiohttp.ClientError):
            pass
        await asyncio.sleep(1.0)


async def probe_webhook(kube: Kube, probes: Probes, stop: asyncio.Event) -> None:
    index = 0
    while not stop.is_set():
        index += 1
        body = {
            "metadata": {"name": f"probe-{index:04d}"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "probe-{index}.example.com"'}}]},
        }
        started = time.monotonic()
        try:
            # A dry run goes through admission exactly like a create but stores nothing: a
            # class stored every second would rebuild the allocator's inventory every second.
            await kube.api.call_api(
                DEVICE_CLASSES.path(),
                "POST",
                query_params=[("dryRun", "All")],
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body={"apiVersion": DEVICE_CLASSES.api_version, "kind": DEVICE_CLASSES.kind, **body},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=30,
            )
        except Exception as exc:  # a failure is a figure here
            probes.webhook_failed.append(str(exc)[:200])
        probes.webhook.append((started, time.monotonic() - started))
        await asyncio.sleep(1.0)


async def watch_ungated(kube: Kube, probes: Probes, stop: asyncio.Event) -> None:
    resource_version = "0"
    while not stop.is_set():
        response = await kube.api.call_api(
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            "GET",
            query_params=[("watch", "true"), ("resourceVersion", resource_version), ("timeoutSeconds", 60)],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=120,
        )
        async for line in response.content:
            event = json.loads(line)
            obj = event.get("object") or {}
            resource_version = (obj.get("metadata") or {}).get("resourceVersion", resource_version)
            gates = (obj.get("spec") or {}).get("schedulingGates") or []
            name = (obj.get("metadata") or {}).get("name")
            if (
                name
                and name not in probes.ungated
                and not any(g.get("name") == SCHEDULING_GATE for g in gates)
            ):
                probes.ungated[name] = time.monotonic()


async def create_ordinary(
    kube: Kube, probes: Probes, stop: asyncio.Event, *, rate: float, prefix: str = "ordinary"
) -> None:
    index = 0
    while not stop.is_set():
        index += 1
        name = f"{prefix}-{index:05d}"
        await kube.create(PODS, pod_body(name, {"resourceClaimTemplateName": "one-gpu"}))
        probes.created[name] = time.monotonic()
        await asyncio.sleep(1.0 / rate)


def start_operator(
    plane: ControlPlane, log_path: Path, *, ports: dict[str, int], extra: list[str]
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "draco.cli", "--log-level", "INFO", "operator"]
    argv += ["--metrics-port", str(ports["metrics"]), "--health-port", str(ports["health"]), *extra]
    with log_path.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=plane.env())


def start_webhook(plane: ControlPlane, folder: Path, *, port: int) -> subprocess.Popen[bytes]:
    """`draco webhook` as its own process (certificate files, configuration applied with
    kubectl), as a cluster runs it."""
    from draco.runtime.tls import write_webhook_certificates

    certs = write_webhook_certificates(["127.0.0.1", "localhost"], directory=folder / "tls")
    url = f"https://127.0.0.1:{port}"
    printed = subprocess.run(
        [sys.executable, "-m", "draco.cli", "webhook", "--print-configuration", "--url", url,
         "--ca-file", str(certs.ca_file)],
        capture_output=True, text=True, check=True, env=plane.env(),
    )  # fmt: skip
    argv = [sys.executable, "-m", "draco.cli", "--log-level", "WARNING", "webhook"]
    argv += ["--listen-address", "127.0.0.1", "--port", str(port), "--cert-file", str(certs.cert_file)]
    argv += ["--key-file", str(certs.key_file), "--metrics-port", "0", "--health-port", "0"]
    with (folder / "webhook.log").open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=plane.env())
    plane.kubectl("apply", "-f", "-", input=printed.stdout)
    return process


def stop_operator(operator: subprocess.Popen[bytes]) -> None:
    operator.terminate()
    try:
        operator.wait(30)
    except subprocess.TimeoutExpired:
        operator.kill()
        operator.wait(10)


async def wait_ready(session: aiohttp.ClientSession, port: int, operator: subprocess.Popen[bytes]) -> float:
    started = time.monotonic()
    while time.monotonic() - started < 300:
        if operator.poll() is not None:
            raise SystemExit("the operator exited")
        try:
            async with session.get(
                f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=5)
            ) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except (TimeoutError, aiohttp.ClientError):
            pass
        await asyncio.sleep(0.2)
    raise SystemExit("the operator did not become ready in 300 s")


def quantiles(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return (float("nan"),) * 3
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0], ordered[0], ordered[0]
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return cuts[49], cuts[98], ordered[-1]


def ms(value: float) -> str:
    return f"{value * 1000:.0f} ms"


async def slow_class_counted(kube: Kube, devices: int) -> bool:
    obj = await kube.get_or_none(DEVICE_CLASSES, "slow")
    return bool(obj and (obj.get("status") or {}).get("selectedDevices") == devices)


async def run(plane: ControlPlane, args: argparse.Namespace) -> None:
    kube = await connect()
    ports = {"metrics": free_port(), "health": free_port(), "webhook": free_port()}
    extra = (
        ["--allocation-timeout", str(args.allocation_timeout)] if args.allocation_timeout is not None else []
    )
    total_devices = args.nodes * args.devices
    log_path = Path(tempfile.mkdtemp(prefix="draco-stall-")) / "operator.log"
    selector = pathological_selector(args.pieces)
    try:
        plane.kubectl("create", "namespace", NAMESPACE)
        started = time.monotonic()
        await build_cluster(kube, nodes=args.nodes, devices=args.devices)
        print(
            f"cluster: {args.nodes} nodes x {args.devices} devices in {time.monotonic() - started:.1f}s; {load()}"
        )
        print(f"slow selector: {len(selector)} characters, {args.pieces} concatenations")
        webhook = start_webhook(plane, log_path.parent, port=ports["webhook"])
        await wait_webhook_answers(kube)
        print(f"draco webhook answering (its own process); {load()}")
        async with aiohttp.ClientSession() as session:
            operator = start_operator(plane, log_path, ports=ports, extra=extra)
            try:
                ready_s = await wait_ready(session, ports["health"], operator)
                print(f"operator ready in {ready_s:.1f}s; log: {log_path}")

                probes = Probes()
                stop = asyncio.Event()
                tasks = [
                    asyncio.create_task(
                        probe_healthz(session, f"http://127.0.0.1:{ports['health']}/healthz", probes, stop)
                    ),
                    asyncio.create_task(
                        probe_lag(session, f"http://127.0.0.1:{ports['metrics']}/metrics", probes, stop)
                    ),
                    asyncio.create_task(watch_ungated(kube, probes, stop)),
                ]
                # Baseline: the same probes and ordinary pods, no slow selector yet.
                baseline = Probes()
                baseline_stop = asyncio.Event()
                baseline_start = time.monotonic()
                baseline_tasks = [
                    asyncio.create_task(
                        probe_healthz(
                            session, f"http://127.0.0.1:{ports['health']}/healthz", baseline, baseline_stop
                        )
                    ),
                    asyncio.create_task(probe_webhook(kube, baseline, baseline_stop)),
                    asyncio.create_task(
                        create_ordinary(kube, baseline, baseline_stop, rate=args.rate, prefix="base")
                    ),
                ]
                await asyncio.sleep(args.baseline)
                baseline_stop.set()
                await asyncio.gather(*baseline_tasks, return_exceptions=True)
                baseline.ungated = probes.ungated
                report(
                    "baseline, no slow selector",
                    baseline,
                    window_start=baseline_start,
                    window_s=time.monotonic() - baseline_start,
                    admitted=baseline_start,
                    load_text=load(),
                )
                load_before = load()
                window_start = time.monotonic()
                slow_create_started = time.monotonic()
                await kube.create(
                    DEVICE_CLASSES,
                    {
                        "metadata": {"name": "slow"},
                        "spec": {"selectors": [{"cel": {"expression": selector}}]},
                    },
                )
                slow_create_s = time.monotonic() - slow_create_started
                await kube.create(
                    RESOURCE_CLAIMS,
                    {
                        "metadata": {"name": "slow-class", "namespace": NAMESPACE},
                        "spec": {
                            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "slow"}}]}
                        },
                    },
                )
                await kube.create(
                    RESOURCE_CLAIMS,
                    {
                        "metadata": {"name": "slow-request", "namespace": NAMESPACE},
                        "spec": {
                            "devices": {
                                "requests": [
                                    {
                                        "name": "gpu",
                                        "exactly": {
                                            "deviceClassName": "gpu",
                                            "selectors": [{"cel": {"expression": selector}}],
                                        },
                                    }
                                ]
                            }
                        },
                    },
                )
                for name, claim in (("slow-class-pod", "slow-class"), ("slow-request-pod", "slow-request")):
                    await kube.create(PODS, pod_body(name, {"resourceClaimName": claim}))
                    probes.created[name] = time.monotonic()
                tasks.append(asyncio.create_task(probe_webhook(kube, probes, stop)))
                tasks.append(asyncio.create_task(create_ordinary(kube, probes, stop, rate=args.rate)))

                class_counted_s: float | None = None
                while time.monotonic() - window_start < args.duration:
                    if class_counted_s is None and await slow_class_counted(kube, total_devices):
                        class_counted_s = time.monotonic() - window_start
                    if class_counted_s is not None and all(
                        name in probes.ungated for name in ("slow-class-pod", "slow-request-pod")
                    ):
                        break
                    await asyncio.sleep(0.5)
                window_s = time.monotonic() - window_start
                load_during = load()
                stop.set()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                timeouts = [
                    e
                    for e in await kube.list(EVENTS, namespace=NAMESPACE)
                    if e.get("reason") == "FailedScheduling" and "timed out" in str(e.get("note", ""))
                ]
            finally:
                stop_operator(operator)

            report(
                "during the stall",
                probes,
                window_start=window_start,
                window_s=window_s,
                admitted=slow_create_started + slow_create_s,
                load_text=f"before {load_before}; at the end {load_during}",
            )
            print(f"  storing the slow class through the webhook took {ms(slow_create_s)}")
            for name in ("slow-class-pod", "slow-request-pod"):
                if name in probes.ungated:
                    print(f"  {name}: allocated after {probes.ungated[name] - probes.created[name]:.1f}s")
                else:
                    print(f"  {name}: NOT allocated within the window")
            print(
                f"  timeout Events (FailedScheduling 'timed out'): {sum(int(e.get('deprecatedCount') or e.get('series', {}).get('count') or 1) for e in timeouts)}"
            )
            print(
                "  slow class status counted: "
                + (
                    f"after {class_counted_s:.1f}s"
                    if class_counted_s is not None
                    else "NOT within the window"
                )
            )

            # --- restart with the slow class stored ---------------------------------------
            probes = Probes()
            stop = asyncio.Event()
            operator = start_operator(plane, log_path, ports=ports, extra=extra)
            try:
                restart = time.monotonic()
                healthz = asyncio.create_task(
                    probe_healthz(session, f"http://127.0.0.1:{ports['health']}/healthz", probes, stop)
                )
                ready_s = await wait_ready(session, ports["health"], operator)
                remaining = args.restart_window - (time.monotonic() - restart)
                if remaining > 0:
                    await asyncio.sleep(remaining)
                stop.set()
                await asyncio.gather(healthz, return_exceptions=True)
            finally:
                stop_operator(operator)
            answered = [(when, latency) for when, latency in probes.healthz if when >= restart]
            first_ok = next((i for i, (_, lat) in enumerate(answered) if lat < PROBE_TIMEOUT_S), 0)
            latencies = [lat for _, lat in answered[first_ok:]]
            p50, p99, worst = quantiles(latencies)
            print(
                f"after a restart with the slow class stored ({args.restart_window:.0f}s from start; {load()}):\n"
                f"  ready in {ready_s:.1f}s; /healthz from its first answer: p50 {ms(p50)}, p99 {ms(p99)}, "
                f"max {ms(worst)} over {len(latencies)} probes"
            )
    finally:
        if "webhook" in locals():
            stop_operator(webhook)
        await kube.close()


async def wait_webhook_answers(kube: Kube) -> None:
    """Until kube-apiserver gets answers from the webhook (it refuses a broken class)."""
    broken = {"metadata": {"name": "broken-probe"}, "spec": {"selectors": [{"cel": {"expression": "x =="}}]}}
    for _ in range(600):
        try:
            await kube.api.call_api(
                DEVICE_CLASSES.path(),
                "POST",
                query_params=[("dryRun", "All")],
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body={"apiVersion": DEVICE_CLASSES.api_version, "kind": DEVICE_CLASSES.kind, **broken},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        except Exception as exc:
            if "denied the request" in str(exc):
                return
        await asyncio.sleep(0.2)
    raise SystemExit("the webhook did not answer in 120 s")


def report(
    title: str, probes: Probes, *, window_start: float, window_s: float, admitted: float, load_text: str
) -> None:
    in_window = [lat for when, lat in probes.healthz if when >= window_start]
    p50, p99, worst = quantiles(in_window)
    after = [lat for when, lat in probes.healthz if when >= admitted]
    a50, a99, aworst = quantiles(after)
    w50, w99, wworst = quantiles([lat for _, lat in probes.webhook])
    ordinary_created = [n for n in probes.created if n.startswith(("ordinary-", "base-"))]
    ordinary_done = [
        n for n in ordinary_created if n in probes.ungated and probes.ungated[n] <= window_start + window_s
    ]
    per_second: dict[int, int] = {}
    for name in ordinary_done:
        second = int(probes.ungated[name] - window_start)
        per_second[second] = per_second.get(second, 0) + 1
    seconds = max(int(window_s), 1)
    idle = sum(1 for s in range(1, seconds) if not per_second.get(s))
    lag = max(probes.lag) if probes.lag else float("nan")
    print(
        f"{title} ({window_s:.1f}s; {load_text}):\n"
        f"  /healthz: p50 {ms(p50)}, p99 {ms(p99)}, max {ms(worst)}, {probes.healthz_failed} failed, "
        f"{len(in_window)} probes (target p99 <= 1000 ms)\n"
        f"  /healthz once the slow class was stored: "
        f"p50 {ms(a50)}, p99 {ms(a99)}, max {ms(aworst)}, {len(after)} probes\n"
        f"  webhook (create a valid DeviceClass): p50 {ms(w50)}, p99 {ms(w99)}, max {ms(wworst)}, "
        f"{len(probes.webhook_failed)} failed of {len(probes.webhook)} (target <= 2000 ms)"
        + (f"; first failure: {probes.webhook_failed[0]}" if probes.webhook_failed else "")
        + "\n"
        f"  ordinary pods: {len(ordinary_done)}/{len(ordinary_created)} un-gated, "
        f"{len(ordinary_done) / window_s:.1f} pods/s; seconds of the window with none un-gated: "
        f"{idle}/{seconds - 1}\n"
        f"  draco_event_loop_lag_seconds: max {ms(lag)} over {len(probes.lag)} scrapes"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=130)
    parser.add_argument("--devices", type=int, default=100)
    # 240: a chain of 250 or more `+` exceeds CEL's parser recursion limit (kube-apiserver
    # rejects it as well), so this is about the costliest chain that is still legal.
    parser.add_argument("--pieces", type=int, default=240, help="concatenations in the slow selector (< 250)")
    parser.add_argument("--rate", type=float, default=5.0, help="ordinary pods created per second")
    parser.add_argument("--duration", type=float, default=240.0, help="longest stall window, seconds")
    parser.add_argument(
        "--baseline", type=float, default=30.0, help="seconds measured before the slow selector"
    )
    parser.add_argument("--restart-window", type=float, default=40.0, help="seconds probed after a restart")
    parser.add_argument(
        "--allocation-timeout", type=float, default=None, help="passed to the operator (default: its own)"
    )
    args = parser.parse_args()
    configure_logging(fmt="text", level="WARNING")
    with ControlPlane(binaries=find_binaries()) as plane:
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        asyncio.run(run(plane, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
