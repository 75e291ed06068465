"""Objects and reads for the scheduling e2e tests: nodes, slices, classes, claims, gated pods.

The test cluster has no kubelet, scheduler or controller-manager: Nodes are created as
plain objects (labels, taints, allocatable), devices as ResourceSlices published directly,
and pods never run. Every test uses a driver and class named after its namespace, so
pods of one test can only be placed on the nodes of that test even though Nodes and
slices are cluster-scoped and shared by the whole session.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from draco.api.constants import API_VERSION, CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.controlplane import ControlPlane

Obj = dict[str, Any]

CLAIMS = "resourceclaims.resource.draco.dev"
SLICES = "resourceslices.resource.draco.dev"
CLASSES = "deviceclasses.resource.draco.dev"
TEMPLATES = "resourceclaimtemplates.resource.draco.dev"


def driver_of(namespace: str) -> str:
    return f"{namespace}.example.com"


def apply(kube: ControlPlane, objects: Iterable[Obj]) -> None:
    """Create or update `objects` in one kubectl call (server-side apply)."""
    items = list(objects)
    if items:
        body = {"apiVersion": "v1", "kind": "List", "items": items}
        kube.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(body), timeout=180
        )


def create(kube: ControlPlane, objects: Iterable[Obj]) -> None:
    items = list(objects)
    if items:
        body = {"apiVersion": "v1", "kind": "List", "items": items}
        kube.kubectl("create", "-f", "-", input=json.dumps(body), timeout=180)


def add_nodes(kube: ControlPlane, nodes: Iterable[Obj]) -> None:
    """Create Nodes as a kubelet would register them, ready for pods.

    The API server's admission taints every new Node ``node.kubernetes.io/not-ready``
    until the node lifecycle controller sees it Ready; there is no such controller
    here, so the taints are set to what the test asked for right after the create.
    """
    wanted = list(nodes)
    create(kube, wanted)
    for obj in wanted:
        taints = (obj.get("spec") or {}).get("taints") or []
        patch = json.dumps({"spec": {"taints": taints or None}})
        kube.kubectl("patch", "node", obj["metadata"]["name"], "--type=merge", "-p", patch)


def node(name: str, *, labels: dict[str, str] | None = None, cpu: str = "64", memory: str = "256Gi") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}, "capacity": {"cpu": cpu}},
    }


def device_class(namespace: str, *, name: str | None = None) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name or f"{namespace}-gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver_of(namespace)}"'}}]},
    }


def node_slice(namespace: str, node_name: str, devices: int, *, device_extra: Obj | None = None) -> Obj:
    """One slice publishing `devices` devices local to `node_name` (pool = node)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver_of(namespace)}"},
        "spec": {
            "driver": driver_of(namespace),
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node_name,
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"index": {"int": i}},
                    **(device_extra or {}),
                }
                for i in range(devices)
            ],
        },
    }


def claim_spec(namespace: str, *, count: int = 1, class_name: str | None = None) -> Obj:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {"deviceClassName": class_name or f"{namespace}-gpu", "count": count},
                }
            ]
        }
    }


def claim(namespace: str, name: str, *, count: int = 1) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(namespace, count=count),
    }


def template(namespace: str, name: str, *, count: int = 1) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_spec(namespace, count=count)},
    }


def pod(
    namespace: str,
    name: str,
    claims: Sequence[Obj],
    *,
    cpu: str | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A pod gated by draco that names `claims` (entries of the claims annotation)."""
    container: Obj = {"name": "main", "image": "registry.invalid/none"}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": {CLAIMS_ANNOTATION: json.dumps(list(claims))},
        },
        "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}], "containers": [container]},
    }


def get(kube: ControlPlane, kind: str, name: str, *, namespace: str | None = None) -> Obj | None:
    args = ["get", kind, name, "-o", "json"]
    if namespace:
        args += ["-n", namespace]
    result = kube.kubectl(*args, check=False)
    if result.returncode != 0:
        if "NotFound" in result.stderr:
            return None
        raise AssertionError(result.stderr)
    value: Obj = json.loads(result.stdout)
    return value


def items(kube: ControlPlane, kind: str, *, namespace: str | None = None) -> list[Obj]:
    args = ["get", kind, "-o", "json"]
    args += ["-n", namespace] if namespace else ["-A"]
    listed: list[Obj] = json.loads(kube.kubectl(*args, timeout=120).stdout)["items"]
    return listed


def is_gated(pod_obj: Obj) -> bool:
    return any(
        g.get("name") == SCHEDULING_GATE for g in (pod_obj.get("spec") or {}).get("schedulingGates") or []
    )


def pinned_node(pod_obj: Obj) -> str | None:
    """The node draco pinned the pod to (the matchFields metadata.name requirement)."""
    affinity = ((pod_obj.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    names = {
        value
        for term in terms
        for field in term.get("matchFields") or []
        if field.get("key") == "metadata.name"
        for value in field.get("values") or []
    }
    return names.pop() if len(names) == 1 else None


def generated_claims(pod_obj: Obj) -> dict[str, str | None]:
    raw = ((pod_obj.get("metadata") or {}).get("annotations") or {}).get(CLAIM_STATUSES_ANNOTATION)
    data: dict[str, str | None] = json.loads(raw) if raw else {}
    return data


def events(kube: ControlPlane, namespace: str, *, regarding: str | None = None) -> list[Obj]:
    listed = items(kube, "events.v1.events.k8s.io", namespace=namespace)
    return [e for e in listed if regarding is None or (e.get("regarding") or {}).get("name") == regarding]


def event_notes(kube: ControlPlane, namespace: str, name: str, reason: str) -> list[str]:
    return [
        str(e.get("note", "")) for e in events(kube, namespace, regarding=name) if e.get("reason") == reason
    ]


def allocated_devices(claim_obj: Obj) -> list[tuple[str, str, str]]:
    allocation = (claim_obj.get("status") or {}).get("allocation") or {}
    return [
        (r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or []
    ]


def reserved_uids(claim_obj: Obj) -> set[str]:
    return {r["uid"] for r in (claim_obj.get("status") or {}).get("reservedFor") or []}


def allocation_node(claim_obj: Obj) -> str | None:
    """The node a node-local allocation is pinned to (its nodeSelector's metadata.name)."""
    selector = ((claim_obj.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and len(field.get("values") or []) == 1:
                return str(field["values"][0])
    return None
