"""Extended resources backed by DeviceClasses, on a real API server with the operator running.

A gated pod asking for `example.com/gpu` (a class declares that `extendedResourceName`) gets
one special claim, owned by the pod, allocated with the pod's devices, recorded on the pod
with its request-to-container mappings; the pod is pinned and un-gated, and the node
advertises the resource so kube-scheduler's resource fit accepts it. Upstream's implicit
name `deviceclass.resource.kubernetes.io/<class>` is served the same way. The webhook adds the
gate in real use; here the pods are created gated.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from draco.api.constants import EXTENDED_RESOURCE_CLAIM_ANNOTATION, EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import lifecycle_support as ls
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, start_operator, wait_for
from tests.e2e.test_eviction import evicted, set_taints, taint

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]


def resource_of(namespace: str) -> str:
    return f"{namespace}.example.com/gpu"


def cluster(kube: ControlPlane, namespace: str, *, devices: int) -> str:
    node = f"{namespace}-n0"
    k.add_nodes(kube, [k.node(node)])
    device_class = k.device_class(namespace)
    device_class["spec"]["extendedResourceName"] = resource_of(namespace)
    k.apply(kube, [device_class])
    k.apply(kube, [k.node_slice(namespace, node, devices)])
    return node


def container(name: str, limits: dict[str, str], **extra: object) -> k.Obj:
    return {"name": name, "image": "registry.invalid/none", "resources": {"limits": limits}, **extra}


def gated_pod(namespace: str, name: str, containers: list[k.Obj], init: list[k.Obj] | None = None) -> k.Obj:
    pod = k.pod(namespace, name, [])
    del pod["metadata"]["annotations"]
    pod["spec"]["containers"] = containers
    if init:
        pod["spec"]["initContainers"] = init
    return pod


def settled(kube: ControlPlane, namespace: str, name: str) -> k.Obj | None:
    pod = k.get(kube, "pod", name, namespace=namespace)
    return pod if pod is not None and not k.is_gated(pod) else None


def record(pod: k.Obj) -> k.Obj:
    return dict(json.loads(pod["metadata"]["annotations"][EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION]))


def test_limits_become_a_special_claim_the_pod_is_pinned_and_the_node_advertises_it(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    node = cluster(kube, namespace, devices=3)
    gpu = resource_of(namespace)
    k.create(kube, [gated_pod(namespace, "p", [container("main", {gpu: "2"})])])
    start_operator(draco_process, namespace)

    pod = wait_for(lambda: settled(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    assert k.pinned_node(pod) == node
    recorded = record(pod)
    claim = k.get(kube, k.CLAIMS, recorded["resourceClaimName"], namespace=namespace)
    assert claim is not None
    assert claim["metadata"]["name"].startswith("p-extended-resources-")
    assert claim["metadata"]["annotations"][EXTENDED_RESOURCE_CLAIM_ANNOTATION] == "true"
    [owner] = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "p",
        pod["metadata"]["uid"],
        True,
    )
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": f"{namespace}-gpu", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    assert len(k.allocated_devices(claim)) == 2
    assert k.reserved_uids(claim) == {pod["metadata"]["uid"]}
    assert recorded["requestMappings"] == [
        {"containerName": "main", "resourceName": gpu, "requestName": "container-0-request-0"}
    ]

    def advertised() -> object:
        obj = k.get(kube, "node", node)
        status = (obj or {}).get("status") or {}
        return (
            (status.get("capacity") or {}).get(gpu),
            (status.get("allocatable") or {}).get(gpu),
            (status.get("allocatable") or {}).get(f"deviceclass.resource.draco.dev/{namespace}-gpu"),
            (status.get("allocatable") or {}).get(f"deviceclass.resource.kubernetes.io/{namespace}-gpu"),
        ) == ("3", "3", "3", "3")

    wait_for(advertised, timeout=60, what="the node advertises the class's 3 devices")
    # A kubelet that re-registers zeroes extended resources it does not manage: advertised again.
    zero = json.dumps({"status": {"capacity": {gpu: "0"}, "allocatable": {gpu: "0"}}})
    kube.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", zero)
    wait_for(advertised, timeout=60, what="the node advertises the devices again after a reset")

    # The pod succeeds: its special claim is deallocated and deleted.
    ls.bind(kube, "p", node, namespace=namespace)
    ls.set_phase(kube, "p", "Succeeded", namespace=namespace)
    wait_for(
        lambda: k.get(kube, k.CLAIMS, recorded["resourceClaimName"], namespace=namespace) is None,
        timeout=60,
        what="the special claim deleted",
    )


def test_upstreams_implicit_name_is_served_like_dracos(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    """dra-example-driver's extended-resource pod asks for `deviceclass.resource.kubernetes.io/
    <class>` (upstream's implicit name): the same special claim, allocation and pin."""
    node = cluster(kube, namespace, devices=2)
    upstream = f"deviceclass.resource.kubernetes.io/{namespace}-gpu"
    k.create(kube, [gated_pod(namespace, "p", [container("ctr0", {upstream: "1"})])])
    start_operator(draco_process, namespace)

    pod = wait_for(lambda: settled(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    assert k.pinned_node(pod) == node
    recorded = record(pod)
    assert recorded["requestMappings"] == [
        {"containerName": "ctr0", "resourceName": upstream, "requestName": "container-0-request-0"}
    ]
    claim = k.get(kube, k.CLAIMS, recorded["resourceClaimName"], namespace=namespace)
    assert claim is not None
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": f"{namespace}-gpu", "allocationMode": "ExactCount", "count": 1},
        }
    ]
    assert len(k.allocated_devices(claim)) == 1
    assert k.reserved_uids(claim) == {pod["metadata"]["uid"]}
    # kube-scheduler's resource fit finds the name on the node, as for draco's names.
    wait_for(
        lambda: (
            ((k.get(kube, "node", node) or {}).get("status") or {}).get("allocatable", {}).get(upstream)
            == "2"
        ),
        timeout=60,
        what="the node advertises upstream's implicit name",
    )


def test_init_and_two_containers_get_upstreams_requests_and_mappings(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    cluster(kube, namespace, devices=4)
    gpu = resource_of(namespace)
    pod_obj = gated_pod(
        namespace,
        "p",
        [container("a", {gpu: "1"}), container("b", {gpu: "1", "cpu": "1"})],
        init=[container("init", {gpu: "3"})],
    )
    k.create(kube, [pod_obj])
    start_operator(draco_process, namespace)

    pod = wait_for(lambda: settled(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    recorded = record(pod)
    claim = k.get(kube, k.CLAIMS, recorded["resourceClaimName"], namespace=namespace)
    assert claim is not None
    requests = {r["name"]: r["exactly"]["count"] for r in claim["spec"]["devices"]["requests"]}
    assert requests == {"container-0-request-0": 1, "container-1-request-0": 1, "container-2-request-1": 1}
    assert len(k.allocated_devices(claim)) == 3
    mappings = {(m["containerName"], m["requestName"]) for m in recorded["requestMappings"]}
    assert mappings == {
        ("a", "container-1-request-0"),
        ("b", "container-2-request-1"),
        ("init", "container-0-request-0"),
        ("init", "container-1-request-0"),
        ("init", "container-2-request-1"),
    }


def test_a_resource_no_class_maps_is_left_to_the_scheduler(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    cluster(kube, namespace, devices=1)
    k.create(kube, [gated_pod(namespace, "p", [container("main", {"unmapped.example.com/thing": "1"})])])
    start_operator(draco_process, namespace)

    pod = wait_for(lambda: settled(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    assert k.pinned_node(pod) is None
    assert EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION not in (pod["metadata"].get("annotations") or {})
    assert k.items(kube, k.CLAIMS, namespace=namespace) == []


def test_a_tainted_device_evicts_the_pod_holding_it_through_an_extended_resource(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    node = cluster(kube, namespace, devices=1)
    k.create(kube, [gated_pod(namespace, "p", [container("main", {resource_of(namespace): "1"})])])
    start_operator(draco_process, namespace)

    pod = wait_for(lambda: settled(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    ls.bind(kube, "p", node, namespace=namespace)
    set_taints(kube, namespace, node, {"gpu-0": [taint("NoExecute")]})
    wait_for(lambda: evicted(kube, namespace, "p"), timeout=60, what="pod evicted")


def test_a_pod_that_escaped_draco_holds_node_capacity_and_is_told_so(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    """A pod asking for the mapped name without draco's gate (the webhook did not see it)
    is placed by kube-scheduler like a device-plugin pod: it holds the node's advertised
    capacity without a device. It gets a Warning saying so, and draco counts it: a served
    pod is not pinned to that node while it is there, as kube-scheduler would refuse it."""
    node = cluster(kube, namespace, devices=1)
    gpu = resource_of(namespace)
    start_operator(draco_process, namespace)
    wait_for(
        lambda: (
            ((k.get(kube, "node", node) or {}).get("status") or {}).get("allocatable", {}).get(gpu) == "1"
        ),
        timeout=60,
        what="the node advertising the mapped name",
    )
    escaped = gated_pod(namespace, "escaped", [container("main", {gpu: "1"})])
    escaped["spec"].pop("schedulingGates")
    escaped["spec"]["nodeName"] = node  # where kube-scheduler would have put it
    k.create(kube, [escaped])
    notes = wait_for(
        lambda: k.event_notes(kube, namespace, "escaped", "ExtendedResourceWithoutDevice"),
        timeout=60,
        what="the Warning on the escaped pod",
    )
    assert isinstance(notes, list) and gpu in notes[0] and "no device" in notes[0]

    k.create(kube, [gated_pod(namespace, "served", [container("main", {gpu: "1"})])])
    refused = wait_for(
        lambda: [
            n
            for n in k.event_notes(kube, namespace, "served", "FailedScheduling")
            if f"Insufficient {gpu}" in n
        ],
        timeout=60,
        what="the served pod waiting for capacity the escaped one holds",
    )
    assert refused
    assert k.is_gated(k.get(kube, "pod", "served", namespace=namespace) or {})
    kube.kubectl("delete", "pod", "escaped", "-n", namespace, "--grace-period=0", "--force")
    pod = wait_for(lambda: settled(kube, namespace, "served"), timeout=60, what="served pod un-gated")
    assert isinstance(pod, dict) and k.pinned_node(pod) == node


def test_a_special_claim_made_for_classes_deleted_since_is_made_again(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    """DeviceClasses mapping the pod's resource come and go while it waits: its special
    claim, made for the class of the moment, is replaced (as upstream's PostFilter deletes
    a stale one) and the pod is placed with the class that maps it last. It once stayed
    gated for good, asking for a class that no longer existed. Classes a and b select the
    devices of a node the pod does not tolerate; the newest class that declares a name
    wins it."""
    free, held = f"{namespace}-n0", f"{namespace}-held"
    k.add_nodes(kube, [k.node(free)])
    k.add_nodes(
        kube, [{**k.node(held), "spec": {"taints": [{"key": "example.com/held", "effect": "NoSchedule"}]}}]
    )
    held_slice = k.node_slice(namespace, held, 2)
    held_slice["spec"]["driver"] = f"held.{k.driver_of(namespace)}"
    k.apply(kube, [k.node_slice(namespace, free, 2), held_slice])
    gpu = resource_of(namespace)

    def mapping(suffix: str, driver: str) -> k.Obj:
        device_class = k.device_class(namespace, name=f"{namespace}-{suffix}")
        device_class["spec"]["extendedResourceName"] = gpu
        device_class["spec"]["selectors"] = [{"cel": {"expression": f'device.driver == "{driver}"'}}]
        return device_class

    def special_claim_class() -> str | None:
        pod = k.get(kube, "pod", "p", namespace=namespace)
        annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION)
        if not raw:
            return None
        claim = k.get(kube, k.CLAIMS, json.loads(raw)["resourceClaimName"], namespace=namespace)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return None
        return str(claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"])

    operator = start_operator(draco_process, namespace)
    k.apply(kube, [mapping("a", f"held.{k.driver_of(namespace)}")])
    wait_for(
        lambda: gpu in ((k.get(kube, "node", held) or {}).get("status") or {}).get("capacity", {}),
        timeout=60,
        what="the held node advertising the resource (class a known to the operator)",
    )
    k.create(kube, [gated_pod(namespace, "p", [container("main", {gpu: "1"})])])
    wait_for(lambda: special_claim_class() == f"{namespace}-a", timeout=60, what="a claim for class a")
    k.apply(kube, [mapping("b", f"held.{k.driver_of(namespace)}")])
    wait_for(lambda: special_claim_class() == f"{namespace}-b", timeout=60, what="a claim for class b")
    kube.kubectl("delete", k.CLASSES, f"{namespace}-a")
    k.apply(kube, [mapping("c", k.driver_of(namespace))])

    pod = wait_for(
        lambda: settled(kube, namespace, "p"),
        timeout=90,
        what="pod placed with class c",
        explain=operator.logs,
    )
    assert isinstance(pod, dict)
    assert special_claim_class() == f"{namespace}-c"
    assert k.pinned_node(pod) == free
    replaced = k.event_notes(kube, namespace, "p", "ExtendedResourceClaimReplaced")
    assert len(replaced) == 2, replaced
    kube.kubectl("delete", k.CLASSES, f"{namespace}-b")
    # The stale claims go (their finalizer comes off: nothing was allocated on them).
    wait_for(
        lambda: len(k.items(kube, k.CLAIMS, namespace=namespace)) == 1,
        timeout=60,
        what="only the claim in use left",
    )
