"""Demand pods, node templates and scale-down protection (`draco.scheduling.demand`,
`nodetemplates`, `scaledown`): what autoscalers are shown, and what keeps a node."""

from __future__ import annotations

from typing import Any

import pytest

from draco.allocator import Inventory
from draco.allocator.outcome import Node
from draco.quantity import Quantity
from draco.scheduling.demand import (
    CA_SAFE_TO_EVICT,
    DEMAND_SCHEDULER,
    GROUP_LABEL,
    KARPENTER_DO_NOT_DISRUPT,
    NODE_LABEL,
    PROTECTED_ANNOTATION,
    demand_pod,
    node_label_value,
    protection,
    same_demand,
)
from draco.scheduling.nodetemplates import (
    DEVICES_ANNOTATION,
    Candidate,
    NodeTemplateError,
    claims_resources,
    class_resource,
    from_nodepool,
    nodepool_headroom,
    nodes_needed,
    parse_template,
    pod_resources,
    template_refusal,
    template_resources,
)
from draco.scheduling.requests import pod_requests
from draco.scheduling.scaledown import movable, node_of_claim

Obj = dict[str, Any]
GPU = "gpu.example.com"
GPU_RESOURCE = f"deviceclass.resource.draco.dev/{GPU}"


def gpu_class(extended: str | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": GPU},
        "spec": spec,
    }


def devices(count: int) -> list[Obj]:
    return [{"driver": GPU, "devices": [{"name": f"gpu-{i}"} for i in range(count)]}]


def template_doc(**spec: Any) -> Obj:
    return {
        "apiVersion": "autoscaling.resource.draco.dev/v1alpha1",
        "kind": "NodeTemplate",
        "metadata": {"name": "gpu"},
        "spec": {"labels": {"pool": "gpu"}, "devices": devices(2), **spec},
    }


def claim(name: str, count: int = 1, *, node: str | None = None) -> Obj:
    body: Obj = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU, "count": count}}]}
        },
    }
    if node is not None:
        body["status"] = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": GPU, "pool": node, "device": "gpu-0"}]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        }
    return body


def pod(name: str = "p", **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": "train"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            **spec,
        },
    }


def candidate(body: Obj, *claims: Obj) -> Candidate:
    return Candidate(
        key=f"ns/{body['metadata']['name']}",
        spec=body["spec"],
        claims=claims,
        resources=pod_resources(pod_requests(body["spec"])),
    )


# --- demand pods ----------------------------------------------------------------------------


def test_a_demand_pod_asks_for_the_pods_resources_and_its_devices_on_new_nodes_only() -> None:
    real = pod(nodeSelector={"zone": "a"}, tolerations=[{"key": "gpu", "operator": "Exists"}])
    body = demand_pod(
        pod=real,
        namespace="draco",
        core={"cpu": Quantity.parse("1")},
        devices={GPU_RESOURCE: 2},
        excluded=["node-1"],
        steering=[{"karpenter.sh/nodepool": "gpu"}],
    )
    spec = body["spec"]
    assert spec["schedulerName"] == DEMAND_SCHEDULER
    assert body["metadata"]["namespace"] == "draco"
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "1", GPU_RESOURCE: "2"},
        "limits": {GPU_RESOURCE: "2"},
    }
    assert spec["nodeSelector"] == {"zone": "a"} and spec["tolerations"] == real["spec"]["tolerations"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu"]},
                {"key": NODE_LABEL, "operator": "NotIn", "values": ["node-1"]},
            ]
        }
    ]


def test_the_pods_own_node_terms_are_kept_and_self_anti_affinity_applies_among_its_group() -> None:
    own = {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["amd64"]}]}
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [own]}},
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": "kubernetes.io/hostname"},
                {"labelSelector": {"matchLabels": {"app": "other"}}, "topologyKey": "kubernetes.io/hostname"},
            ]
        },
    }
    body = demand_pod(
        pod=pod(affinity=affinity), namespace="d", core={}, devices={}, excluded=[], group_key="g"
    )
    result = body["spec"]["affinity"]
    assert result["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        own
    ]
    terms = result["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(terms) == 1  # the term about other pods is dropped: a new node holds none of them
    assert terms[0]["labelSelector"]["matchLabels"] == {GROUP_LABEL: body["metadata"]["labels"][GROUP_LABEL]}


def test_a_demand_asking_otherwise_is_not_the_same() -> None:
    first = demand_pod(pod=pod(), namespace="d", core={}, devices={GPU_RESOURCE: 1}, excluded=[])
    assert same_demand(first, first)
    other = demand_pod(pod=pod(), namespace="d", core={}, devices={GPU_RESOURCE: 1}, excluded=["n"])
    assert not same_demand(first, other)


def test_node_label_values_are_label_values() -> None:
    assert node_label_value("node-1") == "node-1"
    long = "n" * 100
    assert len(node_label_value(long)) <= 63 and node_label_value(long) != long


def test_device_requests_become_the_class_resource_the_class_itself_names_first() -> None:
    assert class_resource(GPU, {GPU_RESOURCE: GPU}) == GPU_RESOURCE
    classes = {GPU_RESOURCE: GPU, "nvidia.com/gpu": GPU}
    assert class_resource(GPU, classes) == "nvidia.com/gpu"
    assert claims_resources([claim("a", 2), claim("b")], classes) == {"nvidia.com/gpu": 3}


# --- scale-down -----------------------------------------------------------------------------


def test_protection_marks_what_draco_adds_and_lifts_only_that() -> None:
    patch = protection(pod(), protect=True)
    assert patch is not None
    assert patch["metadata"]["annotations"] == {
        KARPENTER_DO_NOT_DISRUPT: "true",
        CA_SAFE_TO_EVICT: "false",
        PROTECTED_ANNOTATION: "true",
    }
    protected = pod()
    protected["metadata"]["annotations"] = patch["metadata"]["annotations"]
    assert protection(protected, protect=True) is None
    lifted = protection(protected, protect=False)
    assert lifted is not None and set(lifted["metadata"]["annotations"].values()) == {None}
    users = pod()
    users["metadata"]["annotations"] = {KARPENTER_DO_NOT_DISRUPT: "true"}
    assert protection(users, protect=False) is None  # the user's own stays


def two_nodes(free_on_other: bool) -> tuple[Inventory, Obj, list[Node]]:
    slices = [
        {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"s-{node}"},
            "spec": {
                "driver": GPU,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        }
        for node in ("n1", "n2")
    ]
    held = claim("held", node="n1")
    allocated = [held] + ([] if free_on_other else [claim("other", node="n2")])
    inventory = Inventory.build(classes=[gpu_class()], slices=slices, allocated_claims=allocated)
    return inventory, held, [Node(name="n1"), Node(name="n2")]


@pytest.mark.parametrize("free_on_other", [True, False])
def test_a_node_is_kept_unless_its_pods_devices_could_be_had_elsewhere(free_on_other: bool) -> None:
    inventory, held, nodes = two_nodes(free_on_other)
    assert node_of_claim(held) == "n1"
    assert movable(inventory, node="n1", held=[[held]], nodes=nodes) is free_on_other
    # The inventory is left as it was: n1's device still in use, n2's as before.
    assert movable(inventory, node="n1", held=[[held]], nodes=nodes) is free_on_other


# --- node templates -------------------------------------------------------------------------


def test_a_template_brings_its_devices_as_the_resources_draco_advertises() -> None:
    template = parse_template(template_doc(), source="t.yaml")
    assert template_resources(template, [gpu_class()])[GPU_RESOURCE] == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"maxNodez": 3}, "spec.maxNodez"),
        ({"maxNodes": -1}, "spec.maxNodes"),
        ({"taints": [{"key": "a", "effect": "Sometimes"}]}, "spec.taints[0]"),
        ({"allocatable": {"cpu": "lots"}}, "spec.allocatable[cpu]"),
        ({"devices": []}, "spec.devices"),
        (
            {"devices": [{"driver": GPU, "devices": [{"name": "Bad_Name"}]}]},
            "spec.devices[0].devices[0].name",
        ),
        (
            {"devices": [{"driver": GPU, "nodeName": "x", "devices": [{"name": "a"}]}]},
            "spec.devices[0].nodeName",
        ),
        (  # the first slice is fine: the second still refuses the whole template
            {
                "devices": [
                    *devices(1),
                    {"driver": GPU, "devices": [{"name": "b", "capacity": {"m": {"value": "lots"}}}]},
                ]
            },
            "spec.devices[1].devices[0].capacity[m].value",
        ),
    ],
)
def test_an_invalid_template_is_refused_whole_naming_the_field(change: Obj, field: str) -> None:
    with pytest.raises(NodeTemplateError) as caught:
        parse_template(template_doc(**change), source="t.yaml")
    assert field in str(caught.value)


def test_a_nodepool_template_with_a_broken_device_list_is_refused() -> None:
    pool = {"metadata": {"name": "gpu", "annotations": {DEVICES_ANNOTATION: "[{driver: 1, devices: oops}"}}}
    with pytest.raises(NodeTemplateError, match="NodePool gpu is invalid"):
        from_nodepool(pool)
    assert from_nodepool({"metadata": {"name": "cpu"}}) is None


def test_a_nodepool_headroom_is_what_its_limits_leave_in_nodes() -> None:
    pool = {
        "metadata": {
            "name": "gpu",
            "annotations": {DEVICES_ANNOTATION: "- driver: gpu.example.com\n  devices: [{name: g}]\n"},
        },
        "spec": {"limits": {"nodes": "3", GPU_RESOURCE: "10", "cpu": "100"}},
        "status": {"resources": {"nodes": "1", GPU_RESOURCE: "9"}},
    }
    template = from_nodepool(pool)
    assert template is not None and template.labels["karpenter.sh/nodepool"] == "gpu"
    limited = nodepool_headroom(template, pool, {GPU_RESOURCE: 1})
    assert limited.headroom == 1 and GPU_RESOURCE in limited.headroom_reason


def test_a_template_refuses_a_pod_it_cannot_take_and_says_why() -> None:
    template = parse_template(template_doc(taints=[{"key": "gpu", "effect": "NoSchedule"}]), source="t")
    classes = [gpu_class()]
    assert "taint gpu:NoSchedule" in str(template_refusal(candidate(pod(), claim("a")), template, classes))
    tolerant = pod(tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert template_refusal(candidate(tolerant, claim("a")), template, classes) is None
    assert "do not fit" in str(template_refusal(candidate(tolerant, claim("a", 3)), template, classes))
    selector = pod(tolerations=[{"key": "gpu", "operator": "Exists"}], nodeSelector={"pool": "cpu"})
    assert "nodeSelector" in str(template_refusal(candidate(selector, claim("a")), template, classes))


def test_nodes_needed_packs_the_devices_and_keeps_anti_affine_pods_apart() -> None:
    template = parse_template(template_doc(allocatable={"cpu": "4", "memory": "8Gi"}), source="t")
    classes = [gpu_class()]
    four = [candidate(pod(f"p{i}"), claim(f"c{i}")) for i in range(4)]
    assert nodes_needed(four, template, classes) == 2  # two GPUs a node
    assert nodes_needed(four, template, classes, apart=True) == 4
    big = pod("big")
    big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"
    assert "cpu" in str(nodes_needed([candidate(big)], template, classes))
