"""Pods land where kube-scheduler would put them: draco's placement with a real kube-scheduler.

Each test builds its own nodes (objects: no kubelet, pods never run) and a DeviceClass and
slices for a driver named after its namespace, starts the operator for its namespace and
a kube-scheduler of its own (`schedulerkit`: it binds only pods that name it), and checks
where kube-scheduler bound the pods draco un-gated: every rule the pods carry holds, and
none stays Pending holding devices.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draco.api.constants import API_VERSION
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.schedulerkit import NEEDS_KUBE_SCHEDULER, KubeScheduler
from tests.e2e.support import DracoProcess, start_operator, wait_for

pytestmark = [pytest.mark.e2e, NEEDS_KUBE_SCHEDULER]

Start = Callable[..., DracoProcess]
Obj = dict[str, Any]


#: The label of this test's nodes; its pods select them (the session's other tests' nodes
#: are in the cluster too, and kube-scheduler's spreading counts every node it may use).
TEST_LABEL = "e2e.draco.dev/namespace"


def nodes(
    kube: ControlPlane, namespace: str, count: int, *, devices: int = 2, zones: bool = False
) -> list[str]:
    names = [f"{namespace}-{chr(ord('a') + i)}" for i in range(count)]
    zone = {"topology.kubernetes.io/zone": "zone-{}"} if zones else {}
    k.add_nodes(
        kube,
        [
            k.node(n, labels={TEST_LABEL: namespace, **{key: v.format(n[-1]) for key, v in zone.items()}})
            for n in names
        ],
    )
    k.apply(kube, [k.device_class(namespace)])
    if devices:
        k.apply(kube, [k.node_slice(namespace, n, devices) for n in names])
    return names


def pod(
    namespace: str,
    name: str,
    scheduler: str,
    *,
    claims: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    body = k.pod(
        namespace,
        name,
        claims if claims is not None else [{"name": "gpu", "resourceClaimTemplateName": "one"}],
        labels=labels,
    )
    body["spec"].update(spec, schedulerName=scheduler)
    body["spec"].setdefault("nodeSelector", {TEST_LABEL: namespace})
    return body


def bound(kube: ControlPlane, namespace: str, names: list[str]) -> dict[str, str] | None:
    """Pod name -> node, once every pod in ``names`` is bound."""
    found: dict[str, str] = {}
    for name in names:
        obj = k.get(kube, "pod", name, namespace=namespace)
        node = ((obj or {}).get("spec") or {}).get("nodeName")
        if not node:
            return None
        found[name] = node
    return found


def wait_bound(
    kube: ControlPlane, namespace: str, names: list[str], *, timeout: float = 90
) -> dict[str, str]:
    def explain() -> str:
        return json.dumps(
            {
                n: {
                    "conditions": (
                        (k.get(kube, "pod", n, namespace=namespace) or {}).get("status") or {}
                    ).get("conditions"),
                    "events": [e.get("note") for e in k.events(kube, namespace, regarding=n)][-3:],
                }
                for n in names
            },
            indent=1,
        )

    result = wait_for(
        lambda: bound(kube, namespace, names), timeout=timeout, what=f"{names} bound", explain=explain
    )
    assert isinstance(result, dict)
    return result


def template(namespace: str) -> Obj:
    return k.template(namespace, "one")


def anti_affinity(label: dict[str, str], key: str = "kubernetes.io/hostname") -> Obj:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": label}, "topologyKey": key}
            ]
        }
    }


def test_required_anti_affinity_puts_the_workers_on_different_nodes(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    names = nodes(kube, namespace, 2)
    k.apply(kube, [template(namespace)])
    workers = [
        pod(namespace, f"w{i}", scheduler, labels={"app": "w"}, affinity=anti_affinity({"app": "w"}))
        for i in range(2)
    ]
    k.create(kube, workers)
    start_operator(draco_process, namespace)
    placed = wait_bound(kube, namespace, ["w0", "w1"])
    assert sorted(placed.values()) == names


def test_a_follower_joins_its_leader(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    _, b = nodes(kube, namespace, 2)
    k.apply(kube, [template(namespace)])
    leader = pod(namespace, "leader", scheduler, claims=[], labels={"role": "leader"}, nodeName=b)
    leader["spec"].pop("schedulingGates")
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"role": "leader"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    k.create(kube, [leader, pod(namespace, "follower", scheduler, affinity=affinity)])
    start_operator(draco_process, namespace)
    assert wait_bound(kube, namespace, ["follower"]) == {"follower": b}


def test_host_ports_put_one_server_per_node(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    names = nodes(kube, namespace, 2)
    k.apply(kube, [template(namespace)])
    servers = []
    for i in range(2):
        server = pod(namespace, f"s{i}", scheduler)
        server["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        servers.append(server)
    k.create(kube, servers)
    start_operator(draco_process, namespace)
    placed = wait_bound(kube, namespace, ["s0", "s1"])
    assert sorted(placed.values()) == names


@pytest.mark.parametrize("when", ["DoNotSchedule", "ScheduleAnyway"])
def test_topology_spread_puts_two_replicas_per_node(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str, when: str
) -> None:
    names = nodes(kube, namespace, 2, devices=4)
    k.apply(kube, [template(namespace)])
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": "r"}},
        }
    ]
    replicas = [
        pod(namespace, f"r{i}", scheduler, labels={"app": "r"}, topologySpreadConstraints=spread)
        for i in range(4)
    ]
    # One at a time, as a ReplicaSet's pods come: each sees the ones before it placed.
    start_operator(draco_process, namespace)
    for replica in replicas:
        k.create(kube, [replica])
        wait_bound(kube, namespace, [replica["metadata"]["name"]])
    placed = wait_bound(kube, namespace, [r["metadata"]["name"] for r in replicas])
    assert Counter(placed.values()) == dict.fromkeys(names, 2)


def test_a_pod_with_a_zonal_volume_lands_in_its_zone(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    _, b = nodes(kube, namespace, 2, zones=True)
    k.apply(kube, [template(namespace)])
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-pv", "labels": {"topology.kubernetes.io/zone": "zone-b"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": "/tmp/none"},
            "claimRef": {"namespace": namespace, "name": "data"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}
                            ]
                        }
                    ]
                }
            },
        },
    }
    # Bound as kube-controller-manager's volume binder leaves a claim (there is none here).
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "data",
            "namespace": namespace,
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": f"{namespace}-pv",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    k.create(kube, [volume, claim])
    kube.kubectl(
        "patch",
        "pv",
        f"{namespace}-pv",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Bound"}}',
    )
    kube.kubectl(
        "patch", "pvc", "data", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", '{"status":{"phase":"Bound","capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"]}}',
    )  # fmt: skip
    user = pod(
        namespace,
        "user",
        scheduler,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    )
    k.create(kube, [user])
    start_operator(draco_process, namespace)
    assert wait_bound(kube, namespace, ["user"]) == {"user": b}
    kube.kubectl("delete", "pv", f"{namespace}-pv", "--wait=false")


def test_a_prioritized_list_takes_the_node_where_its_first_choice_fits(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    a, b = nodes(kube, namespace, 2, devices=0)
    driver = k.driver_of(namespace)
    classes = [
        {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": f"{namespace}-{model}"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{driver}" && device.attributes["{driver}"].model == "{model}"'
                        }
                    }
                ]
            },
        }
        for model in ("h100", "a100")
    ]
    slices = [
        k.node_slice(namespace, node, 1, device_extra={"attributes": {"model": {"string": model}}})
        for node, model in ((a, "a100"), (b, "h100"))
    ]
    claim = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "h100", "deviceClassName": f"{namespace}-h100"},
                            {"name": "a100", "deviceClassName": f"{namespace}-a100"},
                        ],
                    }
                ]
            }
        },
    }
    k.apply(kube, [*classes, *slices, claim])
    k.create(kube, [pod(namespace, "p", scheduler, claims=[{"name": "gpu", "resourceClaimName": "gpu"}])])
    start_operator(draco_process, namespace)
    assert wait_bound(kube, namespace, ["p"]) == {"p": b}
    allocated = k.get(kube, k.CLAIMS, "gpu", namespace=namespace)
    assert allocated is not None
    assert [r["request"] for r in allocated["status"]["allocation"]["devices"]["results"]] == ["gpu/h100"]


def test_a_pod_kube_scheduler_refuses_where_it_was_pinned_runs_elsewhere_with_its_devices(
    kube: ControlPlane, namespace: str, draco_process: Start, tmp_path: Path
) -> None:
    """The node draco chose takes a conflicting pod between the pin and the binding (here:
    one bound by hand with the same host port, before any scheduler looks at draco's pod):
    kube-scheduler refuses the pin; draco releases the shared claim, makes the pod again,
    and it ends up bound to the other node with the claim allocated there."""
    names = nodes(kube, namespace, 2, devices=1)
    k.apply(kube, [k.claim(namespace, "shared")])
    late = f"{namespace}-late"
    server = pod(namespace, "server", late, claims=[{"name": "gpu", "resourceClaimName": "shared"}])
    server["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    k.create(kube, [server])
    start_operator(draco_process, namespace, extra=("--refusal-grace", "1"))
    pinned = wait_for(
        lambda: (p := k.get(kube, "pod", "server", namespace=namespace)) and not k.is_gated(p) and p,
        timeout=60,
        what="server pinned",
    )
    assert isinstance(pinned, dict)
    first, old_uid = k.pinned_node(pinned), pinned["metadata"]["uid"]
    assert first in names
    squatter = pod(namespace, "squatter", late, claims=[], nodeName=first)
    squatter["spec"].pop("schedulingGates")
    squatter["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    k.create(kube, [squatter])
    process = KubeScheduler(kube, tmp_path / "late", late)
    try:
        other = next(n for n in names if n != first)

        def moved() -> Obj | None:
            obj = k.get(kube, "pod", "server", namespace=namespace)
            if obj is None or obj["metadata"]["uid"] == old_uid or (obj["spec"].get("nodeName") != other):
                return None
            return obj

        moved_pod = wait_for(moved, timeout=120, what="the server made again and bound to the other node")
        assert isinstance(moved_pod, dict)
        claim = wait_for(
            lambda: (
                (c := k.get(kube, k.CLAIMS, "shared", namespace=namespace))
                and k.reserved_uids(c) == {moved_pod["metadata"]["uid"]}
                and c
            ),
            timeout=60,
            what="the claim reserved for the new pod",
        )
        assert isinstance(claim, dict) and k.allocation_node(claim) == other
        notes = k.event_notes(kube, namespace, "server", "PlacementRefused")
        assert any(first in note and "free ports" in note for note in notes), notes
    finally:
        process.stop()


def test_a_replaced_pod_neither_inherits_the_old_pods_reservation_nor_is_evicted_for_it(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    """`kubectl replace --force` of a placed pod: the new pod (same name, new UID, the old
    spec with its pin and node) is a new consumer. Upstream prunes the stale reservation
    and deallocates the claim; a NoExecute taint on the old device leaves the new pod alone.

    The replacement happens while the operator is down (as in an upgrade or a failover), so
    that the operator meets the new pod and the old pod's reservation together."""
    nodes(kube, namespace, 1, devices=1)
    k.apply(kube, [k.claim(namespace, "c")])
    k.create(kube, [pod(namespace, "p", scheduler, claims=[{"name": "gpu", "resourceClaimName": "c"}])])
    operator = start_operator(draco_process, namespace)
    wait_bound(kube, namespace, ["p"])
    operator.stop()
    old = k.get(kube, "pod", "p", namespace=namespace)
    assert old is not None
    copy = {k_: v for k_, v in old.items() if k_ != "status"}
    copy["metadata"] = {
        key: value
        for key, value in old["metadata"].items()
        if key not in ("uid", "resourceVersion", "creationTimestamp", "managedFields")
    }
    kube.kubectl("delete", "pod", "p", "-n", namespace, "--grace-period=0", "--force")
    k.create(kube, [copy])
    new = k.get(kube, "pod", "p", namespace=namespace)
    assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]
    start_operator(draco_process, namespace, name="operator-2")

    claim = wait_for(
        lambda: (
            (c := k.get(kube, k.CLAIMS, "c", namespace=namespace)) and not c["status"].get("allocation") and c
        ),
        timeout=60,
        what="the stale reservation pruned and the claim deallocated",
    )
    assert isinstance(claim, dict) and not k.reserved_uids(claim)
    device = f"{k.driver_of(namespace)}"
    rule = {
        "apiVersion": API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"{namespace}-evict"},
        "spec": {
            "deviceSelector": {"driver": device},
            "taint": {"key": "broken", "effect": "NoExecute"},
        },
    }
    k.apply(kube, [rule])
    wait_for(
        lambda: any(
            c.get("type") == "EvictionInProgress"
            for c in (
                (k.get(kube, "devicetaintrules.resource.draco.dev", f"{namespace}-evict") or {}).get("status")
                or {}
            ).get("conditions")
            or []
        ),
        timeout=60,
        what="the taint rule processed",
    )
    after = k.get(kube, "pod", "p", namespace=namespace)
    assert after is not None and after["metadata"]["uid"] == new["metadata"]["uid"]
    assert not after["metadata"].get("deletionTimestamp"), "the new pod was evicted for the old one's claim"
    assert not k.reserved_uids(k.get(kube, k.CLAIMS, "c", namespace=namespace) or {})
    kube.kubectl("delete", "devicetaintrule.resource.draco.dev", f"{namespace}-evict", "--wait=false")
