"""A large synthetic state for the operator's scrape-time collectors, built without an API
server: what a Prometheus scrape costs, and how many series it gets, at the size of a big
cluster (`benchmarks/metrics.py` prints the figures; `test_observability_metrics.py` checks
that no series is per pod or per claim).

The state: ``nodes`` nodes of ``devices`` devices each (one slice, one pool per node, every
50th device unhealthy), ``allocated`` claims holding one device each, ``pending`` gated pods
each waiting on a claim of one of ``classes`` DeviceClasses (a third not tried yet, a
third backing off, a third waiting for a change), and a ResourceQuota with two of draco's
entries in each of ``namespaces`` namespaces.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, cast

from prometheus_client import CollectorRegistry, generate_latest

from draco.allocator.inventory import Inventory
from draco.api.bodies import ResourceClaimBody
from draco.api.constants import SCHEDULING_GATE, UNHEALTHY_TAINT_KEY
from draco.api.corebodies import PodBody
from draco.api.quota import QuotaNames
from draco.operator.deviceclassstatus.metrics import ClassCollector
from draco.operator.resourcequota.metrics import QuotaCollector
from draco.operator.scheduler.pendingmetrics import PendingCollector
from draco.operator.scheduler.poolmetrics import PoolCollector
from draco.operator.scheduler.waiting import WaitingPods

__all__ = ["Scrape", "State", "scrape", "state"]

DRIVER = "gpu.example.com"
Obj = dict[str, Any]


@dataclass
class State:
    """What the collectors read, and the registry that holds them."""

    inventory: Inventory
    registry: CollectorRegistry
    pending: PendingCollector


@dataclass(frozen=True)
class Scrape:
    """One scrape: the exposition's bytes and its series per metric family."""

    body: bytes
    series: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.series.values())


def _slice(node: str, devices: int) -> Obj:
    return {
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    **({"taints": [{"key": UNHEALTHY_TAINT_KEY, "value": "xid-79", "effect": "NoExecute"}]}
                       if i % 50 == 49 else {}),
                }
                for i in range(devices)
            ],
        },
    }  # fmt: skip


def _allocated(index: int, node: str, device: int) -> Obj:
    result = {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{device}"}
    return {
        "metadata": {"name": f"held-{index}", "namespace": f"ns-{index % 100}"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def _pending_claim(index: int, device_class: str) -> ResourceClaimBody:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    return cast(
        ResourceClaimBody,
        {
            "metadata": {"name": f"wait-{index}", "namespace": "ns"},
            "spec": {"devices": {"requests": [request]}},
        },
    )


def _pod(index: int, created: str) -> PodBody:
    return cast(
        PodBody,
        {
            "metadata": {
                "name": f"p-{index}",
                "namespace": "ns",
                "uid": f"uid-{index}",
                "creationTimestamp": created,
            },
            "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}]},
        },
    )


def _quota(namespace: str, classes: int) -> Obj:
    entries = [f"class-{i}.deviceclass.resource.draco.dev/devices" for i in range(min(2, classes))]
    return {
        "metadata": {"name": "devices", "namespace": namespace},
        "spec": {"hard": dict.fromkeys(entries, "8")},
        "status": {"used": dict.fromkeys(entries, "3")},
    }


def state(*, nodes: int, devices: int, allocated: int, pending: int, classes: int, namespaces: int) -> State:
    """See the module docstring."""
    node_names = [f"node-{i}" for i in range(nodes)]
    held = [_allocated(i, node_names[i % nodes], (i // nodes) % devices) for i in range(allocated)]
    inventory = Inventory.build(
        classes=[], slices=[_slice(n, devices) for n in node_names], allocated_claims=held
    )
    class_bodies = [
        {
            "metadata": {"name": f"class-{i}"},
            "status": {"selectedDevices": nodes * devices, "allocatedDevices": allocated},
        }
        for i in range(classes)
    ]
    created = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    gated = {f"ns/p-{i}": _pod(i, created) for i in range(pending)}
    claims = {f"ns/wait-{i}": _pending_claim(i, f"class-{i % classes}") for i in range(pending)}
    waiters = WaitingPods(lambda _key, _delay: None)
    for i in range(pending):
        if i % 3 == 0:
            continue  # not tried yet: active
        waiters.wait(f"ns/p-{i}", frozenset({f"ns/wait-{i}"}), reason="unschedulable")
        if i % 3 == 1:
            waiters.failed(f"ns/p-{i}")  # backing off
    collector = PendingCollector(gated_pods=gated, waiters=waiters, claim=claims.get)
    registry = CollectorRegistry()
    for each in (
        collector,
        PoolCollector(lambda: inventory, refresh=lambda: None),
        ClassCollector(lambda: class_bodies),
        QuotaCollector(lambda: [_quota(f"ns-{i}", classes) for i in range(namespaces)], names=QuotaNames),
    ):
        registry.register(each)
    return State(inventory=inventory, registry=registry, pending=collector)


def scrape(registry: CollectorRegistry) -> Scrape:
    """What Prometheus gets from `registry`, and its series by family (histogram parts apart)."""
    body = generate_latest(registry)
    series: dict[str, int] = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            series[name] = series.get(name, 0) + 1
    return Scrape(body=body, series=series)
