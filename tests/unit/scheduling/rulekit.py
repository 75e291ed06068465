"""Builders for the placement rules' tests: pods, nodes and a cluster in their JSON shapes,
read through the same parsers the operator uses (`pod_info`, `node_info_from_dict`), and a way to run one rule's PreFilter and Filter over nodes."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from draco.scheduling import framework
from draco.scheduling.cluster import Snapshot
from draco.scheduling.nodefit import NodeInfo, node_info_from_dict
from draco.scheduling.podinfo import PodInfo, pod_info

Obj = dict[str, Any]

_uids = itertools.count(1)


def container(
    name: str = "c",
    *,
    requests: Mapping[str, str] | None = None,
    ports: Sequence[str] = (),
    image: str = "registry.example/app:1",
    sidecar: bool = False,
) -> Obj:
    """A container; ``ports`` as ``PROTOCOL/hostIP/hostPort`` (upstream's tests' notation)."""
    body: Obj = {"name": name, "image": image, "resources": {"requests": dict(requests or {})}}
    if ports:
        body["ports"] = [
            {"containerPort": int(port), "hostPort": int(port), "protocol": protocol, "hostIP": ip}
            for protocol, ip, port in (p.split("/") for p in ports)
        ]
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


def pod(
    name: str = "pod",
    *,
    namespace: str = "default",
    containers: Sequence[Obj] = (),
    init: Sequence[Obj] = (),
    volumes: Sequence[Obj] = (),
    uid: str | None = None,
    **spec: Any,
) -> Obj:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{next(_uids)}"},
        "spec": {
            "containers": list(containers),
            "initContainers": list(init),
            "volumes": list(volumes),
            **spec,
        },
    }


def requests_pod(*requests: Mapping[str, str], init: Sequence[Mapping[str, str]] = (), **spec: Any) -> Obj:
    """A pod with one container per ``requests`` (and init containers), like upstream's
    ``newResourcePod``/``newResourceInitPod``."""
    return pod(
        containers=[container(f"c{i}", requests=r) for i, r in enumerate(requests)],
        init=[container(f"i{i}", requests=r) for i, r in enumerate(init)],
        **spec,
    )


def node(
    name: str = "node",
    *,
    allocatable: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Obj] = (),
    images: Sequence[Obj] = (),
) -> NodeInfo:
    body: Obj = {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": dict(allocatable or {}), "images": list(images)},
    }
    return node_info_from_dict(body)  # type: ignore[arg-type]


def placed(body: Obj, node_name: str) -> PodInfo:
    return pod_info(body, node=node_name)


def info(body: Obj) -> PodInfo:
    return pod_info(body)


def cluster(nodes: Iterable[NodeInfo] = (), pods: Iterable[PodInfo] = (), **objects: Any) -> Snapshot:
    return Snapshot(nodes={n.name: n for n in nodes}, pods=list(pods), **objects)


def run_filter(
    rule: framework.FilterRule, body: Obj, snapshot: Snapshot, nodes: Sequence[NodeInfo] | None = None
) -> framework.Refusal | list[str | None] | None:
    """The rule's PreFilter for ``body``: None when skipped, the refusal, else Filter's
    answer for each node (all of the snapshot's when ``nodes`` is None)."""
    prepared = rule(info(body), snapshot)
    if prepared is None or isinstance(prepared, framework.Refusal):
        return prepared
    return [prepared.unfit(n) for n in (nodes if nodes is not None else list(snapshot.nodes.values()))]


def run_score(
    rule: framework.ScoreRule, body: Obj, snapshot: Snapshot, nodes: Sequence[NodeInfo] | None = None
) -> list[int] | None:
    """The rule's normalised scores for ``body`` on ``nodes``; None when it skips."""
    scored = list(nodes if nodes is not None else snapshot.nodes.values())
    prepared = rule(info(body), snapshot, scored)
    return None if prepared is None else list(prepared)


# --- storage objects ---------------------------------------------------------------------


def claim_volume(claim: str, name: str | None = None) -> Obj:
    return {"name": name or claim, "persistentVolumeClaim": {"claimName": claim}}


def ephemeral_volume(name: str) -> Obj:
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}


def pvc(
    name: str,
    *,
    namespace: str = "default",
    class_name: str | None = None,
    volume: str = "",
    bound: bool = True,
    request: str | None = None,
    access: Sequence[str] = (),
    phase: str | None = None,
    selected_node: str | None = None,
    owner: str | None = None,
    **spec: Any,
) -> Obj:
    """A claim; ``volume`` given and ``bound``: bound (``bind-completed``)."""
    annotations: dict[str, str] = {}
    if volume and bound:
        annotations["pv.kubernetes.io/bind-completed"] = "yes"
    if selected_node is not None:
        annotations["volume.kubernetes.io/selected-node"] = selected_node
    metadata: Obj = {"name": name, "namespace": namespace, "annotations": annotations, "uid": f"claim-{name}"}
    if owner is not None:
        metadata["ownerReferences"] = [{"kind": "Pod", "name": "x", "uid": owner, "controller": True}]
    body: Obj = {"metadata": metadata, "spec": {"accessModes": list(access), **spec}, "status": {}}
    if class_name is not None:
        body["spec"]["storageClassName"] = class_name
    if volume:
        body["spec"]["volumeName"] = volume
    if request is not None:
        body["spec"]["resources"] = {"requests": {"storage": request}}
    if phase is not None:
        body["status"]["phase"] = phase
    return body


def pv(
    name: str,
    *,
    class_name: str = "",
    capacity: str | None = None,
    phase: str = "Available",
    hosts: Sequence[str] = (),
    affinity: Obj | None = None,
    labels: Mapping[str, str] | None = None,
    claim: str | None = None,
    csi: tuple[str, str] | None = None,
    access: Sequence[str] = (),
    **spec: Any,
) -> Obj:
    """A PersistentVolume; ``hosts``: node affinity on ``kubernetes.io/hostname``;
    ``claim``: ``namespace/name`` of its ``claimRef``."""
    body: Obj = {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"storageClassName": class_name, "accessModes": list(access), **spec},
        "status": {"phase": phase},
    }
    if capacity is not None:
        body["spec"]["capacity"] = {"storage": capacity}
    if hosts:
        affinity = {"kubernetes.io/hostname": list(hosts)}
    if affinity is not None:
        expressions = [{"key": k, "operator": "In", "values": v} for k, v in affinity.items()]
        body["spec"]["nodeAffinity"] = {
            "required": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        }
    if claim is not None:
        namespace, claim_name = claim.split("/")
        body["spec"]["claimRef"] = {"namespace": namespace, "name": claim_name}
    if csi is not None:
        body["spec"]["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    return body


def storage_class(
    name: str,
    mode: str | None = "WaitForFirstConsumer",
    *,
    provisioner: str = "kubernetes.io/no-provisioner",
    allowed: Mapping[str, Sequence[str]] | None = None,
) -> Obj:
    body: Obj = {"metadata": {"name": name}, "provisioner": provisioner}
    if mode is not None:
        body["volumeBindingMode"] = mode
    if allowed is not None:
        body["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": k, "values": list(v)} for k, v in allowed.items()]}
        ]
    return body


def csi_node(name: str, **drivers: int | None) -> Obj:
    """A CSINode; ``drivers``: name (``_`` for ``.``) -> allocatable count (None: unset)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "drivers": [
                {
                    "name": d.replace("_", "."),
                    "nodeID": name,
                    **({} if n is None else {"allocatable": {"count": n}}),
                }
                for d, n in drivers.items()
            ]
        },
    }


def csi_driver(name: str, *, storage_capacity: bool = False, prevent_if_missing: bool = False) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {"storageCapacity": storage_capacity, "preventPodSchedulingIfMissing": prevent_if_missing},
    }


def storage_capacity(
    class_name: str, labels: Mapping[str, str], capacity: str | None, maximum: str | None = None
) -> Obj:
    body: Obj = {
        "metadata": {"name": f"cap-{next(_uids)}", "namespace": "kube-system"},
        "storageClassName": class_name,
        "nodeTopology": {"matchLabels": dict(labels)},
    }
    if capacity is not None:
        body["capacity"] = capacity
    if maximum is not None:
        body["maximumVolumeSize"] = maximum
    return body


def keyed(*objects: Obj) -> dict[str, Obj]:
    """Objects by ``namespace/name`` (claims) or ``name``."""
    out = {}
    for obj in objects:
        metadata = obj["metadata"]
        key = f"{metadata['namespace']}/{metadata['name']}" if "namespace" in metadata else metadata["name"]
        out[key] = obj
    return out
