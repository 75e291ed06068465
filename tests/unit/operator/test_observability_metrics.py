"""The operator's metrics of what waits and what is free, read from the registry as
Prometheus would scrape it, with the controllers running in-process over the in-memory API
server: pending pods and groups by queue and reason, the classes they wait for, free
devices per pool, device quota, DeviceClass counts, and how long pods waited."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from draco.api.constants import UNHEALTHY_TAINT_KEY
from draco.kube import client as k
from draco.kube.client import Obj
from draco.operator.deviceclassstatus.controller import ClassStatusController
from draco.operator.podwait.controller import PodWaitController
from draco.operator.resourceclaim.controller import LifecycleController
from draco.operator.resourcequota.controller import QuotaController
from draco.operator.scheduler.controller import AllocationController
from draco.runtime.metrics import REGISTRY

from ..fakekube import FakeAPI
from ..virtualtime import run_virtual
from .scrapekit import DRIVER, scrape, state
from .test_controllers import bind, device_class, node, node_slice, placed, pod, running, template, until


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def _pending(**labels: str) -> float:
    return sample("draco_pending_pods", **labels) or 0.0


def test_a_pod_waiting_for_a_class_without_devices_is_counted_with_its_reason_and_class() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        api.put(k.NODES, node("n1"))
        api.put(k.PODS, pod("p", gated=True))
        async with running(api, LifecycleController, AllocationController) as (_kube, _informers, built):
            allocation: AllocationController = built[1]
            assert (
                sample("draco_pending_pods", queue="backoff", reason="untried") == 0
            )  # a series before anything waits
            await until(
                lambda: _pending(queue="backoff", reason="unschedulable") + _pending(queue="unschedulable", reason="unschedulable") == 1,
                what="the pod counted as unschedulable",
            )  # fmt: skip
            assert sample("draco_pending_pod_deviceclass_requests", deviceclass="gpu") == 1
            (collector, _pools) = allocation.collectors
            collector.wall_clock = lambda: time.time() + 120  # type: ignore[attr-defined]
            waited = sample("draco_pending_pod_max_wait_seconds", reason="unschedulable")
            assert waited is not None and 119 <= waited <= 125
            # Backoff first (1 s), then waiting for a change.
            await asyncio.sleep(15)
            assert _pending(queue="unschedulable", reason="unschedulable") == 1
        assert (
            sample("draco_pending_pods", queue="active", reason="untried") is None
        )  # unregistered when stopped

    run_virtual(main())


def test_free_devices_per_pool_and_class_and_the_wait_of_a_placed_pod() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        for name in ("n1", "n2"):
            api.put(k.NODES, node(name))
            api.put(
                k.RESOURCE_SLICES,
                node_slice(
                    name,
                    devices=2,
                    taints=[{"key": UNHEALTHY_TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"}]
                    if name == "n2"
                    else None,
                ),
            )
        allocated_before = sample("draco_pod_wait_seconds_count", until="allocated") or 0.0
        bound_before = sample("draco_pod_wait_seconds_count", until="bound") or 0.0
        api.put(k.PODS, pod("p", gated=True))
        controllers = (LifecycleController, ClassStatusController, PodWaitController, AllocationController)
        async with running(api, *controllers):
            await until(lambda: placed(api, "p"), what="the pod placed")
            await until(
                lambda: sample("draco_resourcepool_allocated_devices", driver="gpu.example.com", pool="n1", node="n1") == 1,
                what="the pool's allocated device counted",
            )  # fmt: skip
            assert sample("draco_resourcepool_devices", driver="gpu.example.com", pool="n1", node="n1") == 2
            assert (
                sample("draco_resourcepool_available_devices", driver="gpu.example.com", pool="n1", node="n1")
                == 1
            )
            assert (
                sample(
                    "draco_resourcepool_unavailable_devices", driver="gpu.example.com", pool="n2", node="n2"
                )
                == 2
            )
            assert (
                sample("draco_resourcepool_available_devices", driver="gpu.example.com", pool="n2", node="n2")
                == 0
            )
            for name, unhealthy in (("n1", 0), ("n2", 2)):
                labels = {"driver": "gpu.example.com", "pool": name, "node": name}
                assert sample("draco_resourcepool_unhealthy_devices", **labels) == unhealthy
            await until(
                lambda: sample("draco_deviceclass_allocated_devices", deviceclass="gpu") == 1, what="class"
            )
            assert sample("draco_deviceclass_selected_devices", deviceclass="gpu") == 4
            await until(
                lambda: sample("draco_pod_wait_seconds_count", until="allocated") == allocated_before + 1,
                what="the wait until allocated observed",
            )
            assert sample("draco_pod_wait_seconds_count", until="bound") == bound_before
            bind(api, "p")
            await until(
                lambda: sample("draco_pod_wait_seconds_count", until="bound") == bound_before + 1,
                what="the wait until bound observed",
            )
            assert sample("draco_pod_wait_seconds_count", until="allocated") == allocated_before + 1

    run_virtual(main())


def test_device_quota_hard_and_used_per_class() -> None:
    async def main() -> None:
        api = FakeAPI()
        entry = "gpu.deviceclass.resource.draco.dev/devices"
        # The shared entries of the class's extended resources (Kubernetes 1.35) too.
        shared = ("requests.deviceclass.resource.draco.dev/gpu", "requests.example.com/gpu")
        quota: Obj = {
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"hard": {entry: "4", "pods": "10", **dict.fromkeys(shared, "6")}},
        }
        api.put(k.RESOURCE_QUOTAS, quota)
        api.put(k.DEVICE_CLASSES, {**device_class(), "spec": {"extendedResourceName": "example.com/gpu"}})
        spec: dict[str, Any] = {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 3}}]}
        }
        api.put(k.RESOURCE_CLAIMS, {"metadata": {"name": "c", "namespace": "ns"}, "spec": spec})
        labels = {"namespace": "ns", "resourcequota": "q", "resource": entry, "deviceclass": "gpu"}
        async with running(api, QuotaController):
            await until(
                lambda: sample("draco_resourcequota", **labels, type="used") == 3, what="used counted"
            )
            assert sample("draco_resourcequota", **labels, type="hard") == 4
            for resource in shared:
                named = {**labels, "resource": resource}
                await until(lambda: sample("draco_resourcequota", **named, type="used") == 3, what=resource)  # noqa: B023
                assert sample("draco_resourcequota", **named, type="hard") == 6
            assert (
                sample(
                    "draco_resourcequota",
                    namespace="ns",
                    resourcequota="q",
                    resource="pods",
                    deviceclass="",
                    type="hard",
                )
                is None
            )

    run_virtual(main())


def test_no_series_is_per_pod_or_per_claim() -> None:
    """A hundred times the pods and claims, the same series; the pool metrics grow with the
    pools only (benchmarks/metrics.py measures a scrape at 20,000 pods on 5,000 nodes)."""
    small = scrape(state(nodes=4, devices=8, allocated=10, pending=30, classes=3, namespaces=2).registry)
    large = scrape(state(nodes=4, devices=8, allocated=30, pending=3000, classes=3, namespaces=2).registry)
    assert small.series == large.series
    more_pools = scrape(
        state(nodes=40, devices=8, allocated=10, pending=30, classes=3, namespaces=2).registry
    )
    grown = {name for name in more_pools.series if more_pools.series[name] != small.series[name]}
    assert grown == {name for name in small.series if name.startswith("draco_resourcepool_")}
    assert all(more_pools.series[name] == 40 for name in grown)


def test_the_pools_served_again_follow_every_allocation_and_release() -> None:
    built = state(nodes=2, devices=2, allocated=1, pending=0, classes=1, namespaces=0)
    labels = {"driver": DRIVER, "pool": "node-1", "node": "node-1"}

    def allocated() -> float | None:
        return built.registry.get_sample_value("draco_resourcepool_allocated_devices", labels)

    assert allocated() == 0
    device = next(d for d in built.inventory.devices if d.pool == "node-1")
    result = {"request": "r", "driver": DRIVER, "pool": "node-1", "device": device.name}
    claim: Obj = {
        "metadata": {"name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    built.inventory.mark_allocated(claim)
    assert allocated() == 1
    built.inventory.release(claim)
    assert allocated() == 0
