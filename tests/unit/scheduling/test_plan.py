"""The pure placement decision (`draco.scheduling.plan`): kube-scheduler's rules, its
sampling and scores, then the first node of that order where the claims fit."""

from __future__ import annotations

from typing import Any

from draco.allocator import Inventory, NoPlacement, Placement
from draco.allocator.outcome import Node
from draco.scheduling.cluster import Snapshot
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.plan import candidates, choose
from draco.scheduling.podinfo import PodInfo, pod_info

DRIVER = "gpu.example.com"
CLASSES = [
    {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}
    for name, expression in (
        ("gpu", f'device.driver == "{DRIVER}"'),
        ("h100", f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "h100"'),
        ("a100", f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "a100"'),
    )
]


def node(name: str, **labels: str) -> NodeInfo:
    return NodeInfo(
        name=name,
        labels={"kubernetes.io/hostname": name, **labels},
        allocatable={"cpu": 8000, "memory": 32 << 30, "pods": 110},
    )


def device_slice(node_name: str, *models: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node_name}-slice"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node_name,
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"model": {"string": m}}} for i, m in enumerate(models)
            ],
        },
    }


def claim(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"devices": {"requests": [request]}}}


ONE_GPU = {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}


def pod_body(name: str, **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}], **spec},
    }


def decide(
    cluster: Snapshot,
    slices: list[dict[str, Any]],
    body: dict[str, Any],
    pending: list[dict[str, Any]],
    **kw: Any,
) -> Placement | NoPlacement:
    inventory = Inventory.build(classes=CLASSES, slices=slices)
    names = sorted(cluster.node_names())
    choice = choose(
        pod=pod_info(body),
        cluster=cluster,
        names=names,
        allocated=[],
        pending=pending,
        inventory=inventory,
        allocator_nodes=lambda chosen: [Node(n, cluster.nodes[n].labels) for n in chosen],
        **kw,
    )
    return choice.outcome


def placed(body: dict[str, Any], node_name: str) -> PodInfo:
    return pod_info(body, node=node_name)


def test_an_existing_pods_anti_affinity_keeps_the_pod_off_its_node() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    first = placed(pod_body("w0", labels={"app": "w"}, affinity=anti), "a")
    cluster = Snapshot(nodes={"a": node("a"), "b": node("b")}, pods=[first])
    slices = [device_slice("a", "x"), device_slice("b", "x")]
    for policy in ("scheduler", "first", "pack", "spread"):
        outcome = decide(
            cluster,
            slices,
            pod_body("w1", labels={"app": "w"}, affinity=anti),
            [claim("c", ONE_GPU)],
            policy=policy,
        )
        assert isinstance(outcome, Placement) and outcome.node == "b", policy


def test_host_ports_and_the_explanation_when_no_node_is_left() -> None:
    def server(name: str) -> dict[str, Any]:
        body = pod_body(name)
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        return body

    cluster = Snapshot(nodes={"a": node("a"), "b": node("b")}, pods=[placed(server("s0"), "a")])
    slices = [device_slice("a", "x"), device_slice("b", "x")]
    outcome = decide(cluster, slices, server("s1"), [claim("c", ONE_GPU)])
    assert isinstance(outcome, Placement) and outcome.node == "b"
    full = Snapshot(
        nodes={"a": node("a"), "b": node("b")}, pods=[placed(server("s0"), "a"), placed(server("s1"), "b")]
    )
    assert isinstance(decide(full, slices, server("s2"), [claim("c", ONE_GPU)]), NoPlacement)
    body = server("s2")
    found = candidates(
        pod=pod_info(body),
        cluster=full,
        names=["a", "b"],
        reasons=[],
        allocated=[],
    )
    assert found.names == []
    assert found.reasons == ["node(s) didn't have free ports for the requested pod ports"] * 2
    assert found.refused_by == {"NodePorts"}


def test_the_scores_prefer_the_emptier_node_unless_the_policy_is_first() -> None:
    busy = pod_body("busy")
    busy["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "6"
    cluster = Snapshot(nodes={"a": node("a"), "b": node("b")}, pods=[placed(busy, "a")])
    slices = [device_slice("a", "x"), device_slice("b", "x")]
    scored = decide(cluster, slices, pod_body("p"), [claim("c", ONE_GPU)])
    assert isinstance(scored, Placement) and scored.node == "b", "LeastAllocated prefers b"
    first = decide(cluster, slices, pod_body("p"), [claim("c", ONE_GPU)], policy="first")
    assert isinstance(first, Placement) and first.node == "a", "first: by name, unscored"


def test_a_prioritized_list_takes_the_node_where_its_first_alternative_fits() -> None:
    cluster = Snapshot(nodes={"a": node("a"), "b": node("b")})
    slices = [device_slice("a", "a100"), device_slice("b", "h100")]
    request = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "h100", "deviceClassName": "h100"},
            {"name": "a100", "deviceClassName": "a100"},
        ],
    }
    outcome = decide(cluster, slices, pod_body("p"), [claim("c", request)])
    assert isinstance(outcome, Placement) and outcome.node == "b"
    [result] = outcome.results.json()["ns/c"]["devices"]["results"]
    assert result["request"] == "gpu/h100"


def test_the_sampling_start_moves_on_as_kube_scheduler_s_does() -> None:
    cluster = Snapshot(nodes={n: node(n) for n in ("a", "b", "c")})
    slices = [device_slice(n, "x") for n in ("a", "b", "c")]
    inventory = Inventory.build(classes=CLASSES, slices=slices)
    body = pod_body("p")
    choice = choose(
        pod=pod_info(body),
        cluster=cluster,
        names=["a", "b", "c"],
        allocated=[],
        pending=[claim("c", ONE_GPU)],
        inventory=inventory,
        allocator_nodes=lambda chosen: [Node(n) for n in chosen],
        start=1,
    )
    # Fewer than 100 nodes: every node is examined; equal scores go to the first by name.
    assert (choice.examined, choice.count) == (3, 3)
    assert isinstance(choice.outcome, Placement) and choice.outcome.node == "a"
