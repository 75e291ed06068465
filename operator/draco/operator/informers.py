"""The operator's watches: one :class:`~draco.kube.informer.Informer` per kind it reads,
all over the process's one API client, started together before any controller.

Every kind goes through an informer, none through Kopf's watches; the informers feed the
controllers' Kopf event handlers (`draco.operator.feed`). What the controllers know of the
cluster (which devices exist, which nodes, which claims hold what) must end up equal to
the API's whatever happens while the operator starts or reconnects, and only the informer
reports as deleted what vanished between a LIST and its WATCH or across a re-list after a
410 (see `draco.kube.informer`). A slice or a node that a Kopf watch missed the deletion
of stayed in the allocation view until a restart, and its devices could be chosen.

:meth:`Informers.start` is the sync barrier: it returns once every kind has been listed
(each watch then goes on from its LIST's resourceVersion), so a controller started after
it sees a complete cluster from its first event. Controllers subscribe their handlers in
their ``start`` (the feed hands them the cache first, as Kopf's listing events, where
they ask for it).

The caches keep what the controllers read, not whole objects: pods, claims and slices
without ``managedFields`` (half of a claim's memory once two managers wrote it); Nodes
without their conditions and the rest of a status the operator never reads (a Node's
status is most of its size, and a cluster has thousands), keeping the images
(kube-scheduler's ImageLocality score; their names interned, shared across nodes). And they keep it
compact (`draco.kube.compact`): strings interned, and the parts that repeat from object
to object held once: a pod's spec fields (the containers and tolerations of its
template, the affinity of its node), a claim's spec and the node selector of its
allocation, a device's attribute values and capacities. That roughly halves a pod's and
a claim's memory; in return nobody may change a cached object below its top level and
its metadata without copying it.
A consumer gets the cached form of every added or changed object (and of a deletion
found by a re-list, or of a replay), so it must read only what the cache keeps.

The indexes the controllers look things up by (upstream's resourceclaim controller keeps
the same ones) are kept on the informers, with the cache, so no controller keeps a copy
of pods or claims of its own to find them:

- pods by the claims and templates they name (:data:`POD_REFERENCES`: a claim's or a
  template's change re-checks the pods that use it) and by UID (:data:`POD_UID`);
- claims by the pods that own them or are reserved in them (:data:`CLAIM_PODS`), and by
  the pod entry they were generated for (:data:`CLAIM_GENERATED`: how a pod finds the
  claim made for it before the claim-statuses annotation records it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, cast

from draco.api.bodies import (
    ObjectMetaBody,
    ResourceClaimBody,
    ResourceClaimTemplateBody,
    meta_of,
    reserved_for,
)
from draco.api.constants import (
    GROUP,
    KIND_POD_GROUP,
    KIND_RESOURCE_POOL_STATUS_REQUEST,
    PLURAL_POD_GROUPS,
    PLURAL_RESOURCE_POOL_STATUS_REQUESTS,
    POD_CLAIM_NAME_ANNOTATION,
    POOL_STATUS_VERSION,
    SCHEDULING_GROUP,
    SCHEDULING_VERSION,
)
from draco.api.corebodies import NodeBody, NodeStatusBody, PodBody
from draco.kube.client import (
    CSI_DRIVERS,
    CSI_NODES,
    CSI_STORAGE_CAPACITIES,
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    REPLICA_SETS,
    REPLICATION_CONTROLLERS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_QUOTAS,
    RESOURCE_SLICES,
    SERVICES,
    STATEFUL_SETS,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
    Obj,
    Resource,
)
from draco.kube.compact import Compactor
from draco.kube.informer import Body, Informer, Source
from draco.scheduling.groups import group_of
from draco.scheduling.podclaims import (
    PodClaimsError,
    claim_statuses,
    controller_group_uid,
    controller_pod_uid,
    parse_pod_claims,
)

__all__ = [
    "CLAIM_GENERATED",
    "CLAIM_GROUPS",
    "CLAIM_PODS",
    "POD_GROUP",
    "POD_GROUPS",
    "POD_REFERENCES",
    "POD_UID",
    "RESOURCE_POOL_STATUS_REQUESTS",
    "Informers",
    "claim_generated_for",
    "claim_groups",
    "claim_pods",
    "generated_for",
    "pod_group_key",
    "pod_references",
    "trim_claim",
    "trim_node",
    "trim_pod",
    "trim_slice",
    "without_managed_fields",
]

#: Pods by ``claim:<ns>/<name>`` and ``template:<ns>/<name>`` they name (their claims
#: annotation, and the claim names recorded in their claim-statuses annotation).
POD_REFERENCES: Final = "references"
#: Pods by UID.
POD_UID: Final = "uid"
#: Claims by the UIDs of the pod that controls them and of the pods in ``reservedFor``.
CLAIM_PODS: Final = "pods"
#: Generated claims by ``<pod UID>/<pod claim name>`` (see :func:`generated_for`), and a
#: PodGroup's by ``<group UID>/<group claim name>``.
CLAIM_GENERATED: Final = "generated"
#: draco's PodGroups (what the allocation reads of groups and writes their condition to).
POD_GROUPS: Final = Resource(SCHEDULING_GROUP, SCHEDULING_VERSION, PLURAL_POD_GROUPS, KIND_POD_GROUP, True)
RESOURCE_POOL_STATUS_REQUESTS: Final = Resource(
    GROUP, POOL_STATUS_VERSION, PLURAL_RESOURCE_POOL_STATUS_REQUESTS, KIND_RESOURCE_POOL_STATUS_REQUEST, False
)
#: Pods by the key of the group they belong to (`draco.scheduling.groups`).
POD_GROUP: Final = "group"
#: Claims by the UIDs of the PodGroup that controls them and of those in ``reservedFor``.
CLAIM_GROUPS: Final = "groups"

#: What a cached Node keeps of its status: what the fit checks and the capacity advertiser read.
#: Of a Node's status: what the resource fit reads, and the images (kube-scheduler's
#: ImageLocality score: a node that has a pod's images already is preferred).
_NODE_STATUS: Final = ("allocatable", "capacity", "images")


def without_managed_fields(obj: Body) -> Body:
    """``obj`` without ``metadata.managedFields`` (often most of a pod's size, read by
    nobody here). Everything else stays: a consumer that subscribes late, or gets a
    deletion found by a re-list, is handed the cached form."""
    meta = meta_of(obj)
    if "managedFields" not in meta:
        return obj
    return cast(Body, {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}})


def pod_references(pod: PodBody) -> list[str]:
    """What :data:`POD_REFERENCES` finds ``pod`` under (an unreadable annotation names
    nothing; the lifecycle says so in an Event when it syncs the pod)."""
    namespace = meta_of(pod).get("namespace", "")
    refs = [f"claim:{namespace}/{name}" for name in claim_statuses(pod).values() if name]
    try:
        entries = parse_pod_claims(pod)
    except PodClaimsError:
        entries = []
    for entry in entries:
        if entry.resource_claim_name is not None:
            refs.append(f"claim:{namespace}/{entry.resource_claim_name}")
        if entry.resource_claim_template_name is not None:
            refs.append(f"template:{namespace}/{entry.resource_claim_template_name}")
    return refs


def _pod_uid(pod: PodBody) -> list[str]:
    uid = meta_of(pod).get("uid")
    return [str(uid)] if uid else []


def claim_pods(claim: ResourceClaimBody) -> list[str]:
    """The UIDs :data:`CLAIM_PODS` finds ``claim`` under: its controlling pod's and those
    of the pods reserved in it."""
    uids = [owner] if (owner := controller_pod_uid(claim)) else []
    for ref in reserved_for(claim):
        if ref.get("resource") == "pods" and not ref.get("apiGroup") and ref.get("uid"):
            uids.append(str(ref["uid"]))
    return uids


def pod_group_key(pod: PodBody) -> list[str]:
    """What :data:`POD_GROUP` finds ``pod`` under: its group's key, if it is in one."""
    ref = group_of(pod)
    return [ref.key] if ref is not None else []


def claim_groups(claim: ResourceClaimBody) -> list[str]:
    """The UIDs :data:`CLAIM_GROUPS` finds ``claim`` under: its controlling PodGroup's and
    those of the PodGroups reserved in it."""
    uids = [owner] if (owner := controller_group_uid(claim)) else []
    for ref in reserved_for(claim):
        if (
            ref.get("resource") == POD_GROUPS.plural
            and ref.get("apiGroup") == POD_GROUPS.group
            and ref.get("uid")
        ):
            uids.append(str(ref["uid"]))
    return uids


def generated_for(pod_uid: str, pod_claim: str) -> str:
    """The :data:`CLAIM_GENERATED` value of the claims generated for a pod's entry."""
    return f"{pod_uid}/{pod_claim}"


def claim_generated_for(claim: ResourceClaimBody) -> list[str]:
    """What :data:`CLAIM_GENERATED` finds ``claim`` under: the pod entry it was generated
    for (none for a claim without a controlling pod or a pod claim name)."""
    owner = controller_pod_uid(claim) or controller_group_uid(claim)
    pod_claim = (meta_of(claim).get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
    return [generated_for(owner, str(pod_claim))] if owner and pod_claim else []


def trim_namespace(namespace: Obj) -> Obj:
    """A Namespace as the cache keeps it: its name, labels and deletion, nothing else."""
    meta = meta_of(namespace)
    kept = {
        k: meta[k] for k in ("name", "uid", "resourceVersion", "labels", "deletionTimestamp") if k in meta
    }
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": kept}


def trim_to_selector(obj: Obj) -> Obj:
    """A Service or workload controller as the cache keeps it: its name and ``spec.selector``."""
    meta = meta_of(obj)
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    selector = (obj.get("spec") or {}).get("selector")
    return {
        "kind": obj.get("kind"),
        "metadata": kept,
        "spec": {} if selector is None else {"selector": selector},
    }


def trim_node(node: NodeBody) -> NodeBody:
    """A Node as the cache keeps it: metadata without managedFields, the spec (taints,
    unschedulable), and of the status only allocatable, capacity and images."""
    meta = meta_of(node)
    status = node.get("status") or {}
    return {
        "apiVersion": node.get("apiVersion", "v1"),
        "kind": node.get("kind", "Node"),
        "metadata": cast(
            ObjectMetaBody, {k: v for k, v in meta.items() if k not in ("managedFields", "annotations")}
        ),
        "spec": node.get("spec") or {},
        "status": cast(NodeStatusBody, {k: status[k] for k in _NODE_STATUS if k in status}),
    }


def _metadata(compactor: Compactor, obj: Obj) -> Obj:
    return {k: compactor.intern(v) for k, v in meta_of(obj).items() if k != "managedFields"}


def trim_pod(body: Body, *, compactor: Compactor) -> Body:
    """A pod as the cache keeps it: without managedFields, compact, each spec field shared
    with the pods that have an equal one."""
    pod = cast(Obj, body)
    trimmed = {k: compactor.intern(v) for k, v in pod.items() if k not in ("metadata", "spec")}
    trimmed["metadata"] = _metadata(compactor, pod)
    if "spec" in pod:
        trimmed["spec"] = compactor.share_items(pod["spec"])
    return cast(Body, trimmed)


def trim_claim(body: Body, *, compactor: Compactor) -> Body:
    """A claim as the cache keeps it: without managedFields, compact, its spec and the node
    selector of its allocation shared with the claims that have an equal one."""
    claim = cast(Obj, body)
    trimmed = {k: compactor.intern(v) for k, v in claim.items() if k not in ("metadata", "spec")}
    trimmed["metadata"] = _metadata(compactor, claim)
    if "spec" in claim:
        trimmed["spec"] = compactor.share(claim["spec"])
    status = trimmed.get("status")
    allocation = status.get("allocation") if isinstance(status, dict) else None
    if isinstance(status, dict) and isinstance(allocation, dict) and "nodeSelector" in allocation:
        status["allocation"] = {**allocation, "nodeSelector": compactor.share(allocation["nodeSelector"])}
    return cast(Body, trimmed)


def trim_slice(slice_: Obj, *, compactor: Compactor) -> Obj:
    """A ResourceSlice as the cache keeps it: without managedFields, compact, each device's
    attribute values and capacities shared with the devices that have equal ones (a
    model, an index, a node's name: most of a device, repeated across the cluster)."""
    trimmed = {k: compactor.intern(v) for k, v in slice_.items() if k not in ("metadata", "spec")}
    trimmed["metadata"] = _metadata(compactor, slice_)
    spec = slice_.get("spec")
    if isinstance(spec, dict):
        trimmed["spec"] = {k: compactor.intern(v) for k, v in spec.items() if k != "devices"}
        if "devices" in spec:
            trimmed["spec"]["devices"] = [_device(compactor, d) for d in spec["devices"] or []]
    return trimmed


def _device(compactor: Compactor, device: Any) -> Any:
    if not isinstance(device, dict):
        return compactor.intern(device)
    return {
        k: compactor.share_items(v) if k in ("attributes", "capacity") else compactor.intern(v)
        for k, v in device.items()
    }


@dataclass(frozen=True)
class Informers:
    """One informer per kind the operator reads (every namespace: see `OperatorOptions`)."""

    pods: Informer[PodBody]
    claims: Informer[ResourceClaimBody]
    templates: Informer[ResourceClaimTemplateBody]
    classes: Informer[Obj]
    slices: Informer[Obj]
    taint_rules: Informer[Obj]
    nodes: Informer[NodeBody]
    #: What kube-scheduler's placement rules read besides nodes and pods: namespaces'
    #: labels (pod affinity's namespace selectors) and the storage objects of the volume
    #: rules (`draco.scheduling.framework`).
    namespaces: Informer[Obj]
    volume_claims: Informer[Obj]
    volumes: Informer[Obj]
    storage_classes: Informer[Obj]
    csi_nodes: Informer[Obj]
    csi_drivers: Informer[Obj]
    csi_storage_capacities: Informer[Obj]
    volume_attachments: Informer[Obj]
    #: The selectors of Services and of the controllers that kube-scheduler's default
    #: spreading groups pods by (kept as name and selector only).
    services: Informer[Obj]
    replication_controllers: Informer[Obj]
    replica_sets: Informer[Obj]
    stateful_sets: Informer[Obj]
    #: ResourceQuotas: device quota (`operator.resourcequota`, and pods waiting for quota).
    quotas: Informer[Obj]
    #: draco's PodGroups: groups of pods placed all or nothing, and their claims.
    pod_groups: Informer[Obj]
    #: ResourcePoolStatusRequests: what is free in a driver's pools, answered once.
    pool_status_requests: Informer[Obj]

    @classmethod
    def over(cls, source: Source) -> Informers:
        compactor = Compactor()
        informers = cls(
            pods=Informer[PodBody](source, PODS, trim=lambda pod: trim_pod(pod, compactor=compactor)),
            claims=Informer[ResourceClaimBody](
                source, RESOURCE_CLAIMS, trim=lambda claim: trim_claim(claim, compactor=compactor)
            ),
            templates=Informer[ResourceClaimTemplateBody](
                source, RESOURCE_CLAIM_TEMPLATES, trim=without_managed_fields
            ),
            classes=Informer[Obj](source, DEVICE_CLASSES),
            slices=Informer[Obj](
                source, RESOURCE_SLICES, trim=lambda slice_: trim_slice(slice_, compactor=compactor)
            ),
            taint_rules=Informer[Obj](source, DEVICE_TAINT_RULES),
            nodes=Informer[NodeBody](source, NODES, trim=lambda node: compactor.intern(trim_node(node))),
            namespaces=Informer[Obj](source, NAMESPACES, trim=trim_namespace),
            volume_claims=Informer[Obj](source, PERSISTENT_VOLUME_CLAIMS, trim=without_managed_fields),
            volumes=Informer[Obj](source, PERSISTENT_VOLUMES, trim=without_managed_fields),
            storage_classes=Informer[Obj](source, STORAGE_CLASSES, trim=without_managed_fields),
            csi_nodes=Informer[Obj](source, CSI_NODES, trim=without_managed_fields),
            csi_drivers=Informer[Obj](source, CSI_DRIVERS, trim=without_managed_fields),
            csi_storage_capacities=Informer[Obj](source, CSI_STORAGE_CAPACITIES, trim=without_managed_fields),
            volume_attachments=Informer[Obj](source, VOLUME_ATTACHMENTS, trim=without_managed_fields),
            services=Informer[Obj](source, SERVICES, trim=trim_to_selector),
            replication_controllers=Informer[Obj](source, REPLICATION_CONTROLLERS, trim=trim_to_selector),
            replica_sets=Informer[Obj](source, REPLICA_SETS, trim=trim_to_selector),
            stateful_sets=Informer[Obj](source, STATEFUL_SETS, trim=trim_to_selector),
            quotas=Informer[Obj](source, RESOURCE_QUOTAS, trim=without_managed_fields),
            pod_groups=Informer[Obj](source, POD_GROUPS, trim=without_managed_fields),
            pool_status_requests=Informer[Obj](
                source, RESOURCE_POOL_STATUS_REQUESTS, trim=without_managed_fields
            ),
        )
        informers.pods.add_index(POD_REFERENCES, pod_references)
        informers.pods.add_index(POD_UID, _pod_uid)
        informers.claims.add_index(CLAIM_PODS, claim_pods)
        informers.claims.add_index(CLAIM_GENERATED, claim_generated_for)
        informers.pods.add_index(POD_GROUP, pod_group_key)
        informers.claims.add_index(CLAIM_GROUPS, claim_groups)
        return informers

    def __iter__(self) -> Iterator[Informer[Any]]:
        yield from (
            self.namespaces,
            self.volume_claims,
            self.volumes,
            self.storage_classes,
            self.csi_nodes,
            self.csi_drivers,
            self.csi_storage_capacities,
            self.volume_attachments,
            self.services,
            self.replication_controllers,
            self.replica_sets,
            self.stateful_sets,
            self.classes,
            self.slices,
            self.taint_rules,
            self.nodes,
            self.quotas,
            self.pod_groups,
            self.pool_status_requests,
            self.templates,
            self.claims,
            self.pods,
        )

    async def start(self) -> None:
        """List every kind (concurrently), then watch each from its LIST: the sync barrier."""
        await asyncio.gather(*(informer.start() for informer in self))

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [task for informer in self for task in informer.tasks]

    async def stop(self) -> None:
        for informer in self:
            await informer.stop()
