"""`draco simulate` places pods by kube-scheduler's rules, as the operator does: node
selector, taints, resources, host ports, pod anti-affinity and spreading across units,
extended resources backed by a DeviceClass, a prioritized list's preference, and the
FailedScheduling explanation when nothing fits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.tools import simulate

Obj = dict[str, Any]
GATE = [{"name": "resource.draco.dev/allocation"}]


def node(name: str, zone: str, *, cpu: str = "4", taints: Sequence[Obj] = ()) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone},
        },
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def gpus(node_name: str, count: int = 2, model: str = "a100") -> Obj:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"model": {"string": model}}} for i in range(count)
            ],
        },
    }


def device_class(
    name: str = "gpu", expression: str = 'device.driver == "gpu.example.com"', **spec: Any
) -> Obj:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}], **spec},
    }


TEMPLATE: Obj = {
    "apiVersion": "resource.draco.dev/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu", "namespace": "default"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}},
}


def pod(
    name: str,
    *,
    created: int = 0,
    labels: Mapping[str, str] | None = None,
    claims: bool = True,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    host_port: int | None = None,
    node_name: str | None = None,
    **spec: Any,
) -> Obj:
    """A pod asking for one GPU through the template (``claims``), gated unless it is
    bound to ``node_name``."""
    container: Obj = {"name": "main", "image": "busybox", "resources": {}}
    if requests:
        container["resources"]["requests"] = dict(requests)
    if limits:
        container["resources"]["limits"] = dict(limits)
    if host_port is not None:
        container["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    metadata: Obj = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "creationTimestamp": f"2026-01-01T00:00:{created:02d}Z",
        "labels": dict(labels or {}),
    }
    if claims:
        metadata["annotations"] = {
            "resource.draco.dev/claims": "- name: gpu\n  resourceClaimTemplateName: one-gpu\n"
        }
    body: Obj = {"containers": [container], **spec}
    if node_name is None:
        body["schedulingGates"] = GATE
    else:
        body["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}


def cluster(*extra: Obj, nodes: Sequence[Obj] | None = None) -> list[Obj]:
    """Three nodes with two GPUs each (n1, n2 in zone a; n3 in zone b), the class and template."""
    nodes = nodes if nodes is not None else [node("n1", "a"), node("n2", "a"), node("n3", "b")]
    names = [n["metadata"]["name"] for n in nodes]
    return [device_class(), TEMPLATE, *nodes, *(gpus(name) for name in names), *extra]


def run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, documents: Sequence[Obj], *argv: str
) -> tuple[int, list[Obj], str]:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(documents)}))
    code = simulate.main(["-f", str(path), *argv])
    captured = capsys.readouterr()
    items = yaml.safe_load(captured.out)["items"] if captured.out else []
    return code, items, captured.err


def nodes_of(items: Sequence[Obj]) -> dict[str, str]:
    """Pod name -> node of its allocated claim (the node selector's single name)."""
    found = {}
    for item in items:
        owner = item["metadata"]["name"].rsplit("-", 1)[0]
        terms = item["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
        found[owner] = terms[0]["matchFields"][0]["values"][0]
    return found


ANTI: Obj = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def test_anti_affinity_puts_two_units_on_two_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Without the rule both fit on n1 (two GPUs, first by name); the first pod placed there
    # keeps the second away.
    plain = [pod("a", created=1, labels={"app": "web"}), pod("b", created=2, labels={"app": "web"})]
    code, items, err = run(capsys, tmp_path, cluster(*plain), "--policy", "first")
    assert code == 0, err
    assert nodes_of(items) == {"a-gpu": "n1", "b-gpu": "n1"}
    apart = [
        pod("a", created=1, labels={"app": "web"}, affinity=ANTI),
        pod("b", created=2, labels={"app": "web"}, affinity=ANTI),
    ]
    for policy in ("first", "scheduler"):
        code, items, err = run(capsys, tmp_path, cluster(*apart), "--policy", policy)
        assert code == 0, err
        placed = nodes_of(items)
        assert len(set(placed.values())) == 2, (policy, placed)


def test_spreading_counts_placed_pods_and_earlier_units(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }
    ]
    running = pod("running", labels={"app": "spread"}, claims=False, node_name="n1")
    finished = pod("finished", labels={"app": "spread"}, claims=False, node_name="n3")
    finished["status"] = {"phase": "Succeeded"}
    waiting = [
        pod(f"w{i}", created=i, labels={"app": "spread"}, topologySpreadConstraints=spread) for i in (1, 2)
    ]
    code, items, err = run(capsys, tmp_path, cluster(running, finished, *waiting), "--policy", "first")
    assert code == 0, err
    # Zone a holds the running pod (the finished one counts nowhere): w1 goes to zone b;
    # then both zones hold one and w2 takes the first node by name.
    assert nodes_of(items) == {"w1-gpu": "n3", "w2-gpu": "n1"}


def test_host_ports_of_placed_pods_are_taken(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    running = pod("running", claims=False, host_port=8080, node_name="n1")
    code, items, err = run(
        capsys, tmp_path, cluster(running, pod("web", host_port=8080)), "--policy", "first"
    )
    assert code == 0, err
    assert nodes_of(items) == {"web-gpu": "n2"}


def test_a_node_selector_chooses_the_zone(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    waiting = pod("picky", nodeSelector={"topology.kubernetes.io/zone": "b"})
    code, items, err = run(capsys, tmp_path, cluster(waiting), "--policy", "first")
    assert code == 0, err
    assert nodes_of(items) == {"picky-gpu": "n3"}


def test_an_untolerated_taint_keeps_the_pod_away(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    nodes = [node("n1", "a", taints=[taint]), node("n2", "a"), node("n3", "b")]
    code, items, err = run(capsys, tmp_path, cluster(pod("p"), nodes=nodes), "--policy", "first")
    assert code == 0, err
    assert nodes_of(items) == {"p-gpu": "n2"}
    code, items, err = run(capsys, tmp_path, cluster(pod("p"), nodes=nodes), "--node", "n1")
    assert code == 1
    assert items == []
    assert (
        "pod default/p: does not fit:\n0/1 nodes are available: 1 node(s) had untolerated taint {dedicated=infra}."
        in err
    )
    tolerant = pod("p", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    code, items, err = run(capsys, tmp_path, cluster(tolerant, nodes=nodes), "--policy", "first")
    assert code == 0, err
    assert nodes_of(items) == {"p-gpu": "n1"}


def test_cpu_requests_count_placed_pods_and_earlier_units(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    running = pod("running", claims=False, requests={"cpu": "3"}, node_name="n1")
    waiting = [pod("big", created=1, requests={"cpu": "2"}), pod("bigger", created=2, requests={"cpu": "3"})]
    code, items, err = run(capsys, tmp_path, cluster(running, *waiting), "--policy", "first")
    assert code == 0, err
    # n1 has 1 cpu left; big takes 2 of n2's 4, so bigger goes on to n3.
    assert nodes_of(items) == {"big-gpu": "n2", "bigger-gpu": "n3"}


def test_the_explanation_is_the_failed_scheduling_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    waiting = pod("huge", requests={"cpu": "5"}, nodeSelector={"topology.kubernetes.io/zone": "a"})
    code, items, err = run(capsys, tmp_path, cluster(waiting))
    assert code == 1
    assert items == []
    assert (
        "pod default/huge: does not fit:\n0/3 nodes are available: 2 Insufficient cpu, "
        "1 node(s) didn't match Pod's node affinity/selector." in err
    )
    # Devices too: a node that admits the pod but cannot hold its claims is counted so,
    # and the allocator's explanation follows.
    greedy = {**TEMPLATE, "metadata": {"name": "three-gpus", "namespace": "default"}}
    greedy["spec"] = {
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 3}}]}
        }
    }
    waiting = pod("greedy", nodeSelector={"topology.kubernetes.io/zone": "a"})
    waiting["metadata"]["annotations"]["resource.draco.dev/claims"] = (
        "- name: gpu\n  resourceClaimTemplateName: three-gpus\n"
    )
    code, _, err = run(capsys, tmp_path, cluster(greedy, waiting))
    assert code == 1
    assert (
        "0/3 nodes are available: 2 cannot allocate all claims, "
        "1 node(s) didn't match Pod's node affinity/selector. claim default/greedy-gpu-" in err
    )
    assert "fit on none of 2 node(s)" in err


def test_an_extended_resource_pod_gets_its_special_claim(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    mapped = device_class(extendedResourceName="example.com/gpu")
    documents = cluster(
        pod("two", created=1, claims=False, limits={"example.com/gpu": "2"}),
        pod("again", created=2, claims=False, limits={"example.com/gpu": "2"}),
    )
    documents[0] = mapped
    code, items, err = run(capsys, tmp_path, documents, "--policy", "first")
    assert code == 0, err
    assert "nothing to allocate" not in err
    names = [item["metadata"]["name"] for item in items]
    assert [name[: -len("xxxxx")] for name in names] == [
        "two-extended-resources-",
        "again-extended-resources-",
    ]
    first = items[0]
    assert first["metadata"]["annotations"] == {"resource.draco.dev/extended-resource-claim": "true"}
    assert first["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    results = [item["status"]["allocation"]["devices"]["results"] for item in items]
    assert [{r["pool"] for r in result} for result in results] == [{"n1"}, {"n2"}]
    # Each node advertises its two devices (as the operator would): three do not fit.
    documents = cluster(pod("three", claims=False, limits={"example.com/gpu": "3"}))
    documents[0] = mapped
    code, _, err = run(capsys, tmp_path, documents)
    assert code == 1
    assert "0/3 nodes are available: 3 Insufficient example.com/gpu." in err


def test_a_prioritized_list_prefers_the_node_of_its_first_alternative(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    classes = [
        device_class("big", 'device.attributes["gpu.example.com"].model == "h100"'),
        device_class("small", 'device.attributes["gpu.example.com"].model == "a100"'),
    ]
    template = {
        **TEMPLATE,
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "firstAvailable": [
                                {"name": "big", "deviceClassName": "big"},
                                {"name": "small", "deviceClassName": "small"},
                            ],
                        }
                    ]
                }
            }
        },
    }
    documents = [
        *classes,
        template,
        node("n1", "a"),
        node("n2", "a"),
        gpus("n1", model="a100"),
        gpus("n2", model="h100"),
        pod("p"),
    ]
    code, items, err = run(capsys, tmp_path, documents)
    assert code == 0, err
    # Both nodes fit (n1 by the second alternative) and score alike otherwise.
    assert nodes_of(items) == {"p-gpu": "n2"}
    assert items[0]["status"]["allocation"]["devices"]["results"][0]["request"] == "gpu/big"
    # "first" takes nodes by name: n1 and its second alternative.
    code, items, err = run(capsys, tmp_path, documents, "--policy", "first")
    assert code == 0, err
    assert nodes_of(items) == {"p-gpu": "n1"}


def test_a_pod_without_claims_or_mapped_resources_is_no_unit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plain = pod("plain", claims=False, limits={"example.com/other": "1"})
    code, _, err = run(capsys, tmp_path, cluster(plain))
    assert code == 2
    assert "nothing to allocate" in err


def test_a_bound_volume_takes_the_pod_to_its_node(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "local-data"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "claimRef": {"namespace": "default", "name": "data"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n3"]}
                            ]
                        }
                    ]
                }
            },
        },
        "status": {"phase": "Bound"},
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "data",
            "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "local-data"},
        "status": {"phase": "Bound"},
    }
    waiting = pod("db", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    code, items, err = run(capsys, tmp_path, cluster(volume, claim, waiting), "--policy", "first")
    assert code == 0, err
    assert nodes_of(items) == {"db-gpu": "n3"}
    # Without its claim in the input the pod cannot be placed, as kube-scheduler would say.
    code, _, err = run(capsys, tmp_path, cluster(volume, waiting))
    assert code == 1
    assert 'persistentvolumeclaim "data" not found' in err


def test_namespace_labels_select_affinity_peers_and_pinned_pods_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "cache", "labels": {"team": "x"}},
    }
    # Pinned by draco (required affinity on the node's name) and un-gated: on n2.
    peer = pod("peer", claims=False, labels={"app": "cache"})
    peer["metadata"]["namespace"] = "cache"
    del peer["spec"]["schedulingGates"]
    peer["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
                ]
            }
        }
    }
    near = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "cache"}},
                    "namespaceSelector": {"matchLabels": {"team": "x"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    code, items, err = run(
        capsys, tmp_path, cluster(namespace, peer, pod("p", affinity=near)), "--policy", "first"
    )
    assert code == 0, err
    assert nodes_of(items) == {"p-gpu": "n2"}
    # Without the Namespace its labels are unknown: no peer matches, and kube-scheduler
    # refuses the pod everywhere.
    code, _, err = run(capsys, tmp_path, cluster(peer, pod("p", affinity=near)))
    assert code == 1
    assert "didn't match pod affinity rules" in err
