"""The cluster ``draco simulate`` places pods in: a Snapshot of what the input lists.

kube-scheduler's rules (`draco.scheduling.profile`) read the cluster through
:class:`~draco.scheduling.cluster.ClusterState`; the operator answers from its watched
view, the simulator from a :class:`~draco.scheduling.cluster.Snapshot` built here:

- the nodes, from their Node objects (labels, taints, ``status.allocatable``, images). A
  node only slices name (a partial dump, slices written by hand) or only ``--node`` names
  takes part too, without labels or taints. A node without ``status.allocatable`` (one
  written by hand, or one of those) has room for :data:`UNREPORTED_PODS` pods and is not
  limited in cpu, memory or ephemeral storage; one that reports allocatable is held to it;
- on every node, the count of each extended resource a DeviceClass maps, as the operator
  advertises it (`draco.operator.scheduler.nodecapacity`): a dump of a cluster where the
  operator runs lists the same numbers, a node written by hand gets them here;
- the pods that occupy a node (bound by ``spec.nodeName``, or pinned by draco and no longer
  gated: `draco.scheduling.view.pinned_node`; not Succeeded or Failed), except those the
  simulation places itself: each of those counts once its unit is placed
  (:meth:`Snapshot.place`);
- namespaces' labels, the storage objects, and the selectors of Services, ReplicaSets,
  StatefulSets and ReplicationControllers (the default topology spread), as given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Final, cast

from draco.allocator.inventory import Inventory
from draco.api.bodies import ObjView, key_of
from draco.api.constants import IMPLICIT_EXTENDED_RESOURCE_PREFIXES
from draco.api.corebodies import NodeBody, PodBody
from draco.operator.scheduler.nodecapacity import desired_capacity
from draco.scheduling.cluster import Snapshot
from draco.scheduling.labels import LabelSelector, label_selector
from draco.scheduling.nodefit import NodeInfo, node_info_from_dict
from draco.scheduling.podinfo import PodInfo, PodInfoParser
from draco.scheduling.view import pinned_node
from draco.tools.simulation.inputs import Objects

__all__ = ["UNLIMITED", "UNREPORTED_PODS", "snapshot"]


#: The pods a node without ``status.allocatable`` has room for (the kubelet's default
#: ``--max-pods``).
UNREPORTED_PODS: Final = 110
#: What such a node has of cpu (millicores), memory and ephemeral storage: more than any
#: pod asks for.
UNLIMITED: Final = 1 << 62


def _unreported(name: str) -> NodeInfo:
    return NodeInfo(
        name=name,
        allocatable={
            "pods": UNREPORTED_PODS,
            "cpu": UNLIMITED,
            "memory": UNLIMITED,
            "ephemeral-storage": UNLIMITED,
        },
    )


def _nodes(objects: Objects, extra: Collection[str]) -> dict[str, NodeInfo]:
    """Every node (see the module docstring), by name."""
    names = {s.spec.node_name for s in objects.slices if s.spec.node_name}
    names.update(d.node_name for s in objects.slices for d in s.spec.devices or () if d.node_name)
    names.update(extra)
    nodes: dict[str, NodeInfo] = {name: _unreported(name) for name in names if name is not None}
    for name, body in objects.nodes.items():
        info = node_info_from_dict(cast(NodeBody, body))
        if "allocatable" not in (body.get("status") or {}):
            info = dataclasses.replace(info, allocatable=_unreported(name).allocatable)
        nodes[name] = info
    return nodes


def _advertised(
    nodes: dict[str, NodeInfo], inventory: Inventory, classes: Mapping[str, ObjView]
) -> dict[str, NodeInfo]:
    """``nodes`` with the extended resources the operator advertises on them: each mapped
    name with the count of the class's devices there; implicit names it would not
    advertise are gone (names a device plugin may advertise as well are left as listed)."""
    labels = {name: dict(info.labels) for name, info in nodes.items()}
    wanted = desired_capacity(inventory, {name: dict(body) for name, body in classes.items()}, labels)
    advertised = {}
    for name, info in nodes.items():
        allocatable = {
            resource: amount
            for resource, amount in info.allocatable.items()
            if not resource.startswith(IMPLICIT_EXTENDED_RESOURCE_PREFIXES)
        }
        allocatable.update(wanted.get(name, {}))
        advertised[name] = dataclasses.replace(info, allocatable=allocatable)
    return advertised


def _placed(pods: Collection[ObjView], skip: Collection[str]) -> list[PodInfo]:
    parser = PodInfoParser()
    placed = []
    for pod in pods:
        if key_of(pod) in skip:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = pinned_node(cast(PodBody, pod))
        if node is not None:
            placed.append(parser.parse(pod, node=node))
    return placed


def _workloads(
    objects: Objects,
) -> tuple[dict[str, list[Mapping[str, str]]], dict[str, LabelSelector]]:
    """Services' selectors per namespace; the compiled selectors of the controllers,
    keyed ``namespace/kind/name`` (as the operator's view keeps them)."""
    services: dict[str, list[Mapping[str, str]]] = {}
    controllers: dict[str, LabelSelector] = {}
    for kind, body in objects.workloads:
        metadata = body.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        selector = (body.get("spec") or {}).get("selector")
        if not selector:
            continue
        if kind == "Service":
            services.setdefault(namespace, []).append({str(k): str(v) for k, v in selector.items()})
        elif kind == "ReplicationController":  # a plain map, as a Service's
            controllers[f"{namespace}/{kind}/{metadata.get('name')}"] = label_selector(
                {"matchLabels": selector}
            )
        else:
            controllers[f"{namespace}/{kind}/{metadata.get('name')}"] = label_selector(selector)
    return services, controllers


def snapshot(
    objects: Objects, inventory: Inventory, *, simulated: Collection[str], extra_nodes: Collection[str] = ()
) -> Snapshot:
    """The cluster of ``objects`` (see the module docstring); ``simulated``: keys of the
    pods the simulation places itself; ``extra_nodes``: names that take part even without
    a Node or a slice (``--node``)."""
    nodes = _advertised(
        _nodes(objects, extra_nodes),
        inventory,
        {str(c.metadata.name): c.to_dict() for c in objects.classes},
    )
    services, controllers = _workloads(objects)
    storage = objects.storage
    return Snapshot(
        nodes=nodes,
        pods=_placed(objects.pods, simulated),
        namespaces=objects.namespaces,
        claims=storage["persistentvolumeclaims"],
        volumes=storage["persistentvolumes"],
        storage_classes=storage["storageclasses"],
        csi_nodes=storage["csinodes"],
        csi_drivers=storage["csidrivers"],
        services=services,
        controllers=controllers,
        storage_capacities=storage["csistoragecapacities"].values(),
        attachments=storage["volumeattachments"].values(),
    )
