"""Typed views of the core kinds the operator reads as JSON: Pods and Nodes (see
`draco.api.bodies` for why views, not models; the same rules hold: wire form, every field
optional, only what draco reads or writes).
"""

from __future__ import annotations

from typing import TypedDict

from draco.api.bodies import NodeSelectorBody, NodeSelectorTermBody, ObjectMetaBody, TaintBody, TolerationBody

__all__ = [
    "AffinityBody",
    "ContainerBody",
    "ContainerImageBody",
    "NodeAffinityBody",
    "NodeBody",
    "NodeSpecBody",
    "NodeStatusBody",
    "PodBody",
    "PodConditionBody",
    "PodResourceClaimBody",
    "PodSchedulingGateBody",
    "PodSpecBody",
    "PodStatusBody",
    "PreferredSchedulingTermBody",
    "ResourceRequirementsBody",
]


# --- Pod -------------------------------------------------------------------------------------------


class ResourceRequirementsBody(TypedDict, total=False):
    requests: dict[str, str]
    limits: dict[str, str]


class ContainerBody(TypedDict, total=False):
    name: str
    image: str
    #: ``Always`` on an init container: a sidecar.
    restartPolicy: str
    resources: ResourceRequirementsBody


class PodSchedulingGateBody(TypedDict, total=False):
    name: str


class PodResourceClaimBody(TypedDict, total=False):
    """An entry of ``spec.resourceClaims`` (draco's claims annotation has the same fields)."""

    name: str
    resourceClaimName: str
    resourceClaimTemplateName: str


class PreferredSchedulingTermBody(TypedDict, total=False):
    weight: int
    preference: NodeSelectorTermBody


class NodeAffinityBody(TypedDict, total=False):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelectorBody
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredSchedulingTermBody]


class AffinityBody(TypedDict, total=False):
    nodeAffinity: NodeAffinityBody


class PodSpecBody(TypedDict, total=False):
    nodeName: str
    nodeSelector: dict[str, str]
    affinity: AffinityBody
    tolerations: list[TolerationBody]
    schedulingGates: list[PodSchedulingGateBody]
    resourceClaims: list[PodResourceClaimBody]
    initContainers: list[ContainerBody]
    containers: list[ContainerBody]
    overhead: dict[str, str]
    priority: int
    preemptionPolicy: str
    schedulerName: str


class PodConditionBody(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class PodStatusBody(TypedDict, total=False):
    phase: str
    conditions: list[PodConditionBody]
    startTime: str
    nominatedNodeName: str


class PodBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMetaBody
    spec: PodSpecBody
    status: PodStatusBody


# --- Node ------------------------------------------------------------------------------------------


class NodeSpecBody(TypedDict, total=False):
    taints: list[TaintBody]
    unschedulable: bool


class ContainerImageBody(TypedDict, total=False):
    names: list[str]
    sizeBytes: int


class NodeStatusBody(TypedDict, total=False):
    """What the operator's cache keeps of a Node's status (see ``operator.informers``)."""

    allocatable: dict[str, str]
    capacity: dict[str, str]
    images: list[ContainerImageBody]


class NodeBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMetaBody
    spec: NodeSpecBody
    status: NodeStatusBody
