"""Typed views of the JSON bodies the processes read without parsing them into the
models: the ResourceClaims and ResourceClaimTemplates the operator's informers keep, and
the parts every kind shares (``metadata``, owner references, node selectors, taints and
tolerations). The core kinds (Pod, Node) are in `draco.api.corebodies`.

The operator reads thousands of pods and claims as the API sends them (plain JSON, kept
by its informers): validating each into the pydantic models (`draco.api.meta`) would cost
more than the rest of its work. These TypedDicts give the type checker the field names
and types at that boundary instead, at no cost at run time: a body is cast, never copied
or checked, so a misspelt field or a wrong type is a type error, not a silent ``None``.

They describe the wire form (camelCase), every field optional (``total=False``: a body
built by hand, or cut down by an informer, may lack any of them), and only the fields
draco reads or writes; the rest of a body is still there at run time, unseen by the type
checker. :func:`meta_of` is ``obj["metadata"]`` (or an empty one) as an
:class:`ObjectMetaBody`, for a body of any kind; :func:`key_of` its key, ``namespace/name``
(``name`` for a cluster-scoped object), the one form every process keys objects by (caches,
queues, logs); :data:`Obj` an untyped body, where no view above fits (:data:`ObjView` read-only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, TypeVar, cast

__all__ = [
    "AllocatedDeviceStatusBody",
    "AllocationResultBody",
    "Body",
    "ConditionBody",
    "DeviceAllocationResultBody",
    "DeviceClaimBody",
    "DeviceRequestAllocationResultBody",
    "DeviceRequestBody",
    "DeviceSelectorBody",
    "DeviceSubRequestBody",
    "DeviceTolerationBody",
    "ExactDeviceRequestBody",
    "NodeSelectorBody",
    "NodeSelectorRequirementBody",
    "NodeSelectorTermBody",
    "Obj",
    "ObjView",
    "ObjectMetaBody",
    "OwnerReferenceBody",
    "ReferenceBody",
    "ResourceClaimBody",
    "ResourceClaimSpecBody",
    "ResourceClaimStatusBody",
    "ResourceClaimTemplateBody",
    "ResourceClaimTemplateSpecBody",
    "TaintBody",
    "TolerationBody",
    "key_of",
    "meta_of",
    "object_key",
    "reserved_for",
]

#: A body of no kind in particular, as JSON gives it (the package's one name for it), and
#: the same read-only (what the caches hand out: `draco.kube.compact`).
Obj = dict[str, Any]
ObjView = Mapping[str, Any]

#: A body of some kind, typed (one of the views below) or not (``dict[str, Any]``): what
#: generic code over bodies (an informer's cache, a write's answer) is written against.
Body = TypeVar("Body", bound=Mapping[str, Any])


# --- shared ----------------------------------------------------------------------------------------


class OwnerReferenceBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMetaBody(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReferenceBody]
    finalizers: list[str]
    managedFields: list[dict[str, Any]]


class ConditionBody(TypedDict, total=False):
    """A ``metav1.Condition`` (a claim's device conditions)."""

    type: str
    status: str
    observedGeneration: int
    lastTransitionTime: str
    reason: str
    message: str


class NodeSelectorRequirementBody(TypedDict, total=False):
    key: str
    operator: str
    values: list[str]


class NodeSelectorTermBody(TypedDict, total=False):
    matchExpressions: list[NodeSelectorRequirementBody]
    matchFields: list[NodeSelectorRequirementBody]


class NodeSelectorBody(TypedDict, total=False):
    nodeSelectorTerms: list[NodeSelectorTermBody]


class TaintBody(TypedDict, total=False):
    """A Node's taint."""

    key: str
    value: str
    effect: str
    timeAdded: str


class TolerationBody(TypedDict, total=False):
    """A Pod's toleration."""

    key: str
    operator: str
    value: str
    effect: str
    tolerationSeconds: int


# --- ResourceClaim and ResourceClaimTemplate -------------------------------------------------------


class DeviceSelectorBody(TypedDict, total=False):
    cel: dict[str, str]


class DeviceTolerationBody(TypedDict, total=False):
    key: str
    operator: str
    value: str
    effect: str
    tolerationSeconds: int


class DeviceSubRequestBody(TypedDict, total=False):
    name: str
    deviceClassName: str
    selectors: list[DeviceSelectorBody]
    allocationMode: str
    count: int
    tolerations: list[DeviceTolerationBody]
    capacity: dict[str, Any]


class ExactDeviceRequestBody(TypedDict, total=False):
    deviceClassName: str
    selectors: list[DeviceSelectorBody]
    allocationMode: str
    count: int
    adminAccess: bool
    tolerations: list[DeviceTolerationBody]
    capacity: dict[str, Any]


class DeviceRequestBody(TypedDict, total=False):
    name: str
    exactly: ExactDeviceRequestBody
    firstAvailable: list[DeviceSubRequestBody]


class DeviceClaimBody(TypedDict, total=False):
    requests: list[DeviceRequestBody]
    constraints: list[dict[str, Any]]
    config: list[dict[str, Any]]


class ResourceClaimSpecBody(TypedDict, total=False):
    devices: DeviceClaimBody


class DeviceRequestAllocationResultBody(TypedDict, total=False):
    request: str
    driver: str
    pool: str
    device: str
    adminAccess: bool
    tolerations: list[DeviceTolerationBody]
    bindingConditions: list[str]
    bindingFailureConditions: list[str]
    shareID: str
    consumedCapacity: dict[str, str]


class DeviceAllocationResultBody(TypedDict, total=False):
    results: list[DeviceRequestAllocationResultBody]
    config: list[dict[str, Any]]


class AllocationResultBody(TypedDict, total=False):
    devices: DeviceAllocationResultBody
    nodeSelector: NodeSelectorBody
    allocationTimestamp: str


class ReferenceBody(TypedDict, total=False):
    """An entry of a claim's ``status.reservedFor`` (upstream's ResourceClaimConsumerReference)."""

    apiGroup: str
    resource: str
    name: str
    uid: str


class AllocatedDeviceStatusBody(TypedDict, total=False):
    driver: str
    pool: str
    device: str
    shareID: str
    conditions: list[ConditionBody]
    data: Any
    networkData: dict[str, Any]


class ResourceClaimStatusBody(TypedDict, total=False):
    allocation: AllocationResultBody
    reservedFor: list[ReferenceBody]
    devices: list[AllocatedDeviceStatusBody]
    #: draco's summary for the printer columns (``api.summarize_claim_status``).
    state: str
    allocatedDevices: str
    nodeName: str


class ResourceClaimBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMetaBody
    spec: ResourceClaimSpecBody
    status: ResourceClaimStatusBody


class ResourceClaimTemplateSpecBody(TypedDict, total=False):
    metadata: ObjectMetaBody
    spec: ResourceClaimSpecBody


class ResourceClaimTemplateBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMetaBody
    spec: ResourceClaimTemplateSpecBody


# --- reading ---------------------------------------------------------------------------------------


def meta_of(obj: Mapping[str, Any]) -> ObjectMetaBody:
    """The object's ``metadata`` (an empty one when it has none), typed."""
    return cast(ObjectMetaBody, obj.get("metadata") or {})


def object_key(namespace: str | None, name: str | None) -> str:
    """``namespace/name``; ``name`` alone for a cluster-scoped object (no namespace)."""
    return f"{namespace}/{name or ''}" if namespace else str(name or "")


def key_of(obj: Mapping[str, Any]) -> str:
    """The key of the object whose body this is (:func:`object_key`: ``namespace/name``, or
    ``name`` for a cluster-scoped one). A namespaced object is keyed by its namespace as
    written: whoever reads objects without one (`draco simulate`'s files) defaults it."""
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return object_key(meta.get("namespace"), meta.get("name"))


def reserved_for(claim: Mapping[str, Any]) -> list[ReferenceBody]:
    """The claim's ``status.reservedFor`` (empty when it has none), typed."""
    return cast(list[ReferenceBody], (claim.get("status") or {}).get("reservedFor") or [])
