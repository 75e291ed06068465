"""What a watch event costs through Kopf's reactor, and through the operator's informer and
feed, to the same Kopf event handler.

Why: the operator's Kopf event handlers are fed by its informers (`draco.operator.feed`),
not by Kopf's watches. One reason is this measurement: at 20,000 pods and claims, what Kopf
spends per event and keeps per object must fit the operator's CPU and its memory target.

Two pipelines, the same synthetic pods (a claims annotation, a gate, one container), N
objects, each added then modified R-1 times, the events handed over in order:

- **Kopf**: Kopf's watch-stream machinery as `kopf.operator` runs it for a watched
  resource (its per-object queues and workers, `process_resource_event`: causes, loggers,
  the handler's invocation), one ``@kopf.on.event`` handler; the stream itself is replaced
  by the events (no API), and Kopf's diff-base essence is skipped (no change-detecting
  handler needs it; it would add a deep copy of every object per event);
- **informer + feed**: `draco.kube.informer.Informer` (the pod informer's trim and its
  claims index) and `draco.operator.feed.subscribe`, one ``@kopf.on.event`` handler.

Printed per pipeline: CPU microseconds per event, and the memory each keeps per object once
the events are handled (tracemalloc: Kopf's per-object memories; the informer's cache
holds the objects themselves, which Kopf's does not).

Run: ``.venv/bin/python benchmarks/kopf_events.py [--objects 20000] [--rounds 3]``. Uses
Kopf's internals (a benchmark, not the operator).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import kopf
from kopf._cogs.clients import watching
from kopf._cogs.structs import references
from kopf._core.actions import lifecycles
from kopf._core.engines import indexing
from kopf._core.reactor import inventory, processing, queueing

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.frame.settings import configure_kopf
from draco.kube.client import PODS
from draco.kube.compact import Compactor
from draco.kube.informer import Informer
from draco.operator import feed
from draco.operator.informers import POD_REFERENCES, pod_references, trim_pod


def pod(i: int, version: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i}",
            "namespace": "bench",
            "uid": f"uid-{i:08d}",
            "resourceVersion": str(version),
            "annotations": {
                CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": "t"}])
            },
            "labels": {"app": "bench"},
        },
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m"}}}],
            "schedulingGates": [{"name": SCHEDULING_GATE}],
        },
        "status": {"phase": "Pending"},
    }


def events(objects: int, rounds: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("ADDED" if r == 0 else "MODIFIED", pod(i, r * objects + i + 1))
        for r in range(rounds)
        for i in range(objects)
    ]


class _NoDiffBase(kopf.DiffBaseStorage):
    """Kopf's essence of an object is read only by change-detecting handlers (none here)."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return kopf.BodyEssence()

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


async def through_kopf(stream: list[tuple[str, dict[str, Any]]], *, trace: bool) -> tuple[float, float]:
    """CPU seconds, and (`trace`) bytes Kopf keeps per object afterwards."""
    registry = kopf.OperatorRegistry()
    handled = 0
    all_handled = asyncio.Event()

    @kopf.on.event("v1", "pods", registry=registry)
    async def handler(**_: Any) -> None:  # async: Kopf runs a plain function in a thread
        nonlocal handled
        handled += 1
        if handled == len(stream):
            all_handled.set()

    settings = configure_kopf(kopf.OperatorSettings(), watches_crds=False)
    settings.persistence.diffbase_storage = _NoDiffBase()
    resource = references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
    memories = inventory.ResourceMemories()

    async def replayed(**_: Any) -> AsyncIterator[Any]:
        for type_, obj in stream:
            yield {"type": type_, "object": obj}
        await all_handled.wait()
        raise asyncio.CancelledError  # ends the watcher, as an operator's stop does

    queueing.watching.infinite_watch = replayed  # type: ignore[assignment]
    watching.infinite_watch = replayed  # type: ignore[assignment]
    processor = functools.partial(
        processing.process_resource_event,
        lifecycle=lifecycles.all_at_once,
        registry=registry,
        settings=settings,
        indexers=indexing.OperatorIndexers(),
        memories=memories,
        memobase=kopf.Memo(),
        event_queue=asyncio.Queue(),
        resource=resource,
    )
    gc.collect()
    if trace:
        tracemalloc.start()
    started = time.process_time()
    with contextlib.suppress(asyncio.CancelledError, RuntimeError):
        await queueing.watcher(namespace=None, settings=settings, resource=resource, processor=processor)
    cpu = time.process_time() - started
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] if trace else 0
    tracemalloc.stop()
    objects = len(list(memories.iter_all_memories()))
    return cpu, kept / max(objects, 1)


def through_informer(
    stream: list[tuple[str, dict[str, Any]]], objects: int, *, trace: bool
) -> tuple[float, float]:
    registry = kopf.OperatorRegistry()
    handled = 0

    @kopf.on.event("v1", "pods", registry=registry)
    def handler(**_: Any) -> None:
        nonlocal handled
        handled += 1

    compactor = Compactor()
    informer: Informer[Any] = Informer(None, PODS, trim=lambda p: trim_pod(p, compactor=compactor))  # type: ignore[arg-type]
    informer.add_index(POD_REFERENCES, pod_references)
    feed.subscribe(informer, registry, memo=kopf.Memo())
    gc.collect()
    if trace:
        tracemalloc.start()
    started = time.process_time()
    for type_, obj in stream:
        informer.apply(type_, obj)
    cpu = time.process_time() - started
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] if trace else 0
    tracemalloc.stop()
    assert handled == len(stream)
    return cpu, kept / objects


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine load (1/5/15 min): {load}, cpus {os.cpu_count()}; {args.objects} pods x {args.rounds} events"
    )
    n = args.objects * args.rounds
    # CPU untraced (tracemalloc slows every allocation), then the memory traced.
    cpu, _ = through_informer(events(args.objects, args.rounds), args.objects, trace=False)
    _, kept = through_informer(events(args.objects, args.rounds), args.objects, trace=True)
    print(
        f"{'informer + feed':<18} {cpu / n * 1e6:7.1f} us/event   {kept / 1024:6.2f} KB/object (the cache: the objects)"
    )
    cpu, _ = asyncio.run(through_kopf(events(args.objects, args.rounds), trace=False))
    _, kept = asyncio.run(through_kopf(events(args.objects, args.rounds), trace=True))
    print(
        f"{'Kopf reactor':<18} {cpu / n * 1e6:7.1f} us/event   {kept / 1024:6.2f} KB/object (its memories, no object)"
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine load (1/5/15 min): {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
