"""The operator's informers: one per kind, all listed before any controller starts, and a
re-list after a 410 reports the slices and nodes that vanished meanwhile to every
subscriber (what Kopf's watches never did)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from draco.kube.client import Obj, Resource, WatchEvent, error_from_status
from draco.operator.informers import Informers, trim_node


def obj(name: str, rv: int, **extra: Any) -> Obj:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(rv)}, **extra}


class Cluster:
    """Answers each kind's LISTs from a script (the last answer repeats), and each watch,
    once ``expire`` is set, with a 410 (too old: list again), then blocks like a quiet
    watch."""

    def __init__(self, lists: dict[str, list[list[Obj]]]) -> None:
        self.lists = lists
        self.expired: set[str] = set()
        self.expire = asyncio.Event()

    async def list_with_version(
        self, resource: Resource, *, namespace: str | None = None, each: Callable[[Obj], Obj] | None = None
    ) -> tuple[list[Obj], str]:
        script = self.lists.get(resource.plural) or [[]]
        items = script.pop(0) if len(script) > 1 else script[0]
        return ([each(i) for i in items] if each else items), "100"

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        timeout_seconds: int = 0,
    ) -> AsyncIterator[WatchEvent]:
        await self.expire.wait()
        if resource.plural not in self.expired:
            self.expired.add(resource.plural)
            raise error_from_status({"kind": "Status", "code": 410, "message": "too old"}, what="watch")
        await asyncio.Event().wait()
        yield WatchEvent(type="BOOKMARK", object={})  # pragma: no cover


async def test_a_relist_reports_the_slices_and_nodes_that_went_away() -> None:
    cluster = Cluster(
        {
            "resourceslices": [[obj("s1", 5), obj("s2", 6)], [obj("s2", 6)]],
            "nodes": [[obj("n1", 7), obj("n2", 8)], [obj("n1", 7)]],
        }
    )
    informers = Informers.over(cluster)
    await informers.start()
    # The sync barrier: everything listed before anyone subscribes.
    assert len(informers.slices) == 2 and len(informers.nodes) == 2
    gone: list[str] = []
    both = asyncio.Event()

    def deleted(type_: str, obj: Obj) -> None:
        if type_ == "DELETED":
            gone.append(obj["metadata"]["name"])
            if len(gone) == 2:
                both.set()

    informers.slices.subscribe(deleted)
    informers.nodes.subscribe(deleted)
    cluster.expire.set()
    try:
        await asyncio.wait_for(both.wait(), timeout=10)
    finally:
        await informers.stop()
    assert sorted(gone) == ["n2", "s1"]


def test_a_cached_node_keeps_what_the_controllers_read() -> None:
    node = {
        "metadata": {"name": "n", "labels": {"a": "b"}, "managedFields": [{}], "annotations": {"x": "y"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": True},
        "status": {
            "allocatable": {"cpu": "4"},
            "capacity": {"example.com/gpu": "2"},
            "images": [{"names": ["big"]}],
            "conditions": [{"type": "Ready"}],
        },
    }
    trimmed = trim_node(node)
    assert trimmed["metadata"] == {"name": "n", "labels": {"a": "b"}}
    assert trimmed["spec"] == node["spec"]
    assert trimmed["status"] == {
        "allocatable": {"cpu": "4"},
        "capacity": {"example.com/gpu": "2"},
        "images": [{"names": ["big"]}],  # kube-scheduler's ImageLocality score reads them
    }


def device_slice(name: str, node: str, rv: int) -> Obj:
    return obj(
        name,
        rv,
        spec={
            "driver": "gpu.example.com",
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [{"name": "gpu-0"}],
        },
    )


def node_obj(name: str, rv: int) -> Obj:
    return obj(name, rv, status={"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}})


async def test_the_allocation_controller_stops_offering_what_a_relist_found_gone() -> None:
    """The allocation controller's Kopf handlers over the informers: a slice and a node
    that vanished while the watch was broken (found by the LIST after a 410) leave its view."""
    from kubernetes_asyncio import client as k8s

    from draco.kube.client import Kube
    from draco.operator.options import OperatorOptions
    from draco.operator.scheduler.controller import AllocationController
    from draco.runtime.health import Health
    from draco.runtime.offload import Offloader

    cluster = Cluster(
        {
            "resourceslices": [
                [device_slice("a-gpu", "a", 5), device_slice("b-gpu", "b", 6)],
                [device_slice("b-gpu", "b", 6)],
            ],
            "nodes": [
                [node_obj("a", 7), node_obj("b", 8), node_obj("c", 9)],
                [node_obj("a", 7), node_obj("c", 9)],
            ],
        }
    )
    informers = Informers.over(cluster)
    await informers.start()
    kube = Kube(k8s.ApiClient())
    health = Health()
    controller = AllocationController(
        kube=kube,
        informers=informers,
        options=OperatorOptions(extended_resources=False),
        health=health,
    )
    inline = Offloader(processes=0)  # no CEL worker process in a unit test
    controller.service.offload = controller.service.placer.offload = inline
    await controller.start()
    view = controller.service.view
    try:
        assert set(view.slices) == {"a-gpu", "b-gpu"} and set(view.nodes) == {"a", "b", "c"}
        assert health.ready
        gone: set[str] = set()
        both = asyncio.Event()

        def deleted(type_: str, obj: Obj) -> None:
            if type_ == "DELETED":
                gone.add(obj["metadata"]["name"])
                if gone == {"a-gpu", "b"}:
                    both.set()

        informers.slices.subscribe(deleted, replay=False)
        informers.nodes.subscribe(deleted, replay=False)
        cluster.expire.set()
        await asyncio.wait_for(both.wait(), timeout=10)
        assert set(view.slices) == {"b-gpu"}
        assert set(view.nodes) == {"a", "c"}
        assert set(view.inventory().by_key) == {("gpu.example.com", "b", "gpu-0")}
    finally:
        await controller.stop()
        await informers.stop()
        inline.shutdown()
        await kube.close()


def test_cached_pods_claims_and_slices_are_equal_to_the_api_objects_but_share_parts() -> None:
    from draco.kube.compact import Compactor
    from draco.operator.informers import trim_claim, trim_pod, trim_slice

    compactor = Compactor()

    def pod(name: str, node: str) -> Obj:
        return {
            "metadata": {"name": name, "uid": f"u-{name}", "managedFields": [{"manager": "m"}]},
            "spec": {
                "containers": [{"name": "main", "image": "img"}],
                "nodeName": node,
                "affinity": {"nodeAffinity": {"values": [node]}},
            },
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled"}]},
        }

    pods = [trim_pod(pod(f"p{i}", f"n{i // 2}"), compactor=compactor) for i in range(4)]
    for i, cached in enumerate(pods):
        expected = pod(f"p{i}", f"n{i // 2}")
        del expected["metadata"]["managedFields"]
        assert cached == expected
    assert pods[0]["spec"]["containers"] is pods[3]["spec"]["containers"]
    assert pods[0]["spec"]["affinity"] is pods[1]["spec"]["affinity"]
    assert pods[0]["spec"]["affinity"] is not pods[2]["spec"]["affinity"]
    assert pods[0]["metadata"] is not pods[1]["metadata"]

    def claim(name: str) -> Obj:
        return {
            "metadata": {"name": name, "managedFields": [{}]},
            "spec": {"devices": {"requests": [{"name": "gpu"}]}},
            "status": {
                "allocation": {"devices": {"results": [{"device": name}]}, "nodeSelector": {"n": ["a"]}}
            },
        }

    one, two = (trim_claim(claim(n), compactor=compactor) for n in ("c1", "c2"))
    assert one == {k: v for k, v in claim("c1").items()} | {"metadata": {"name": "c1"}}
    assert one["spec"] is two["spec"]
    assert one["status"]["allocation"]["nodeSelector"] is two["status"]["allocation"]["nodeSelector"]
    assert one["status"]["allocation"]["devices"] is not two["status"]["allocation"]["devices"]

    def slice_(node: str) -> Obj:
        devices = [
            {
                "name": f"gpu-{d}",
                "attributes": {"model": {"string": "A100"}, "node": {"string": node}},
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for d in range(2)
        ]
        return {
            "metadata": {"name": node, "managedFields": [{}]},
            "spec": {"driver": "d", "devices": devices},
        }

    s1, s2 = (trim_slice(slice_(n), compactor=compactor) for n in ("n1", "n2"))
    assert s1 == slice_("n1") | {"metadata": {"name": "n1"}}
    first, second = s1["spec"]["devices"]
    assert first["attributes"]["model"] is s2["spec"]["devices"][0]["attributes"]["model"]
    assert first["attributes"]["node"] is second["attributes"]["node"]
    assert first["capacity"]["memory"] is s2["spec"]["devices"][1]["capacity"]["memory"]
