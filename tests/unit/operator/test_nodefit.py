"""The node-only checks of kube-scheduler's profile draco makes first (nodeName, selector,
affinity, taints, cordons), the pod's requests, and the words of FailedScheduling."""

from __future__ import annotations

from typing import Any

import pytest

from draco.scheduling.nodefit import (
    REASON_SELECTOR,
    NodeInfo,
    NodeTaint,
    node_info_from_dict,
    summarize_reasons,
)
from draco.scheduling.podinfo import pod_info, requested_resources
from draco.scheduling.profile import node_unfit

REASON_CPU = "Insufficient cpu"
NODE = NodeInfo(name="n1", labels={"zone": "a", "gpus": "8", "kubernetes.io/hostname": "n1"})


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def reason(spec: dict[str, Any], node: NodeInfo = NODE) -> str | None:
    return node_unfit(pod_info({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}), node)


def test_a_pod_without_constraints_fits() -> None:
    assert reason({"containers": [{"name": "c"}]}) is None


@pytest.mark.parametrize(
    ("selector", "fits"),
    [({"zone": "a"}, True), ({"zone": "b"}, False), ({"zone": "a", "missing": "x"}, False), ({}, True)],
)
def test_node_selector_needs_every_label(selector: dict[str, str], fits: bool) -> None:
    assert (reason({"nodeSelector": selector}) is None) is fits


@pytest.mark.parametrize(
    ("expression", "fits"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["b"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "absent", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "absent", "operator": "Exists"}, False),
        ({"key": "absent", "operator": "DoesNotExist"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["8"]}, False),
        ({"key": "gpus", "operator": "Lt", "values": ["9"]}, True),
        ({"key": "gpus", "operator": "Lt", "values": ["8"]}, False),
        ({"key": "zone", "operator": "Gt", "values": ["1"]}, False),
        ({"key": "absent", "operator": "Lt", "values": ["1"]}, False),
    ],
)
def test_match_expressions(expression: dict[str, Any], fits: bool) -> None:
    assert (reason({"affinity": affinity({"matchExpressions": [expression]})}) is None) is fits


def test_match_fields_only_know_the_node_name() -> None:
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    other = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    unknown = {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["n1"]}]}
    assert reason({"affinity": affinity(by_name)}) is None
    assert reason({"affinity": affinity(other)}) == REASON_SELECTOR
    assert reason({"affinity": affinity(unknown)}) == REASON_SELECTOR


def test_terms_are_ored_and_requirements_anded() -> None:
    wrong_zone = {"key": "zone", "operator": "In", "values": ["b"]}
    right_zone = {"key": "zone", "operator": "In", "values": ["a"]}
    many = {"key": "gpus", "operator": "Gt", "values": ["4"]}
    assert (
        reason({"affinity": affinity({"matchExpressions": [wrong_zone]}, {"matchExpressions": [right_zone]})})
        is None
    )
    assert reason({"affinity": affinity({"matchExpressions": [right_zone, wrong_zone]})}) == REASON_SELECTOR
    assert reason({"affinity": affinity({"matchExpressions": [right_zone, many]})}) is None


def test_an_empty_term_matches_nothing_and_no_terms_match_nothing() -> None:
    assert reason({"affinity": affinity({})}) == REASON_SELECTOR
    assert reason({"affinity": affinity()}) == REASON_SELECTOR


def test_node_name_on_the_pod_restricts_to_that_node() -> None:
    assert reason({"nodeName": "n1"}) is None
    assert reason({"nodeName": "n2"}) == REASON_SELECTOR


TAINTED = NodeInfo(
    name="t",
    taints=(NodeTaint("gpu", "broken", "NoSchedule"), NodeTaint("soft", "", "PreferNoSchedule")),
)


@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        ([], False),
        ([{"key": "gpu", "operator": "Equal", "value": "broken", "effect": "NoSchedule"}], True),
        ([{"key": "gpu", "value": "broken"}], True),
        ([{"key": "gpu", "value": "fine"}], False),
        ([{"key": "gpu", "operator": "Exists"}], True),
        ([{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"operator": "Exists"}], True),
        ([{"key": "other", "operator": "Exists"}], False),
    ],
)
def test_untolerated_no_schedule_taints_block(tolerations: list[dict[str, Any]], fits: bool) -> None:
    got = reason({"tolerations": tolerations}, node=TAINTED)
    assert (got is None) is fits
    if not fits:
        assert got == "node(s) had untolerated taint {gpu=broken}"


def test_prefer_no_schedule_does_not_block() -> None:
    node = NodeInfo(name="p", taints=(NodeTaint("soft", "", "PreferNoSchedule"),))
    assert reason({}, node=node) is None


def test_no_execute_blocks_and_unschedulable_is_a_taint() -> None:
    node = node_info_from_dict(
        {
            "metadata": {"name": "x"},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoExecute"}]},
        }
    )
    assert reason({}, node=node) == "node(s) had untolerated taint {k}"
    tolerate_k = [{"key": "k", "operator": "Exists"}]
    assert reason({"tolerations": tolerate_k}, node=node) == (
        "node(s) had untolerated taint {node.kubernetes.io/unschedulable}"
    )


def container(cpu: str | None = None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "resources": {"requests": requests}, **extra}


def test_requests_are_summed_over_containers_with_overhead() -> None:
    spec = {"containers": [container("500m", "1Gi"), container("1", "512Mi")], "overhead": {"cpu": "100m"}}
    assert requested_resources(spec) == {"cpu": 1600, "memory": int(1.5 * 2**30)}


def test_init_containers_take_the_max_and_sidecars_add_up() -> None:
    spec = {
        "initContainers": [container("3"), container("200m", restartPolicy="Always"), container("2")],
        "containers": [container("1")],
    }
    # init 1 alone: 3; sidecar then init 2: 0.2 + 2; running: 1 + 0.2.
    assert requested_resources(spec)["cpu"] == 3000


def test_node_info_from_a_node_object() -> None:
    info = node_info_from_dict(
        {
            "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "7500m", "memory": "16Gi", "pods": "110"}},
        }
    )
    assert info == NodeInfo(
        name="n",
        labels={"a": "b"},
        taints=(NodeTaint("k", "v", "NoSchedule"),),
        allocatable={"cpu": 7500, "memory": 16 * 2**30, "pods": 110},
    )


def test_summary_reads_like_the_scheduler() -> None:
    text = summarize_reasons(5, [REASON_CPU, REASON_SELECTOR, REASON_CPU])
    assert text == f"2/5 nodes are available: 2 {REASON_CPU}, 1 {REASON_SELECTOR}"
    assert summarize_reasons(2, []) == "2/2 nodes are available"


def test_unschedulable_message_counts_nodes_whose_devices_do_not_fit() -> None:
    from draco.scheduling.nodefit import CANNOT_ALLOCATE, unschedulable_message

    text = unschedulable_message(
        total=4,
        node_reasons=[REASON_CPU],
        device_unfit_nodes=3,
        explanation="claim a/b fit on none of 3 node(s):",
    )
    assert text.startswith(f"0/4 nodes are available: 3 {CANNOT_ALLOCATE}, 1 {REASON_CPU}.")
    assert text.endswith("claim a/b fit on none of 3 node(s):")
    assert unschedulable_message(total=0, node_reasons=[], device_unfit_nodes=0) == (
        "0/0 nodes are available: no Node objects exist"
    )


def test_unschedulable_message_keeps_whole_reasons_within_the_event_limit() -> None:
    from draco.scheduling.nodefit import EVENT_MESSAGE_LIMIT, unschedulable_message

    reason = "- 4 node(s): claim ns/claim-{i}, request gpu needs 1 device(s) of class gpu; over these nodes 8 devices: 8 allocated; 0 left"
    explanation = "\n".join(
        ["claims ns/claim-0, ns/claim-1, ns/claim-2 and 297 more fit on none of 4 node(s):"]
        + [reason.format(i=i) for i in range(300)]
    )
    text = unschedulable_message(total=4, node_reasons=[], device_unfit_nodes=4, explanation=explanation)
    assert len(text.encode()) <= EVENT_MESSAGE_LIMIT
    assert text.startswith("0/4 nodes are available: 4 cannot allocate all claims.")
    lines = text.splitlines()
    assert "8 allocated; 0 left" in lines[1]  # the first reason survives whole
    assert all(line.endswith("0 left") for line in lines[1:-1])
    assert lines[-1].startswith("(and ") and "more" in lines[-1]
