"""draco's device demand reaches the real Karpenter: GPU nodes launched from zero for pods
and whole groups (or not at all, with an Event saying why), no GPU node for a pod of
another class, and a GPU node in use kept while an idle one is consolidated away; on the
gate path (kube-scheduler binds what draco un-gates) and with ``schedulerName: draco``.

The times from a pod's creation to its binding and to Running (the node stage marks a pod
Running once the new node's agent has prepared its devices) are printed (``-s`` shows
them), for one pod and for one group.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from draco.api.constants import POD_GROUP_LABEL, SCHEDULER_NAME
from draco.scheduling.demand import KARPENTER_DO_NOT_DISRUPT, WAITING_FOR_CAPACITY_REASON
from draco.scheduling.nodetemplates import DEVICES_ANNOTATION, TEMPLATE_KEY, TEMPLATE_LABEL
from tests.autoscaling import kwokkit
from tests.autoscaling.conftest import (
    ACCEL_CLASS,
    CPU_TYPE,
    DEMAND_NAMESPACE,
    GPU_CLASS,
    GPU_TYPE,
    Autoscaled,
    template_devices,
)
from tests.e2e import schedkit as k
from tests.e2e.support import wait_for

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]


def nodepool(
    autoscaled: Autoscaled, made: list[str], name: str, kind: str, *, nodes: int = 4, devices: Any = None
) -> None:
    annotation = yaml.safe_dump(template_devices(autoscaled.devices[kind]) if devices is None else devices)
    body = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "annotations": {DEVICES_ANNOTATION: annotation}},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {"key": kwokkit.INSTANCE_TYPE_LABEL, "operator": "In", "values": [kind]},
                    ],
                    "expireAfter": "Never",
                }
            },
            "limits": {"nodes": str(nodes)},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "5s",
                "budgets": [{"nodes": "100%"}],
            },
        },
    }
    made.append(name)
    k.apply(autoscaled.kube, [body])


def node_template_map(autoscaled: Autoscaled, made: list[str], name: str, devices: Any) -> None:
    """A node group's template (cluster-autoscaler's way): a ConfigMap in draco's namespace."""
    document = {
        "apiVersion": "autoscaling.resource.draco.dev/v1alpha1",
        "kind": "NodeTemplate",
        "metadata": {"name": name},
        "spec": {"nodeGroup": name, "labels": {"group": name}, "devices": devices},
    }
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": DEMAND_NAMESPACE, "labels": {TEMPLATE_LABEL: "true"}},
        "data": {TEMPLATE_KEY: yaml.safe_dump(document)},
    }
    made.append(name)
    k.apply(autoscaled.kube, [body])


def claim_template(namespace: str, class_name: str) -> Obj:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one", "namespace": namespace},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": class_name}}]}}
        },
    }


def standalone_claim(namespace: str, name: str, class_name: str) -> Obj:
    """A claim of its own (it outlives its pod: what was allocated to it can be checked)."""
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": class_name}}]}},
    }


def gated_pod(
    namespace: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    claim: Obj | None = None,
) -> Obj:
    """A pod of one device (the template ``one``'s, or ``claim``) on the gate path: draco
    un-gates it, kube-scheduler binds it."""
    entry = {"name": "dev", **(claim or {"resourceClaimTemplateName": "one"})}
    body = k.pod(namespace, name, [entry], cpu="100m", labels=labels)
    body["spec"]["schedulerName"] = "default-scheduler"
    return body


def draco_bound_pod(
    namespace: str, name: str, *, labels: dict[str, str] | None = None, claim: Obj | None = None
) -> Obj:
    """The same pod with ``schedulerName: draco``: draco binds it (no gate)."""
    body = gated_pod(namespace, name, labels=labels, claim=claim)
    body["spec"].pop("schedulingGates")
    body["spec"]["schedulerName"] = SCHEDULER_NAME
    return body


PATHS = {"gate": gated_pod, "schedulerName-draco": draco_bound_pod}


def nodes_of(autoscaled: Autoscaled, pool: str) -> list[Obj]:
    return [
        n
        for n in k.items(autoscaled.kube, "nodes")
        if (n["metadata"].get("labels") or {}).get(kwokkit.NODEPOOL_LABEL) == pool
    ]


def bound_node(autoscaled: Autoscaled, namespace: str, name: str) -> str | None:
    obj = k.get(autoscaled.kube, "pod", name, namespace=namespace) or {}
    return (obj.get("spec") or {}).get("nodeName")


def instance_type_of(autoscaled: Autoscaled, node: str) -> str:
    obj = k.get(autoscaled.kube, "node", node) or {}
    return str((obj["metadata"].get("labels") or {}).get(kwokkit.INSTANCE_TYPE_LABEL, ""))


def demand_pods(autoscaled: Autoscaled) -> list[Obj]:
    return k.items(autoscaled.kube, "pods", namespace=DEMAND_NAMESPACE)


def force_delete(autoscaled: Autoscaled, namespace: str, *names: str) -> None:
    autoscaled.kube.kubectl("delete", "pod", *names, "-n", namespace, "--grace-period=0", "--force")


def wait_placed(
    autoscaled: Autoscaled, namespace: str, names: list[str], timeout: float = 180
) -> dict[str, str]:
    found: dict[str, str] = {}

    def placed() -> bool:
        for name in names:
            node = bound_node(autoscaled, namespace, name)
            if node:
                found[name] = node
        return len(found) == len(names)

    wait_for(placed, timeout=timeout, what=f"pods {names} bound", explain=autoscaled.explain)
    return found


def wait_running(autoscaled: Autoscaled, namespace: str, names: list[str], timeout: float = 120) -> None:
    def running() -> bool:
        phases = [
            ((k.get(autoscaled.kube, "pod", name, namespace=namespace) or {}).get("status") or {}).get(
                "phase"
            )
            for name in names
        ]
        return all(phase == "Running" for phase in phases)

    wait_for(running, timeout=timeout, what=f"pods {names} Running", explain=autoscaled.explain)


def wait_bound_and_running(
    autoscaled: Autoscaled,
    namespace: str,
    names: list[str],
    *,
    what: str,
    started: float,
    timeout: float = 180,
) -> dict[str, str]:
    """Wait for ``names`` to be bound, then Running; print both times since ``started``."""
    placed = wait_placed(autoscaled, namespace, names, timeout=timeout)
    bound = time.monotonic() - started
    wait_running(autoscaled, namespace, names)
    running = time.monotonic() - started
    print(f"\nautoscaling: {what}: pending -> bound {bound:.1f}s, pending -> Running {running:.1f}s")
    return placed


def no_demand_asked(autoscaled: Autoscaled, namespace: str, names: list[str]) -> None:
    """Nothing was ever asked of an autoscaler for these pods: no demand pod now, and none
    made before (its Event), so no NodeClaim can follow."""
    assert not demand_pods(autoscaled)
    for name in names:
        assert not k.event_notes(autoscaled.kube, namespace, name, "WaitingForNewNode")


def scheduled_reason(autoscaled: Autoscaled, namespace: str, name: str) -> str:
    obj = k.get(autoscaled.kube, "pod", name, namespace=namespace) or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((str(c.get("reason", "")) for c in conditions if c.get("type") == "PodScheduled"), "")


def nodeclaims_of(autoscaled: Autoscaled, pool: str) -> list[Obj]:
    return [
        c
        for c in k.items(autoscaled.kube, "nodeclaims")
        if c["metadata"]["labels"].get(kwokkit.NODEPOOL_LABEL) == pool
    ]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_gpu_pod_gets_a_node_from_zero_kept_while_in_use_and_removed_when_idle(
    autoscaled: Autoscaled, namespace: str, nodepools: list[str], path: str
) -> None:
    gpu, cpu = f"gpu-{namespace[-6:]}", f"cpu-{namespace[-6:]}"
    nodepool(autoscaled, nodepools, gpu, GPU_TYPE)
    nodepool(autoscaled, nodepools, cpu, CPU_TYPE)  # cheaper: what a careless consolidation moves to
    assert not nodes_of(autoscaled, gpu)
    k.apply(autoscaled.kube, [standalone_claim(namespace, "held", GPU_CLASS)])
    started = time.monotonic()
    k.create(autoscaled.kube, [PATHS[path](namespace, "train", claim={"resourceClaimName": "held"})])
    node = wait_bound_and_running(
        autoscaled, namespace, ["train"], what=f"one pod ({path})", started=started
    )["train"]
    assert instance_type_of(autoscaled, node) == GPU_TYPE
    # Only the demand pod asked for a node: a gated pod is seen by no autoscaler, and one
    # draco binds is WaitingForCapacity, not Unschedulable (no cheap node launched for it).
    assert not nodes_of(autoscaled, cpu), "no CPU node for a pod that needs a GPU"
    wait_for(lambda: not demand_pods(autoscaled), timeout=30, what="the demand pod to go")

    # In use: protected, and Karpenter says so instead of replacing it with a cheaper node.
    def protected() -> bool:
        obj = k.get(autoscaled.kube, "pod", "train", namespace=namespace) or {}
        return (obj["metadata"].get("annotations") or {}).get(KARPENTER_DO_NOT_DISRUPT) == "true"

    wait_for(protected, timeout=60, what="the pod's node protected", explain=autoscaled.explain)

    def blocked() -> bool:
        return any(
            "do-not-disrupt" in str(e.get("note", ""))
            for e in k.events(autoscaled.kube, "default", regarding=node)
        )

    wait_for(
        blocked,
        timeout=120,
        what="Karpenter to find the node's disruption blocked",
        explain=autoscaled.explain,
    )
    assert [n["metadata"]["name"] for n in nodes_of(autoscaled, gpu)] == [node]
    assert not nodes_of(autoscaled, cpu)

    # Idle: consolidated away, and nothing of it is left: the claim (it outlives the pod)
    # deallocated, the node's slices gone with it.
    force_delete(autoscaled, namespace, "train")

    def deallocated() -> bool:
        status = (
            k.get(autoscaled.kube, "resourceclaim.resource.draco.dev", "held", namespace=namespace) or {}
        ).get("status") or {}
        return not status.get("allocation") and not status.get("reservedFor")

    wait_for(deallocated, timeout=60, what="the claim deallocated", explain=autoscaled.explain)
    wait_for(
        lambda: not nodes_of(autoscaled, gpu),
        timeout=180,
        what="the idle node removed",
        explain=autoscaled.explain,
    )
    wait_for(
        lambda: (
            not [
                s
                for s in k.items(autoscaled.kube, "resourceslices.resource.draco.dev")
                if s["spec"].get("nodeName") == node
            ]
        ),
        timeout=60,
        what="the node's slices removed with it",
    )
    claims = k.items(autoscaled.kube, "resourceclaims.resource.draco.dev", namespace=namespace)
    assert [c["metadata"]["name"] for c in claims] == ["held"]
    assert not [c for c in claims if node in json.dumps(c.get("status") or {})]


def pod_group(namespace: str, count: int) -> Obj:
    return {
        "apiVersion": "scheduling.draco.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": count}}},
    }


def gang_of_four(
    autoscaled: Autoscaled, namespace: str, nodepools: list[str], path: str, *, limit: int
) -> tuple[str, list[str]]:
    """A GPU NodePool of ``limits.nodes: limit`` and a gang of 4 pods of one GPU each on
    ``path``: the pool's name and the pods'."""
    gpu = f"gpu-{namespace[-6:]}"
    nodepool(autoscaled, nodepools, gpu, GPU_TYPE, nodes=limit)
    k.apply(autoscaled.kube, [claim_template(namespace, GPU_CLASS), pod_group(namespace, 4)])
    names = [f"w{i}" for i in range(4)]
    k.create(autoscaled.kube, [PATHS[path](namespace, n, labels={POD_GROUP_LABEL: "train"}) for n in names])
    return gpu, names


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_gang_of_four_gets_four_nodes_in_one_round(
    autoscaled: Autoscaled, namespace: str, nodepools: list[str], path: str
) -> None:
    log_mark = kwokkit.log_size(autoscaled.karpenter)
    started = time.monotonic()
    gpu, names = gang_of_four(autoscaled, namespace, nodepools, path, limit=4)
    placed = wait_bound_and_running(
        autoscaled, namespace, names, what=f"a group of 4 ({path})", started=started, timeout=240
    )
    assert len(set(placed.values())) == 4
    assert all(instance_type_of(autoscaled, node) == GPU_TYPE for node in placed.values())
    assert len(nodeclaims_of(autoscaled, gpu)) == 4
    # One round: Karpenter's provisioner computed the four NodeClaims in one scheduling
    # decision (its log), not some now and the rest once the first were up.
    rounds = kwokkit.provisioning_rounds(autoscaled.karpenter, since=log_mark)
    assert rounds and rounds[0][0] == 4, f"Karpenter's rounds (nodeclaims, pods): {rounds}"
    force_delete(autoscaled, namespace, *names)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_gang_the_limits_cannot_hold_launches_nothing_and_says_why(
    autoscaled: Autoscaled, namespace: str, nodepools: list[str], path: str
) -> None:
    gpu, names = gang_of_four(autoscaled, namespace, nodepools, path, limit=3)

    def told() -> list[str]:
        return [
            n for n in k.event_notes(autoscaled.kube, namespace, "w0", "NotTriggerScaleUp") if "limits" in n
        ]

    notes = wait_for(told, timeout=120, what="the NotTriggerScaleUp Event", explain=autoscaled.explain)
    assert "needs 4 new node(s), its limits allow 3 more" in str(notes)
    if path == "schedulerName-draco":
        # The pods themselves are no unschedulable pods for Karpenter either (it would launch a
        # node for their cpu): they wait for capacity, and say why.
        def reasons() -> set[str]:
            return {scheduled_reason(autoscaled, namespace, name) for name in names}

        wait_for(
            lambda: reasons() == {WAITING_FOR_CAPACITY_REASON},
            timeout=60,
            what="the pods marked WaitingForCapacity",
            explain=autoscaled.explain,
        )
    no_demand_asked(autoscaled, namespace, names)
    assert not nodeclaims_of(autoscaled, gpu)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_pod_of_a_cpu_node_class_launches_no_gpu_node(
    autoscaled: Autoscaled, namespace: str, nodepools: list[str], path: str
) -> None:
    gpu, cpu = f"gpu-{namespace[-6:]}", f"cpu-{namespace[-6:]}"
    nodepool(autoscaled, nodepools, gpu, GPU_TYPE)
    nodepool(autoscaled, nodepools, cpu, CPU_TYPE)
    k.apply(autoscaled.kube, [claim_template(namespace, ACCEL_CLASS)])
    k.create(autoscaled.kube, [PATHS[path](namespace, "accel")])
    node = wait_placed(autoscaled, namespace, ["accel"])["accel"]
    assert instance_type_of(autoscaled, node) == CPU_TYPE
    assert not nodes_of(autoscaled, gpu)
    force_delete(autoscaled, namespace, "accel")


def test_invalid_device_templates_are_refused_whole_and_their_groups_asked_nothing(
    autoscaled: Autoscaled, namespace: str, nodepools: list[str], node_template_maps: list[str]
) -> None:
    # The first device is fine, the second's capacity is no quantity: none of it is read.
    broken = [
        {
            "driver": GPU_CLASS,
            "devices": [
                {"name": "gpu-0", "capacity": {"memory": {"value": "40Gi"}}},
                {"name": "gpu-1", "capacity": {"memory": {"value": "forty"}}},
            ],
        }
    ]
    pool = f"bad-{namespace[-6:]}"
    nodepool(autoscaled, nodepools, pool, GPU_TYPE, devices=broken)
    group = f"bad-group-{namespace[-6:]}"
    node_template_map(autoscaled, node_template_maps, group, broken)
    k.apply(autoscaled.kube, [claim_template(namespace, GPU_CLASS)])
    k.create(autoscaled.kube, [gated_pod(namespace, "waits")])

    def refused(namespace: str, name: str) -> list[str]:
        return k.event_notes(autoscaled.kube, namespace, name, "InvalidNodeTemplate")

    field = "[0].devices[1].capacity[memory].value"
    notes = wait_for(
        lambda: refused("default", pool), timeout=120, what="the NodePool's Event", explain=autoscaled.explain
    )
    assert f"NodePool {pool} is invalid: metadata.annotations[{DEVICES_ANNOTATION}]{field}" in str(notes)
    notes = wait_for(
        lambda: refused(DEMAND_NAMESPACE, group),
        timeout=60,
        what="the ConfigMap's Event",
        explain=autoscaled.explain,
    )
    assert f"node template {group} is invalid: spec.devices{field}" in str(notes)

    # The pod is told why nothing scales up for it, and nothing is asked of either group.
    def told() -> list[str]:
        return [
            n
            for n in k.event_notes(autoscaled.kube, namespace, "waits", "NotTriggerScaleUp")
            if pool in n and group in n
        ]

    notes = wait_for(told, timeout=60, what="the pod's NotTriggerScaleUp Event", explain=autoscaled.explain)
    assert "asked nothing until it is fixed" in str(notes)
    no_demand_asked(autoscaled, namespace, ["waits"])
    assert not nodeclaims_of(autoscaled, pool)
