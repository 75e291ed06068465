"""CPU of this process per API call of `draco.kube.client.Kube`, against a real kube-apiserver.

The machine the operator competes on is CPU-bound, so what counts is the client's own CPU
per request, not the latency. Starts etcd + kube-apiserver (`draco.tools.dev.controlplane`),
then runs the same workload through two clients, round by round, alternating which goes
first:

- ``call_api``: requests through kubernetes_asyncio's `ApiClient.call_api` (body
  sanitizing, `json`, its REST layer), as `Kube` did before it used orjson and the
  session directly (`LegacyKube` below keeps that path for the comparison);
- ``direct``: `Kube` as it is.

Each round, per client, in its own namespace: N creates of a Pod (a realistic body with
labels, annotations, a container with resources and a scheduling gate), N gets, N merge
patches, N server-side applies, a list of the N pods (pages of 500), five watches that
each read the 3N events those writes left (from the resourceVersion before them) and N
deletes. Also printed: `json.loads` against `orjson.loads` of one such watch line alone.
Printed: CPU microseconds of this process per call (`getrusage`, user + system and user
alone, median over rounds), the ratio, and the load average beside them (the API server runs on the same
machine; its CPU is not counted here, but it competes for the cores).

Run: ``KUBEBUILDER_ASSETS="$(hack/controlplane.sh)" .venv/bin/python benchmarks/kube_client.py
[--pods 300] [--rounds 5]``.
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
import json
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client

from draco.kube.answers import status_error
from draco.kube.client import NAMESPACES, PODS, Kube, Obj, WatchEvent, error_from_status
from draco.kube.client import Resource as KubeResource
from draco.kube.config import new_api_client
from draco.logs import configure_logging
from draco.tools.dev.controlplane import ControlPlane, find_binaries

_RESPONSE_TYPES = {200: "object", 201: "object", 202: "object"}
#: Watches per round, each reading the round's 3N events again (a phase long enough to time).
WATCHES = 5


class LegacyKube(Kube):
    """`Kube` with its requests through `ApiClient.call_api` and `json` (the path before)."""

    async def _call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        try:
            result = await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                response_types_map=_RESPONSE_TYPES,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        except client.ApiException as exc:
            body_bytes = exc.body.encode() if isinstance(exc.body, str) else b""
            raise status_error(
                body_bytes, code=int(exc.status or 0), what=what, fallback=exc.reason or ""
            ) from None
        return result if isinstance(result, dict) else {}

    async def watch(
        self,
        resource: KubeResource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 240,
    ) -> AsyncIterator[WatchEvent]:
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        what = f"watch {resource.plural}"
        response = await self.api.call_api(
            resource.path(namespace=namespace),
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=aiohttp.ClientTimeout(connect=30, sock_read=timeout_seconds + 30),
        )
        async with response:
            if response.status != 200:
                raise status_error(
                    await response.read(), code=response.status, what=what, fallback=response.reason or ""
                )
            while True:
                line = await response.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise error_from_status(obj, what=what)
                if event.get("type") != "BOOKMARK":
                    obj.setdefault("apiVersion", resource.api_version)
                    obj.setdefault("kind", resource.kind)
                yield WatchEvent(type=str(event.get("type")), object=obj)


def pod(name: str, i: int) -> Obj:
    return {
        "metadata": {
            "name": name,
            "labels": {"app": "bench", "index": str(i), "tier": "gpu"},
            "annotations": {"bench.draco.dev/note": "x" * 200},
        },
        "spec": {
            "schedulingGates": [{"name": "resource.draco.dev/allocation"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/bench:1",
                    "command": ["sleep", "infinity"],
                    "env": [{"name": f"VAR_{j}", "value": f"value-{j}"} for j in range(8)],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"cpu": "1", "memory": "256Mi"},
                        "claims": [{"name": "gpu"}],
                    },
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
        },
    }


Phase = tuple[str, int, Callable[[], Awaitable[None]]]


async def run_round(kube: Kube, namespace: str, n: int) -> dict[str, tuple[float, float]]:
    """CPU seconds (user + system, user) per call of each verb for one client, in `namespace`."""
    await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    names = [f"p{i:05d}" for i in range(n)]
    _, start_version = await kube.list_with_version(PODS, namespace=namespace)

    async def creates() -> None:
        for i, name in enumerate(names):
            await kube.create(PODS, pod(name, i), namespace=namespace)

    async def gets() -> None:
        for name in names:
            await kube.get(PODS, name, namespace=namespace)

    async def patches() -> None:
        for name in names:
            await kube.patch(
                PODS,
                name,
                {"metadata": {"annotations": {"bench.draco.dev/patched": "yes"}}},
                namespace=namespace,
            )

    async def applies() -> None:
        for name in names:
            await kube.apply(
                PODS,
                {"metadata": {"name": name, "namespace": namespace, "labels": {"applied": "yes"}}},
                field_manager="bench",
            )

    async def lists() -> None:
        items = await kube.list(PODS, namespace=namespace)
        assert len(items) == n, len(items)

    async def watch() -> None:
        for _ in range(WATCHES):
            seen = 0
            async for event in kube.watch(PODS, resource_version=start_version, namespace=namespace):
                if event.type != "BOOKMARK":
                    seen += 1
                if seen == 3 * n:
                    break

    async def deletes() -> None:
        for name in names:
            assert await kube.delete(PODS, name, namespace=namespace)

    phases: list[Phase] = [
        ("create", n, creates),
        ("get", n, gets),
        ("patch (merge)", n, patches),
        ("apply", n, applies),
        ("list (per item)", n, lists),
        ("watch (per event)", WATCHES * 3 * n, watch),
        ("delete", n, deletes),
    ]
    result: dict[str, tuple[float, float]] = {}
    total_cpu = total_user = 0.0
    total_calls = 0
    for label, calls, phase in phases:
        started = resource.getrusage(resource.RUSAGE_SELF)
        await phase()
        ended = resource.getrusage(resource.RUSAGE_SELF)
        user = ended.ru_utime - started.ru_utime
        cpu = user + ended.ru_stime - started.ru_stime
        result[label] = (cpu / calls, user / calls)
        total_cpu += cpu
        total_user += user
        total_calls += calls
    result["all calls"] = (total_cpu / total_calls, total_user / total_calls)
    return result


async def main_async(args: argparse.Namespace) -> None:
    with ControlPlane(binaries=find_binaries()) as plane:
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        clients: dict[str, Kube] = {
            "call_api": LegacyKube(await new_api_client()),
            "direct": Kube(await new_api_client()),
        }
        try:
            # Warm-up: connections, TLS, the API server's caches.
            for label, kube in clients.items():
                await run_round(kube, f"warm-{label.replace('_', '')}", 20)
            figures: dict[str, dict[str, list[tuple[float, float]]]] = {k: defaultdict(list) for k in clients}
            loads: list[float] = []
            for round_ in range(args.rounds):
                order = list(clients) if round_ % 2 == 0 else list(reversed(clients))
                for label in order:
                    loads.append(os.getloadavg()[0])
                    for verb, cpu in (
                        await run_round(clients[label], f"{label.replace('_', '')}-{round_}", args.pods)
                    ).items():
                        figures[label][verb].append(cpu)
                print(f"  round {round_ + 1}/{args.rounds} done (load {os.getloadavg()[0]:.2f})", flush=True)
            sample = await clients["direct"].create(PODS, pod("sample", 0), namespace="warm-direct")
        finally:
            for kube in clients.values():
                await kube.close()
    print(
        f"\nCPU of this process per call, µs (median of {args.rounds} rounds, {args.pods} pods a round; "
        f"load 1m {min(loads):.2f} to {max(loads):.2f}, {os.cpu_count()} cores)"
    )
    for title, index in (("user + system", 0), ("user only (the kernel's loopback TCP/TLS left out)", 1)):
        print(f"\n  {title}")
        print(f"  {'verb':<20} {'call_api':>10} {'direct':>10} {'direct/call_api':>16}")
        for verb in figures["direct"]:
            old = statistics.median(f[index] for f in figures["call_api"][verb]) * 1e6
            new = statistics.median(f[index] for f in figures["direct"][verb]) * 1e6
            print(f"  {verb:<20} {old:>10.0f} {new:>10.0f} {new / old:>16.2f}")
    line = json.dumps({"type": "MODIFIED", "object": sample}).encode() + b"\n"
    body = pod("p00000", 0)
    print(
        f"\n  alone, µs per call (a {len(line)}-byte watch line, a {len(json.dumps(body))}-byte create body)"
    )
    for label, old_fn, new_fn in (
        ("decode a watch line", lambda: json.loads(line), lambda: orjson.loads(line)),
        ("encode a body", lambda: json.dumps(body).encode(), lambda: orjson.dumps(body)),
    ):
        print(f"  {label:<20} json {cpu_per_call(old_fn):>6.1f}   orjson {cpu_per_call(new_fn):>6.1f}")


def cpu_per_call(fn: Callable[[], object], *, calls: int = 5000) -> float:
    started = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - started) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=300, help="pods per round and client")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    configure_logging(level="WARNING")
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
