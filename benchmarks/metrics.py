"""What a Prometheus scrape of the operator costs at the size of a big cluster.

Why: the operator's metrics of what waits and what is free (pending pods and groups, pools,
DeviceClasses, device quota) are computed when scraped, in the metrics server's thread,
from the allocation's own state; none is per pod or per claim. This measures, on a
synthetic state (`tests/unit/operator/scrapekit.py`: ``--nodes`` nodes of ``--devices``
devices, ``--allocated`` claims holding a device, ``--pending`` gated pods waiting on
``--classes`` classes, a quota in each of ``--namespaces`` namespaces), with no API server:

- the series per metric family and the exposition's size (what Prometheus stores);
- the time one scrape takes (``generate_latest`` over those collectors), ``--scrapes``
  times: the first after a change of the allocated state (the pools are computed), then
  with nothing changed (the last pools are served again), and per collector;
- the event loop's lag while a scrape runs in a thread beside it (the GIL is shared): the
  loop sleeps 10 ms again and again and the worst overshoot is printed, with the same
  figure for no scrape beside it, in the same run.

The load average is printed beside the figures: on a shared machine read the ratios.

Run: ``.venv/bin/python benchmarks/metrics.py [--nodes 5000] [--devices 8]
[--allocated 20000] [--pending 20000] [--classes 20] [--namespaces 100] [--scrapes 5]``.
"""

from __future__ import annotations

import sys

# benchmarks/ holds operator.py, named like the standard library's `operator`: this
# folder must not come first on sys.path; the checkout's root goes in its place (the kit).
if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    sys.path[0] = sys.path[0].rstrip("/").removesuffix("benchmarks").rstrip("/") or "."

import argparse
import asyncio
import os
import statistics
import threading
import time

from prometheus_client import CollectorRegistry, generate_latest
from tests.unit.operator.scrapekit import scrape, state


def _load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _timed(registry: CollectorRegistry) -> float:
    started = time.perf_counter()
    generate_latest(registry)
    return time.perf_counter() - started


async def _worst_lag(seconds: float, during: threading.Thread | None) -> float:
    """The worst overshoot of a 10 ms sleep over `seconds` (while `during` runs, when given)."""
    if during is not None:
        during.start()
    worst, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline or (during is not None and during.is_alive()):
        started = time.perf_counter()
        await asyncio.sleep(0.01)
        worst = max(worst, time.perf_counter() - started - 0.01)
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--allocated", type=int, default=20000)
    parser.add_argument("--pending", type=int, default=20000)
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=5)
    args = parser.parse_args()

    started = time.perf_counter()
    built = state(
        nodes=args.nodes,
        devices=args.devices,
        allocated=args.allocated,
        pending=args.pending,
        classes=args.classes,
        namespaces=args.namespaces,
    )
    print(
        f"state: {args.nodes} nodes x {args.devices} devices, {args.allocated} allocated claims, "
        f"{args.pending} pending pods, {args.classes} classes, {args.namespaces} quotas "
        f"(built in {time.perf_counter() - started:.1f}s; {_load()})"
    )
    result = scrape(built.registry)
    print(f"series: {result.total} in {len(result.body) / 1e6:.2f} MB")
    for name, count in sorted(result.series.items()):
        print(f"  {name:<50} {count:>7}")

    holder = built.inventory.devices[0]
    changed, unchanged = [], []
    for _ in range(args.scrapes):
        # One device released and taken again: the pools are computed again.
        claim = {"metadata": {"name": "churn", "namespace": "ns"}, "status": {"allocation": {"devices": {
            "results": [{"request": "r", "driver": holder.driver, "pool": holder.pool, "device": holder.name}]}}}}  # fmt: skip
        built.inventory.mark_allocated(claim)
        changed.append(_timed(built.registry))
        unchanged.append(_timed(built.registry))
        built.inventory.release(claim)
    print(
        f"scrape after a change: median {statistics.median(changed) * 1e3:.0f} ms, "
        f"max {max(changed) * 1e3:.0f} ms ({_load()})"
    )
    print(
        f"scrape with nothing changed: median {statistics.median(unchanged) * 1e3:.0f} ms, "
        f"max {max(unchanged) * 1e3:.0f} ms ({_load()})"
    )
    for collector in list(built.registry._collector_to_names):  # (prometheus_client has no public list)
        alone = CollectorRegistry()
        alone.register(collector)
        built.inventory.changes += 1  # computed afresh
        print(f"  {type(collector).__name__:<20} {_timed(alone) * 1e3:>6.0f} ms")

    def one_scrape() -> None:
        built.inventory.changes += 1
        generate_latest(built.registry)

    quiet = asyncio.run(_worst_lag(1.0, None))
    busy = asyncio.run(_worst_lag(0.0, threading.Thread(target=one_scrape)))
    print(
        f"event loop: worst lag of a 10 ms sleep {quiet * 1e3:.0f} ms alone, "
        f"{busy * 1e3:.0f} ms beside a scrape after a change ({_load()})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
