"""`draco top`'s view and tables from objects as the API returns them (the command against
a real API server: tests/e2e/test_observability.py)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    POD_CLAIM_NAME_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_SCHEDULED_CONDITION,
    SCHEDULING_GATE,
    UNHEALTHY_TAINT_KEY,
)
from draco.tools.top.render import duration, render
from draco.tools.top.view import Objects, build

Obj = dict[str, Any]
DRIVER = "gpu.example.com"
NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def stamp(minutes_ago: float) -> str:
    return (NOW - datetime.timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_slice(node: str) -> Obj:
    return {
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "gpu-0"},
                {"name": "gpu-1"},
                {
                    "name": "gpu-2",
                    "taints": [{"key": UNHEALTHY_TAINT_KEY, "value": "xid-79", "effect": "NoExecute"}],
                },
                {
                    "name": "shared-0",
                    "allowMultipleAllocations": True,
                    "capacity": {"memory": {"value": "80Gi"}},
                },
            ],
        },
    }


def result(device: str, **extra: Any) -> Obj:
    return {"request": "dev", "driver": DRIVER, "pool": "node-a", "device": device, **extra}


def pod(name: str, *, uid: str, gated: bool = False, claims: list[Obj] | None = None, **meta: Any) -> Obj:
    body: Obj = {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "creationTimestamp": stamp(5), **meta},
        "spec": {"containers": [{"name": "main"}, {"name": "side"}]},
    }
    if claims is not None:
        body["metadata"].setdefault("annotations", {})[CLAIMS_ANNOTATION] = json.dumps(claims)
    if gated:
        body["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return body


def claim(
    name: str, *, results: list[Obj] | None = None, reserved: list[Obj] | None = None, **meta: Any
) -> Obj:
    body: Obj = {
        "metadata": {"name": name, "namespace": "ns", **meta},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if results is not None:
        body["status"] = {"allocation": {"devices": {"results": results}}, "reservedFor": reserved or []}
    return body


def owner(uid: str) -> list[Obj]:
    return [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": uid, "controller": True}]


def cluster() -> Objects:
    holder = pod(
        "holder",
        uid="u-holder",
        claims=[{"name": "dev", "resourceClaimTemplateName": "t", "containers": ["main"]}],
    )
    sharer = pod("sharer", uid="u-sharer", claims=[{"name": "dev", "resourceClaimName": "shared"}])
    waiter = pod(
        "waiter",
        uid="u-waiter",
        gated=True,
        claims=[{"name": "dev", "resourceClaimTemplateName": "t"}],
        creationTimestamp=stamp(12),
    )
    waiter["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION] = json.dumps({"dev": "waiter-dev-y"})
    return Objects(
        classes=[
            {
                "metadata": {"name": "gpu"},
                "status": {
                    "selectedDevices": 4,
                    "allocatedDevices": 2,
                    "conditions": [{"type": "Valid", "status": "True"}],
                },
            }
        ],
        slices=[node_slice("node-a")],
        claims=[
            claim(
                "holder-dev-x",
                results=[result("gpu-0")],
                reserved=[{"resource": "pods", "name": "holder", "uid": "u-holder"}],
                ownerReferences=owner("u-holder"),
                annotations={POD_CLAIM_NAME_ANNOTATION: "dev"},
            ),
            claim(
                "shared",
                results=[result("shared-0", consumedCapacity={"memory": "10Gi"}, shareID="s1")],
                reserved=[{"resource": "pods", "name": "sharer", "uid": "u-sharer"}],
            ),
            claim("waiter-dev-y", ownerReferences=owner("u-waiter")),
        ],
        templates=[
            {
                "metadata": {"name": "mig", "namespace": "ns"},
                "spec": {"spec": {"devices": {"requests": [{"name": "d", "exactly": {"deviceClassName": "mig-1g"}}]}}},
            }
        ],
        pods=[
            holder,
            sharer,
            waiter,
            pod("unmade", uid="u-unmade", gated=True, claims=[{"name": "d", "resourceClaimTemplateName": "mig"}]),
            pod("member", uid="u-member", gated=True, claims=[], labels={POD_GROUP_LABEL: "gang"}),
            pod("fresh", uid="u-fresh", gated=True, claims=[], creationTimestamp=stamp(0.5)),
        ],
        events=[
            {"type": "Warning", "reason": "FailedScheduling", "note": "0/1 nodes are available: old",
             "regarding": {"uid": "u-waiter"}, "eventTime": stamp(10)},
            {"type": "Warning", "reason": "FailedScheduling", "note": "0/1 nodes are available: new\n- 1 node(s): no device",
             "regarding": {"uid": "u-waiter"}, "eventTime": stamp(9), "series": {"lastObservedTime": stamp(1)}},
            {"type": "Normal", "reason": "Hint", "note": "newer but not a warning",
             "regarding": {"uid": "u-waiter"}, "eventTime": stamp(0.1)},
        ],
        pod_groups=[
            {
                "metadata": {"name": "gang", "namespace": "ns", "uid": "u-gang"},
                "status": {"conditions": [{"type": POD_GROUP_SCHEDULED_CONDITION, "status": "False",
                                           "reason": "Unschedulable", "message": "1 of 2 pod(s) can be placed"}]},
            }
        ],
    )  # fmt: skip


def test_a_node_s_pool_counts_its_devices_and_every_device_says_who_holds_it() -> None:
    top = build(cluster(), now=NOW)
    (node,) = top.nodes
    (pool,) = node.pools
    assert node.name == "node-a"
    assert (pool.total_devices, pool.allocated_devices, pool.available_devices) == (4, 2, 1)
    assert (pool.unavailable_devices, pool.unhealthy_devices) == (1, 1)
    assert pool.shareable_summary is not None
    assert [(c.name, c.consumed.to_json()) for c in pool.shareable_summary.capacity] == [("memory", "10Gi")]
    devices = {d.name: d for d in node.devices}
    assert {n: d.state for n, d in devices.items()} == {
        "gpu-0": "allocated",
        "gpu-1": "free",
        "gpu-2": "free",
        "shared-0": "shared",
    }
    assert devices["gpu-2"].unhealthy and devices["gpu-2"].taints == (
        f"{UNHEALTHY_TAINT_KEY}=xid-79:NoExecute",
    )
    (held,) = devices["gpu-0"].holders
    assert (held.claim, held.request, held.reserved_for) == (
        "ns/holder-dev-x",
        "dev",
        (("ns/holder", ("main",)),),
    )
    (share,) = devices["shared-0"].holders
    # A claim named by the pod goes to every container of it.
    assert share.reserved_for == (("ns/sharer", ("main", "side")),) and share.consumed == (
        ("memory", "10Gi"),
    )


def test_waiting_pods_longest_first_with_their_classes_and_why() -> None:
    waiting = {w.pod: w for w in build(cluster(), now=NOW).waiting}
    assert list(waiting) == ["ns/waiter", "ns/member", "ns/unmade", "ns/fresh"]  # (equals by name)
    waiter = waiting["ns/waiter"]
    assert (waiter.waited_s, waiter.classes) == (720.0, ("gpu",))
    # The newest Warning, by its series' last time, over a newer Normal Event.
    assert (waiter.reason, waiter.message) == (
        "FailedScheduling",
        "0/1 nodes are available: new\n- 1 node(s): no device",
    )
    # Its claim not made yet: the template says which class it will ask for.
    assert waiting["ns/unmade"].classes == ("mig-1g",)
    member = waiting["ns/member"]
    assert (member.group, member.reason, member.message) == (
        "PodGroup ns/gang",
        "Unschedulable",
        "1 of 2 pod(s) can be placed",
    )
    assert (waiting["ns/fresh"].reason, waiting["ns/fresh"].waited_s) == ("", 30.0)


def test_classes_count_the_pods_that_wait_for_them_and_name_classes_nobody_made() -> None:
    classes = {c.name: c for c in build(cluster(), now=NOW).classes}
    assert (classes["gpu"].selected, classes["gpu"].allocated, classes["gpu"].valid) == (4, 2, "True")
    assert classes["gpu"].waiting_pods == 1
    assert (classes["mig-1g"].selected, classes["mig-1g"].waiting_pods) == (None, 1)


def test_a_namespace_narrows_holders_and_waiting_pods_a_node_the_pools_not_the_counts() -> None:
    other = build(cluster(), now=NOW, namespace="elsewhere")
    (node,) = other.nodes
    assert node.pools[0].allocated_devices == 2  # still the cluster's
    assert not [d for d in node.devices if d.holders] and not other.waiting
    assert build(cluster(), now=NOW, node="node-b").nodes == ()


def test_json_names_every_device_and_the_tables_the_held_and_tainted_ones() -> None:
    top = build(cluster(), now=NOW)
    document = top.to_json()
    (node,) = document["nodes"]
    assert node["pools"][0]["totalDevices"] == 4 and node["pools"][0]["unhealthyDevices"] == 1
    assert [d["device"] for d in node["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "shared-0"]
    assert document["waitingPods"][0]["pod"] == "ns/waiter"
    json.dumps(document)  # plain JSON
    text = render(top)
    lines = text.splitlines()
    assert lines[0].split() == [
        "NODE", "DRIVER", "POOL", "DEVICES", "ALLOCATED", "AVAILABLE", "UNAVAILABLE", "UNHEALTHY",
        "PARTITIONS", "FREE", "SHARED", "LEFT", "ERROR",
    ]  # fmt: skip
    assert lines[1].split()[:8] == ["node-a", DRIVER, "node-a", "4", "2", "1", "1", "1"]
    assert "memory:70Gi/80Gi" in lines[1]
    assert any(
        "gpu-0" in line and "ns/holder [main]; claim ns/holder-dev-x; request dev" in line for line in lines
    )
    assert any("shared-0" in line and "memory=10Gi" in line for line in lines)
    assert any("gpu-2" in line and "free,unhealthy" in line for line in lines)
    assert not any("gpu-1" in line for line in lines)
    assert any(
        line.startswith("ns/waiter")
        and "12m" in line
        and "FailedScheduling: 0/1 nodes are available: new - 1 node(s): no device" in line
        for line in lines
    )
    assert any(line.startswith("ns/fresh") and "(not tried yet)" in line for line in lines)


def test_nothing_to_show_says_so() -> None:
    text = render(build(Objects(), now=NOW))
    assert text.splitlines() == ["No pools.", "", "No pod waits for devices."]


def test_durations_read_as_kubectl_ages() -> None:
    assert [duration(s) for s in (5, 200, 900, 7500, 200000)] == ["5s", "3m20s", "15m", "2h5m", "2d7h"]
