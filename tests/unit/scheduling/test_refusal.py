"""The safety net's decisions (`draco.scheduling.refusal`): which pods kube-scheduler refused
where draco pinned them, and the bare pod draco makes again in place of one."""

from __future__ import annotations

from typing import Any

from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    PLACED_UID_ANNOTATION,
    SCHEDULER_NAME,
    SCHEDULING_GATE,
)
from draco.operator.scheduler.writes import pin_affinity
from draco.scheduling.refusal import (
    REFUSALS_ANNOTATION,
    REFUSED_NODES_ANNOTATION,
    backoff_s,
    has_controller,
    refusal_message,
    refusals,
    refused_by,
    refused_node,
    refused_nodes,
    rejected_by_kubelet,
    replacement,
    unpin_affinity,
)

USER_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        }
    }
}


def refused_pod(**changes: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "labels": {"app": "x"},
            "annotations": {PLACED_UID_ANNOTATION: "u1", CLAIM_STATUSES_ANNOTATION: "{}", "mine": "kept"},
            "resourceVersion": "9",
        },
        "spec": {"containers": [{"name": "c", "image": "i"}], "affinity": pin_affinity(USER_AFFINITY, "n1")},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 1 node(s) didn't have free ports",
                }
            ],
        },
    }
    for path, value in changes.items():
        section, _, key = path.partition("__")
        if value is None:
            pod[section].pop(key, None)
        else:
            pod[section][key] = value
    return pod


def test_a_pinned_pod_kube_scheduler_refused_is_noticed_with_its_node() -> None:
    pod = refused_pod()
    assert refused_node(pod) == "n1"
    assert "free ports" in refusal_message(pod)


def test_only_pods_draco_placed_and_left_pending_are_refusals() -> None:
    assert refused_node(refused_pod(spec__nodeName="n1")) is None, "bound: not refused"
    assert refused_node(refused_pod(metadata__deletionTimestamp="t")) is None
    assert refused_node(refused_pod(spec__schedulingGates=[{"name": SCHEDULING_GATE}])) is None
    other = refused_pod()
    other["metadata"]["annotations"][PLACED_UID_ANNOTATION] = "someone-else"
    assert refused_node(other) is None, "a copy of a placed pod was not placed by draco"
    waiting = refused_pod()
    waiting["status"]["conditions"][0]["reason"] = "SchedulerError"
    assert refused_node(waiting) is None
    scheduled = refused_pod()
    scheduled["status"]["conditions"][0]["status"] = "True"
    assert refused_node(scheduled) is None
    assert refused_node(refused_pod(status__phase="Failed")) is None


def test_unpin_takes_out_only_draco_s_requirement() -> None:
    assert unpin_affinity(pin_affinity(USER_AFFINITY, "n1"), "n1") == USER_AFFINITY
    assert unpin_affinity(pin_affinity(None, "n1"), "n1") is None
    with_pod_affinity = {**pin_affinity(None, "n1"), "podAffinity": {"x": 1}}
    assert unpin_affinity(with_pod_affinity, "n1") == {"podAffinity": {"x": 1}}


def test_the_replacement_is_the_pod_as_written_gated_with_its_refusals() -> None:
    body = replacement(refused_pod(), node="n1")
    meta, spec = body["metadata"], body["spec"]
    assert meta == {
        "name": "p",
        "namespace": "ns",
        "labels": {"app": "x"},
        "annotations": {"mine": "kept", REFUSED_NODES_ANNOTATION: "n1", REFUSALS_ANNOTATION: "1"},
    }
    assert spec["affinity"] == USER_AFFINITY
    assert spec["schedulingGates"] == [{"name": SCHEDULING_GATE}]
    assert "status" not in body
    again = replacement({**refused_pod(), "metadata": {**refused_pod()["metadata"], **meta}}, node="n2")
    assert refused_nodes(again) == ["n1", "n2"]
    assert refusals(again) == 2


def test_backoff_and_controllers() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4, 10)] == [0.0, 1.0, 2.0, 4.0, 60.0]
    assert not has_controller(refused_pod())
    owned = refused_pod()
    owned["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "uid": "rs", "controller": True}]
    assert has_controller(owned)


def rejected_pod(**status: Any) -> dict[str, Any]:
    """A pod draco bound itself (it names draco), Failed at the kubelet's admission."""
    pod = refused_pod(
        spec__affinity=None,
        status__phase="Failed",
        status__conditions=None,
        status__reason="OutOfcpu",
        status__message="Pod was rejected: Node didn't have enough resource: cpu, requested: 500, used: 3800, capacity: 4000",
    )
    pod["spec"].update(schedulerName=SCHEDULER_NAME, nodeName="n1")
    pod["status"].update(status)
    return pod


def test_a_pod_draco_bound_that_the_kubelet_rejected_is_noticed_with_its_node() -> None:
    pod = rejected_pod()
    assert rejected_by_kubelet(pod)
    assert refused_node(pod) == "n1"
    assert refused_by(pod) == "the kubelet"
    assert refusal_message(pod).startswith("Pod was rejected: Node didn't have enough resource: cpu")
    for reason in ("OutOfmemory", "OutOfpods", "NodeAffinity", "UnexpectedAdmissionError"):
        assert refused_node(rejected_pod(reason=reason)) == "n1"
    # Failed for another reason (it ran and exited), still running, or not placed by draco: none.
    assert refused_node(rejected_pod(reason="Error")) is None
    assert refused_node(rejected_pod(phase="Running", reason=None)) is None
    other = rejected_pod()
    other["metadata"]["annotations"][PLACED_UID_ANNOTATION] = "u0"
    assert refused_node(other) is None
    # A pinned pod the kubelet rejected is kube-scheduler's business no more: not this path.
    pinned = rejected_pod()
    pinned["spec"].pop("schedulerName")
    assert refused_node(pinned) is None and refused_by(pinned) == "kube-scheduler"


def test_the_replacement_of_a_pod_draco_binds_names_draco_and_is_not_gated() -> None:
    again = replacement(rejected_pod(), node="n1")
    assert again["spec"]["schedulerName"] == SCHEDULER_NAME
    assert "nodeName" not in again["spec"] and "schedulingGates" not in again["spec"]
    assert refused_nodes(again) == ["n1"] and refusals(again) == 1
