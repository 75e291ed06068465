"""What placing one pod by kube-scheduler's rules costs, by pod shape and cluster size.

Run: ``.venv/bin/python benchmarks/placement.py [--nodes 500 5000] [--pods-per-node 4]
[--decisions 200]``.

The operator's own view (`draco.scheduling.view.ClusterView`) is filled as its watches
fill it: Nodes with allocatable and zone labels, 8 devices per node, and placed pods
(``pods-per-node`` per node, bound, of several Deployments, a quarter of them with a
hostname anti-affinity to their siblings). Then the decision the operator makes per
gated pod (`draco.scheduling.plan.choose`: the rules' PreFilter, kube-scheduler's
sampling and scores, the search on the best node) runs ``decisions`` times per shape,
each pod placed on the node chosen (so the next decision sees it), and the time per
decision is printed (median and p99), with the policy ``first`` (no sampling, no
scores) beside ``scheduler`` (the default) for the plain shape, and the machine load:

- plain: a pod with one claim of one device and cpu/memory requests;
- anti-affinity: required hostname anti-affinity to its own app;
- spread: a zone topology spread constraint, DoNotSchedule;
- ports: a host port.

The figures are for comparing shapes and sizes in one run (ratios); on a shared machine
an absolute figure means little.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]

import argparse
import statistics
import time
from typing import Any

from draco.allocator import Placement
from draco.scheduling.nodeorder import PlacementPolicy
from draco.scheduling.plan import choose
from draco.scheduling.view import ClusterView

DRIVER = "gpu.bench.draco.dev"
ZONES = 8


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} cores"


def node(index: int) -> dict[str, Any]:
    name = f"node-{index:05d}"
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": f"zone-{index % ZONES}",
            },
        },
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
    }


def device_slice(index: int) -> dict[str, Any]:
    name = f"node-{index:05d}"
    return {
        "metadata": {"name": f"{name}-gpu"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": name,
            "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(8)],
        },
    }


def pod(name: str, app: str, *, node_name: str | None = None, shape: str = "plain") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "img", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
        ]
    }
    if node_name:
        spec["nodeName"] = node_name
    if shape == "anti-affinity":
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    elif shape == "spread":
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ]
    elif shape == "ports":
        spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "labels": {"app": app}},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def claim(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]}
        },
    }


def shared(body: dict[str, Any], templates: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its spec fields shared with earlier pods of equal ones, as the
    operator's pod cache holds them (`draco.kube.compact`): the pods of one app then share
    their affinity and spread terms, which the rules evaluate once per term."""
    spec = {}
    for key, value in body["spec"].items():
        marker = f"{key}:{value!r}"
        spec[key] = templates.setdefault(marker, value)
    body["spec"] = spec
    labels = body["metadata"]["labels"]
    body["metadata"]["labels"] = templates.setdefault(f"labels:{labels!r}", labels)
    return body


def cluster(nodes: int, pods_per_node: int) -> ClusterView:
    view = ClusterView()
    view.upsert_class(
        {
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    for index in range(nodes):
        view.upsert_node(node(index))  # type: ignore[arg-type]
        view.upsert_slice(device_slice(index))
    templates: dict[str, Any] = {}
    for index in range(nodes * pods_per_node):
        shape = "anti-affinity" if index % 4 == 0 else "plain"
        body = shared(pod(f"placed-{index}", f"app-{index % 50}", shape=shape), templates)
        body["spec"] = {**body["spec"], "nodeName": f"node-{index % nodes:05d}"}
        view.upsert_pod(body)  # type: ignore[arg-type]
    view.synced = True
    return view


def run(view: ClusterView, shape: str, decisions: int, policy: PlacementPolicy) -> list[float]:
    times: list[float] = []
    start = 0
    inventory = view.inventory()
    names = sorted(view.nodes)
    for index in range(decisions):
        body = pod(f"{shape}-{policy}-{index}", f"new-{shape}-{index % 10}", shape=shape)
        info = view.pod_info(body)  # type: ignore[arg-type]
        began = time.perf_counter()
        choice = choose(
            pod=info,
            cluster=view,
            names=view.static_fit(info).names if names else [],
            allocated=[],
            pending=[claim(f"c-{shape}-{policy}-{index}")],
            inventory=inventory,
            allocator_nodes=view.allocator_nodes,
            policy=policy,
            start=start,
        )
        times.append(time.perf_counter() - began)
        if choice.count:
            start = (start + choice.examined) % choice.count
        if isinstance(choice.outcome, Placement):
            placed = dict(body, spec=dict(body["spec"], nodeName=choice.outcome.node))
            view.upsert_pod(placed)  # type: ignore[arg-type]
    return times


def report(label: str, times: list[float]) -> str:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{label:<28} median {statistics.median(ordered) * 1000:7.2f} ms  p99 {p99 * 1000:7.2f} ms  ({load()})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--pods-per-node", type=int, default=4)
    parser.add_argument("--decisions", type=int, default=200)
    args = parser.parse_args()
    runs: list[tuple[str, PlacementPolicy]] = [
        ("plain", "first"),
        ("plain", "scheduler"),
        ("anti-affinity", "scheduler"),
        ("spread", "scheduler"),
        ("ports", "scheduler"),
    ]
    for nodes in args.nodes:
        began = time.perf_counter()
        view = cluster(nodes, args.pods_per_node)
        print(
            f"{nodes} nodes, {nodes * args.pods_per_node} placed pods: view filled in "
            f"{time.perf_counter() - began:.1f}s ({load()})",
            flush=True,
        )
        for shape, policy in runs:
            print("  " + report(f"{shape} ({policy})", run(view, shape, args.decisions, policy)), flush=True)


if __name__ == "__main__":
    main()
