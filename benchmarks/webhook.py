"""`draco webhook`'s admission server under a slow selector and a large slice, over TLS.

Starts the server in-process on a loopback port (certificate from
`draco.runtime.tls.write_webhook_certificates`) and prints:

- how long a DeviceClass with `--selectors` selectors of 2,000 nested parentheses takes
  to be answered, and meanwhile: `/healthz` latency (p50/p99/max) and the largest
  event-loop lag seen by a 10 ms ticker (the validation runs in a thread, so the loop
  should keep answering);
- the time to answer a CREATE and an UPDATE review of a ~1 MiB ResourceSlice (the UPDATE
  carries two of them: ~2 MiB of JSON), validated (`/validate`) and defaulted (`/mutate`),
  and the largest event-loop lag while those are answered: Kopf answers admission on the
  loop (copying the object to build the patch), the checks run in threads;
- the time to answer a small claim's CREATE, median of 200 (what most requests are).

Requests are answered as `draco webhook` answers them: Kopf's admission machinery running
draco's handlers behind draco's server (Kopf's scan of the API's resources is replaced by
the resources draco's handlers name: `tests/unit/webhook/kopfkit.py`).

Run: `.venv/bin/python benchmarks/webhook.py [--selectors 4]`. No control plane needed.
"""

from __future__ import annotations

import os
import sys

# Python puts this script's folder first on the path, where benchmarks/operator.py would
# shadow the standard `operator` module; take the folder off again (os.path only).
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]
sys.path.append(os.path.dirname(_HERE))  # the repository: tests.unit.webhook.kopfkit

import argparse
import asyncio
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from draco.runtime.tls import ReloadingServerContext, write_webhook_certificates
from draco.tools.dev.controlplane import free_port
from draco.webhook.app import WebhookServer

V = "resource.draco.dev/v1"
PLURALS = {
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
    "ResourceSlice": "resourceslices",
}
DOMAIN = "gpu." + "d" * 47 + ".example.com"


def review(obj: dict[str, Any], *, operation: str = "CREATE", old: dict[str, Any] | None = None) -> bytes:
    request = {
        "uid": "b7e1",
        "kind": {"group": "resource.draco.dev", "version": "v1", "kind": obj["kind"]},
        "resource": {"group": "resource.draco.dev", "version": "v1", "resource": PLURALS[obj["kind"]]},
        "operation": operation,
        "userInfo": {"username": "bench"},
        "object": obj,
        "oldObject": old,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def big_slice() -> dict[str, Any]:
    devices = []
    for i in range(128):
        attributes: dict[str, Any] = {
            f"{DOMAIN}/attribute{j:02d}" + "x" * 21: {"string": f"{i:03d}-{j:02d}-" + "v" * 57}
            for j in range(31)
        }
        attributes[f"{DOMAIN}/index"] = {"int": i}
        hosts = [f"node-{k:02d}-" + "h" * 55 for k in range(40)]
        selector = {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": attributes,
                "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [selector]}]},
            }
        )
    return {
        "apiVersion": V,
        "kind": "ResourceSlice",
        "metadata": {"name": "big"},
        "spec": {
            "driver": "gpu.example.com",
            "perDeviceNodeSelection": True,
            "pool": {"name": "big", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


async def answer_of(http: aiohttp.ClientSession, url: str, data: bytes) -> tuple[int, bool]:
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
        return r.status, bool((await r.json())["response"]["allowed"])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(selectors: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="draco-bench-webhook-"))
    certs = write_webhook_certificates(["127.0.0.1"], directory=folder)
    tls = ReloadingServerContext(cert_file=certs.cert_file, key_file=certs.key_file)
    if hasattr(WebhookServer, "answer_with"):
        from tests.unit.webhook.kopfkit import admission_fn

        server = WebhookServer(tls=tls, listen_address="127.0.0.1", port=free_port())
        server.answer_with(admission_fn())
        print("admission answered by Kopf (draco.webhook.handlers)")
    else:  # draco before Kopf answered admission (`--baseline`-style comparisons)
        server = WebhookServer(tls=tls, namespace_labels=None, listen_address="127.0.0.1", port=free_port())  # type: ignore[call-arg]
        print("admission answered by draco's own server")
    started = time.perf_counter()
    await server.start()
    print(f"{'start (bind + warm-up)':<44} {time.perf_counter() - started:8.3f} s")
    base = f"https://127.0.0.1:{server.port}"
    context = ssl.create_default_context(cafile=str(certs.ca_file))
    headers = {"Content-Type": "application/json"}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
            deep = "(" * 2000 + "true" + ")" * 2000
            body = {
                "apiVersion": V,
                "kind": "DeviceClass",
                "metadata": {"name": "deep"},
                "spec": {"selectors": [{"cel": {"expression": deep}}] * selectors},
            }

            async def slow() -> float:
                t0 = time.perf_counter()
                async with http.post(f"{base}/validate", data=review(body), headers=headers) as r:
                    await r.read()
                return time.perf_counter() - t0

            idle: list[float] = []
            until = time.perf_counter() + 2
            while time.perf_counter() < until:
                t0 = time.perf_counter()
                await asyncio.sleep(0.01)
                idle.append(time.perf_counter() - t0 - 0.01)
            print(f"{'event-loop lag, idle (2 s, baseline)':<44} max {max(idle) * 1e3:7.1f} ms  "
                  f"p99 {pct(idle, 0.99) * 1e3:7.1f} ms")  # fmt: skip

            lags: list[float] = []
            probes: list[float] = []
            task = asyncio.create_task(slow())

            async def ticker() -> None:
                while not task.done():
                    t0 = time.perf_counter()
                    await asyncio.sleep(0.01)
                    lags.append(time.perf_counter() - t0 - 0.01)

            async def prober() -> None:
                while not task.done():
                    t0 = time.perf_counter()
                    async with http.get(f"{base}/healthz") as r:
                        await r.read()
                    probes.append(time.perf_counter() - t0)
                    await asyncio.sleep(0.05)

            await asyncio.gather(ticker(), prober())
            answer = await task
            label = f"deep class ({selectors} x 2,000 parentheses)"
            print(f"{label:<44} {answer:8.3f} s to answer")
            print(f"{'  /healthz meanwhile (n=' + str(len(probes)) + ')':<44} "
                  f"p50 {statistics.median(probes) * 1e3:7.1f} ms  p99 {pct(probes, 0.99) * 1e3:7.1f} ms  "
                  f"max {max(probes) * 1e3:7.1f} ms")  # fmt: skip
            print(f"{'  event-loop lag meanwhile':<44} max {max(lags) * 1e3:7.1f} ms  "
                  f"p99 {pct(lags, 0.99) * 1e3:7.1f} ms")  # fmt: skip

            obj = big_slice()
            create = review(obj)
            update = review(obj, operation="UPDATE", old=obj)
            big_lags: list[float] = []
            for path in ("validate", "mutate"):
                for name, data in (("create", create), ("update", update)):
                    times = []
                    for _ in range(3):
                        t0 = time.perf_counter()
                        request = asyncio.create_task(answer_of(http, f"{base}/{path}", data))
                        while not request.done():
                            tick = time.perf_counter()
                            await asyncio.sleep(0.005)
                            big_lags.append(time.perf_counter() - tick - 0.005)
                        status, allowed = await request
                        times.append(time.perf_counter() - t0)
                    label = f"1 MiB slice {name}, /{path} ({len(data) / 2**20:.2f} MiB)"
                    print(f"{label:<44} {min(times):8.3f} s best of 3 (HTTP {status}, allowed={allowed})")
            print(f"{'  event-loop lag meanwhile':<44} max {max(big_lags) * 1e3:7.1f} ms  "
                  f"p99 {pct(big_lags, 0.99) * 1e3:7.1f} ms")  # fmt: skip
            claim = {
                "apiVersion": V,
                "kind": "ResourceClaim",
                "metadata": {"name": "c", "namespace": "ns"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
            }
            small: list[float] = []
            for _ in range(200):
                t0 = time.perf_counter()
                await answer_of(http, f"{base}/validate", review(claim))
                small.append(time.perf_counter() - t0)
            print(f"{'small claim create, /validate (n=200)':<44} p50 {statistics.median(small) * 1e3:7.2f} ms  "
                  f"p99 {pct(small, 0.99) * 1e3:7.2f} ms")  # fmt: skip
    finally:
        await server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--selectors", type=int, default=4, help="deep selectors in the class (default 4)")
    args = parser.parse_args()
    print(
        f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}, cpus {os.cpu_count()}"
    )
    asyncio.run(run(args.selectors))
    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
