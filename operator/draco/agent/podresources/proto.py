"""The messages of the kubelet's PodResources API v1 (package ``v1``, service
``v1.PodResourcesLister``), with the names and field numbers of the kubelet's
``pkg/apis/podresources/v1/api.proto``, and draco's devices turned into them.

Every field of the API is declared (``ClaimResource.share_id`` as the proto3 ``optional``
it is), so a kubelet's answer passes through unchanged.

What draco adds to a container, for each claim given to it (`draco.agent.attribution`):

- a ``DynamicResource`` (``claim_name``, ``claim_namespace``) with one ``ClaimResource``
  per device: ``driver_name``, ``pool_name``, ``device_name``, ``share_id`` and its
  ``cdi_devices``, as the kubelet reports the devices of native claims;
- a ``ContainerDevices`` per extended resource name for the devices whose driver names
  one (NVIDIA's: ``nvidia.com/gpu`` with the GPU's UUID, ``nvidia.com/mig-<profile>``
  with the MIG device's), the entries a device plugin's devices get: dcgm-exporter
  labels a GPU's metrics with the pod, namespace and container of the entry naming that
  GPU's UUID. (Its DRA mapping, ``--kubernetes-enable-dra``, reads native ResourceSlices
  to find a UUID and so cannot see draco's devices; the device entries need nothing.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from google.protobuf import descriptor_pool

from draco.agent.attribution import ContainerDevices, PodDevices
from draco.agent.protoschema import Schema, message_classes

__all__ = ["PACKAGE", "SERVICE", "add_pod", "merge_allocatable", "message", "message_class", "pods_response"]

PACKAGE: Final = "v1"
SERVICE: Final = f"{PACKAGE}.PodResourcesLister"

_SCHEMA: Final[Schema] = {
    "AllocatableResourcesRequest": [],
    "AllocatableResourcesResponse": [
        ("devices", 1, "ContainerDevices", True),
        ("cpu_ids", 2, "int64", True),
        ("memory", 3, "ContainerMemory", True),
    ],
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, "PodResources", True)],
    "PodResources": [
        ("name", 1, "string", False),
        ("namespace", 2, "string", False),
        ("containers", 3, "ContainerResources", True),
        ("cpu_ids", 4, "int64", True),
        ("memory", 5, "ContainerMemory", True),
    ],
    "ContainerResources": [
        ("name", 1, "string", False),
        ("devices", 2, "ContainerDevices", True),
        ("cpu_ids", 3, "int64", True),
        ("memory", 4, "ContainerMemory", True),
        ("dynamic_resources", 5, "DynamicResource", True),
    ],
    "ContainerMemory": [
        ("memory_type", 1, "string", False),
        ("size", 2, "uint64", False),
        ("topology", 3, "TopologyInfo", False),
    ],
    "ContainerDevices": [
        ("resource_name", 1, "string", False),
        ("device_ids", 2, "string", True),
        ("topology", 3, "TopologyInfo", False),
    ],
    "TopologyInfo": [("nodes", 1, "NUMANode", True)],
    "NUMANode": [("ID", 1, "int64", False)],
    "DynamicResource": [
        ("claim_name", 2, "string", False),
        ("claim_namespace", 3, "string", False),
        ("claim_resources", 4, "ClaimResource", True),
    ],
    "ClaimResource": [
        ("cdi_devices", 1, "CDIDevice", True),
        ("driver_name", 2, "string", False),
        ("pool_name", 3, "string", False),
        ("device_name", 4, "string", False),
        ("share_id", 5, "optional string", False),
    ],
    "CDIDevice": [("name", 1, "string", False)],
    "GetPodResourcesRequest": [("pod_name", 1, "string", False), ("pod_namespace", 2, "string", False)],
    "GetPodResourcesResponse": [("pod_resources", 1, "PodResources", False)],
}

_CLASSES: Final = message_classes(
    descriptor_pool.DescriptorPool(), file="draco/podresources_v1.proto", package=PACKAGE, schema=_SCHEMA
)


def message(name: str, /, **fields: Any) -> Any:
    """A new message of the API: ``message("GetPodResourcesRequest", pod_name="x")``."""
    return _CLASSES[name](**fields)


def message_class(name: str) -> Any:
    return _CLASSES[name]


def _add_container(msg: Any, container: ContainerDevices) -> None:
    """Add draco's devices of `container` to its ``ContainerResources`` message."""
    plugin_ids: dict[str, list[str]] = {}
    for claim in container.claims:
        dynamic = msg.dynamic_resources.add(claim_name=claim.name, claim_namespace=claim.namespace)
        for device in claim.devices:
            resource = dynamic.claim_resources.add(
                driver_name=device.driver, pool_name=device.pool, device_name=device.device
            )
            if device.share_id:
                resource.share_id = device.share_id
            for cdi_id in device.cdi_device_ids:
                resource.cdi_devices.add(name=cdi_id)
            if device.plugin_id is not None:
                ids = plugin_ids.setdefault(device.plugin_id[0], [])
                if device.plugin_id[1] not in ids:
                    ids.append(device.plugin_id[1])
    for resource_name, ids in plugin_ids.items():
        msg.devices.add(resource_name=resource_name, device_ids=ids)


def add_pod(response_pods: Any, pod: PodDevices) -> None:
    """Add draco's devices of `pod` to a repeated ``PodResources`` field: into the entry
    the kubelet gave for the pod (container by container), or as a new entry."""
    entry = next((p for p in response_pods if p.name == pod.name and p.namespace == pod.namespace), None)
    if entry is None:
        entry = response_pods.add(name=pod.name, namespace=pod.namespace)
    for container in pod.containers:
        msg = next((c for c in entry.containers if c.name == container.name), None)
        if msg is None:
            msg = entry.containers.add(name=container.name)
        _add_container(msg, container)


def merge_allocatable(response: Any, devices: Iterable[tuple[str, str]]) -> None:
    """Add draco's devices (device-plugin names) to an ``AllocatableResourcesResponse``."""
    grouped: dict[str, list[str]] = {}
    for resource_name, device_id in devices:
        grouped.setdefault(resource_name, []).append(device_id)
    for resource_name, ids in grouped.items():
        response.devices.add(resource_name=resource_name, device_ids=ids)


def pods_response(pods: Sequence[PodDevices], kubelet: Any | None) -> Any:
    """A ``ListPodResourcesResponse``: the kubelet's (when given) with draco's devices."""
    response = message("ListPodResourcesResponse")
    if kubelet is not None:
        response.CopyFrom(kubelet)
    for pod in pods:
        add_pod(response.pod_resources, pod)
    return response
