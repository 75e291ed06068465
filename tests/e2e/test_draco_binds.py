"""Pods that name draco as their scheduler (`spec.schedulerName: draco`) are placed and
bound by draco itself, with a real kube-scheduler running beside it that leaves them alone:
no gate, no pin, one binding that carries the claim statuses; kube-scheduler's rules hold
all the same (required anti-affinity spreads the workers), a pod without claims is bound
too, a group of such pods is bound all or nothing, and the pod webhook with `--pod-binding=draco` names draco on the pods it hands over
instead of gating them (a gate a workload's template brought goes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    SCHEDULER_NAME,
    SCHEDULING_GATE,
)
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.schedulerkit import NEEDS_KUBE_SCHEDULER
from tests.e2e.support import DracoProcess, running_webhook, start_operator, wait_for
from tests.e2e.test_gangs import allocated_claims, members, pod_group, pods_of, setup, told
from tests.e2e.test_placement import anti_affinity, nodes, pod, template, wait_bound

pytestmark = [pytest.mark.e2e, NEEDS_KUBE_SCHEDULER]

Start = Callable[..., DracoProcess]
Obj = dict[str, Any]
OPT_IN = "resource.draco.dev/pod-webhook=enabled"


def draco_pod(namespace: str, name: str, **kwargs: Any) -> Obj:
    """`test_placement.pod`, naming draco as its scheduler instead of the gate."""
    body = pod(namespace, name, SCHEDULER_NAME, **kwargs)
    body["spec"].pop("schedulingGates", None)
    return body


def unschedulable(obj: Obj) -> str:
    """The message of the pod's ``PodScheduled=False/Unschedulable`` condition ("" without one)."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and (condition["status"], condition.get("reason")) == (
            "False",
            "Unschedulable",
        ):
            return str(condition.get("message", ""))
    return ""


def scheduled_notes(kube: ControlPlane, namespace: str, name: str) -> list[str]:
    return [
        str(e.get("note"))
        for e in k.events(kube, namespace, regarding=name)
        if e.get("reason") == "Scheduled" and e.get("reportingController") == "draco-operator"
    ]


def test_draco_binds_the_pods_that_name_it_by_kube_schedulers_rules(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    names = nodes(kube, namespace, 2)
    k.apply(kube, [template(namespace)])
    workers = [
        draco_pod(namespace, f"w{i}", labels={"app": "w"}, affinity=anti_affinity({"app": "w"}))
        for i in range(2)
    ]
    k.create(kube, workers)
    start_operator(draco_process, namespace)
    placed = wait_bound(kube, namespace, ["w0", "w1"])
    assert sorted(placed.values()) == names  # one per node, as the anti-affinity says
    for name, node in placed.items():
        obj = k.get(kube, "pod", name, namespace=namespace)
        assert obj is not None
        # Bound by the binding alone: no pin, and the binding brought the claim statuses.
        assert "affinity" not in obj["spec"] or "nodeAffinity" not in obj["spec"]["affinity"]
        statuses = json.loads(obj["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])
        claim_name = statuses["gpu"]
        conditions = {c["type"]: c["status"] for c in obj["status"].get("conditions") or []}
        assert conditions.get("PodScheduled") == "True"
        claim = k.get(kube, "resourceclaims.resource.draco.dev", claim_name, namespace=namespace)
        assert claim is not None
        assert (
            k.allocated_devices(claim)
            and claim["status"]["allocation"]["devices"]["results"][0]["pool"] == node
        )
        assert k.reserved_uids(claim) == {obj["metadata"]["uid"]}
        notes = scheduled_notes(kube, namespace, name)
        assert notes and notes[0].startswith(f"Successfully assigned {namespace}/{name} to {node}; allocated")


def test_a_pod_naming_draco_without_claims_is_bound_too(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    (a,) = nodes(kube, namespace, 1, devices=0)
    plain = draco_pod(namespace, "plain", claims=[])
    plain["metadata"]["annotations"].pop(CLAIMS_ANNOTATION)
    k.create(kube, [plain])
    start_operator(draco_process, namespace)
    assert wait_bound(kube, namespace, ["plain"]) == {"plain": a}
    assert scheduled_notes(kube, namespace, "plain") == [f"Successfully assigned {namespace}/plain to {a}"]


def test_a_pod_naming_draco_that_fits_nowhere_is_marked_unschedulable_until_it_fits(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    (a,) = nodes(kube, namespace, 1, devices=0)
    k.apply(kube, [template(namespace)])
    k.create(kube, [draco_pod(namespace, "waits")])
    operator = start_operator(draco_process, namespace)
    marked = wait_for(
        lambda: unschedulable(k.get(kube, "pod", "waits", namespace=namespace) or {}),
        timeout=60,
        what="PodScheduled=False/Unschedulable on the pod",
        explain=operator.logs,
    )
    assert "cannot allocate all claims" in str(marked)
    assert k.event_notes(kube, namespace, "waits", "FailedScheduling")

    k.apply(kube, [k.node_slice(namespace, a, 1)])
    assert wait_bound(kube, namespace, ["waits"]) == {"waits": a}
    obj = k.get(kube, "pod", "waits", namespace=namespace)
    assert obj is not None
    conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
    assert conditions["PodScheduled"] == "True"


def test_the_pod_webhook_names_draco_instead_of_gating_with_pod_binding_draco(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str, tmp_path: Path
) -> None:
    (a,) = nodes(kube, namespace, 1, devices=3)
    k.apply(kube, [template(namespace)])
    kube.kubectl("label", "namespace", namespace, OPT_IN)
    with running_webhook(kube, tmp_path / "webhook", extra=("--pod-binding", "draco")):
        mine = pod(namespace, "mine", "default-scheduler")
        mine["spec"].pop("schedulerName")
        mine["spec"].pop("schedulingGates")
        templated = pod(namespace, "templated", "default-scheduler")  # the gate came with it
        other = pod(namespace, "other", scheduler)  # names another scheduler: gated as before
        other["spec"].pop("schedulingGates")
        created = {
            body["metadata"]["name"]: json.loads(
                kube.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body)).stdout
            )
            for body in (mine, templated, other)
        }
    for name in ("mine", "templated"):
        spec = created[name]["spec"]
        assert spec["schedulerName"] == SCHEDULER_NAME
        assert not any(g["name"] == SCHEDULING_GATE for g in spec.get("schedulingGates") or [])
    assert created["other"]["spec"]["schedulerName"] == scheduler
    assert k.is_gated(created["other"])
    start_operator(draco_process, namespace)
    assert wait_bound(kube, namespace, ["mine", "templated", "other"]) == dict.fromkeys(
        ("mine", "templated", "other"), a
    )
    assert scheduled_notes(kube, namespace, "mine")
    assert not scheduled_notes(kube, namespace, "other")  # kube-scheduler bound that one


def test_a_group_of_pods_that_name_draco_is_bound_whole_once_it_fits(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    """All or nothing holds when draco binds: no member is bound before the group fits."""
    setup(kube, namespace, {"a": 1, "b": 1})
    k.apply(kube, [pod_group(namespace, "train", 3)])
    pods = members(namespace, "train", 3, schedulerName=SCHEDULER_NAME)
    for body in pods:
        body["spec"].pop("schedulingGates")
    k.create(kube, pods)
    operator = start_operator(draco_process, namespace)
    wait_for(
        lambda: told(kube, namespace, "train-0", "2 of 3 pod(s) can be placed together, 3 needed"),
        timeout=60,
        what="the group's members told what is missing",
        explain=operator.logs,
    )
    waiting = pods_of(kube, namespace, "train")
    assert not any(p["spec"].get("nodeName") for p in waiting)
    assert all("2 of 3" in unschedulable(p) for p in waiting)
    assert allocated_claims(kube, namespace) == [], "a group that cannot run whole holds no device"

    k.add_nodes(kube, [k.node(f"{namespace}-c")])
    k.apply(kube, [k.node_slice(namespace, f"{namespace}-c", 1)])
    placed = wait_bound(kube, namespace, ["train-0", "train-1", "train-2"])
    assert sorted(placed.values()) == [f"{namespace}-{s}" for s in "abc"]
    assert all(scheduled_notes(kube, namespace, name) for name in placed)


def test_a_bare_pod_the_kubelet_rejects_where_draco_bound_it_is_made_again_elsewhere(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str
) -> None:
    """The safety net for pods draco binds: the kubelet is the one that can refuse them (at
    admission, when another scheduler filled the node in the moment draco could not see
    it). Nodes here have no kubelet, so the test writes the rejection as a kubelet does."""
    nodes(kube, namespace, 2)
    k.apply(kube, [template(namespace)])
    k.create(kube, [draco_pod(namespace, "bare")])
    operator = start_operator(draco_process, namespace)
    first = wait_bound(kube, namespace, ["bare"])["bare"]
    old = k.get(kube, "pod", "bare", namespace=namespace)
    assert old is not None
    rejection = {
        "status": {
            "phase": "Failed",
            "reason": "OutOfcpu",
            "message": "Pod was rejected: Node didn't have enough resource: cpu, requested: 100, used: 3950, "
            "capacity: 4000",
        }
    }
    kube.kubectl(
        "patch", "pod", "bare", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(rejection),
    )  # fmt: skip

    def again() -> Obj | None:
        pod = k.get(kube, "pod", "bare", namespace=namespace)
        if pod and pod["metadata"]["uid"] != old["metadata"]["uid"] and pod["spec"].get("nodeName"):
            return pod
        return None

    new = wait_for(again, timeout=90, what="the pod made again and bound", explain=operator.logs)
    assert isinstance(new, dict)
    assert new["spec"]["nodeName"] != first, "the node that rejected it is avoided"
    assert new["spec"]["schedulerName"] == SCHEDULER_NAME and not new["spec"].get("schedulingGates")
    assert new["metadata"]["annotations"]["resource.draco.dev/refused-nodes"] == first
    refused = [
        str(e.get("note"))
        for e in k.events(kube, namespace, regarding="bare")
        if e.get("reason") == "PlacementRefused"
    ]
    assert refused and refused[0].startswith(
        f"the kubelet refused node {first}, where draco had placed the pod"
    )
    held = [
        c
        for c in allocated_claims(kube, namespace)
        if old["metadata"]["uid"] in {r["uid"] for r in c["status"].get("reservedFor") or []}
    ]
    assert held == [], "the rejected pod holds no device"
