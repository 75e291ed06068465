"""Allocation's reactions, as Kopf event handlers (fed by the operator's informers:
`draco.operator.feed`). They keep the allocation's `ClusterView` equal to the informers'
caches and put gated pods on the ``allocation`` queue (`memo.scheduling`:
:class:`~draco.operator.scheduler.controller.Scheduling`, its view and service):

- what placement reads besides pods and claims (namespaces, the storage kinds, the
  selectors of Services and workload controllers, DeviceClasses, ResourceSlices,
  DeviceTaintRules, Nodes): into the view; the view reports capacity changes, which wake
  the waiting pods they may help (`Scheduling.wake_waiting`);
- a claim: into the view; the pods waiting on it are told (`AllocationService.claim_changed`);
- a PodGroup: the group waiting for it looks again;
- a pod: its group (if any) counts its members again; into the view; a gated pod of a namespace served goes onto the queue, no sooner
  than its backoff allows; a pod kube-scheduler refused where it was pinned is watched
  (`Refusals`); pods that use the native claims or an unserved extended resource, or that
  kube-scheduler finds short of an extended resource a DeviceClass could serve, get an
  Event (in the background: handlers never await).

Every handler is synchronous, on the event loop (never in a thread: the view is only ever
touched from one thread).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, cast

import kopf

from draco.api.bodies import object_key
from draco.api.constants import (
    GROUP,
    PLURAL_DEVICE_CLASSES,
    PLURAL_DEVICE_TAINT_RULES,
    PLURAL_POD_GROUPS,
    PLURAL_RESOURCE_CLAIMS,
    PLURAL_RESOURCE_SLICES,
    SCHEDULING_GROUP,
    SCHEDULING_VERSION,
)
from draco.operator import feed
from draco.operator.informers import POD_GROUP, Informers
from draco.operator.options import serves_namespace
from draco.operator.scheduler.untranslated import is_untranslated
from draco.scheduling.requests import asks_for_extended_resources
from draco.scheduling.view import StorageKind

if TYPE_CHECKING:
    from draco.operator.scheduler.controller import Scheduling

__all__ = ["HANDLERS", "follow"]

#: Allocation's handlers (`AllocationController.start` subscribes them).
HANDLERS: Final = kopf.OperatorRegistry()


def _scheduling(memo: kopf.Memo) -> Scheduling:
    scheduling: Scheduling = memo.scheduling
    return scheduling


@kopf.on.event("v1", "namespaces", id="allocation/namespace", registry=HANDLERS)
def namespace_changed(type: str | None, name: str, body: Any, memo: kopf.Memo, **_: Any) -> None:
    view = _scheduling(memo).view
    if type == "DELETED":
        view.delete_namespace(name)
    else:
        view.upsert_namespace(body)


@kopf.on.event(
    "v1", "persistentvolumeclaims", id="allocation/pvc", param="persistentvolumeclaims", registry=HANDLERS
)
@kopf.on.event("v1", "persistentvolumes", id="allocation/pv", param="persistentvolumes", registry=HANDLERS)
@kopf.on.event(
    "storage.k8s.io",
    "v1",
    "storageclasses",
    id="allocation/storageclass",
    param="storageclasses",
    registry=HANDLERS,
)
@kopf.on.event(
    "storage.k8s.io", "v1", "csinodes", id="allocation/csinode", param="csinodes", registry=HANDLERS
)
@kopf.on.event(
    "storage.k8s.io", "v1", "csidrivers", id="allocation/csidriver", param="csidrivers", registry=HANDLERS
)
@kopf.on.event(
    "storage.k8s.io",
    "v1",
    "csistoragecapacities",
    id="allocation/csistoragecapacity",
    param="csistoragecapacities",
    registry=HANDLERS,
)
@kopf.on.event(
    "storage.k8s.io",
    "v1",
    "volumeattachments",
    id="allocation/volumeattachment",
    param="volumeattachments",
    registry=HANDLERS,
)
def storage_changed(
    type: str | None,
    name: str,
    namespace: str | None,
    body: Any,
    memo: kopf.Memo,
    param: Any = None,
    **_: Any,
) -> None:
    """What the volume rules read (namespaced kinds keyed ``ns/name``)."""
    view = _scheduling(memo).view
    if type == "DELETED":
        view.delete_storage(cast(StorageKind, param), object_key(namespace, name))
    else:
        view.upsert_storage(cast(StorageKind, param), object_key(namespace, name), body)


@kopf.on.event("v1", "services", id="allocation/service", param="Service", registry=HANDLERS)
@kopf.on.event(
    "v1",
    "replicationcontrollers",
    id="allocation/replicationcontroller",
    param="ReplicationController",
    registry=HANDLERS,
)
@kopf.on.event("apps", "v1", "replicasets", id="allocation/replicaset", param="ReplicaSet", registry=HANDLERS)
@kopf.on.event(
    "apps", "v1", "statefulsets", id="allocation/statefulset", param="StatefulSet", registry=HANDLERS
)
def workload_changed(
    type: str | None,
    name: str,
    namespace: str | None,
    body: Any,
    memo: kopf.Memo,
    param: Any = None,
    **_: Any,
) -> None:
    """What kube-scheduler's default spreading groups pods by."""
    view = _scheduling(memo).view
    if type == "DELETED":
        view.delete_workload(str(param), namespace or "", name)
    else:
        view.upsert_workload(str(param), body)


@kopf.on.event(GROUP, PLURAL_DEVICE_CLASSES, id="allocation/class", registry=HANDLERS)
def class_changed(type: str | None, name: str, body: Any, memo: kopf.Memo, **_: Any) -> None:
    scheduling = _scheduling(memo)
    scheduling.forget_class_map()
    if type == "DELETED":
        scheduling.view.delete_class(name)
    else:
        scheduling.view.upsert_class(body)


@kopf.on.event(GROUP, PLURAL_RESOURCE_SLICES, id="allocation/slice", registry=HANDLERS)
def slice_changed(type: str | None, name: str, body: Any, memo: kopf.Memo, **_: Any) -> None:
    view = _scheduling(memo).view
    if type == "DELETED":
        view.delete_slice(name)
    else:
        view.upsert_slice(body)


@kopf.on.event(GROUP, PLURAL_DEVICE_TAINT_RULES, id="allocation/taint-rule", registry=HANDLERS)
def taint_rule_changed(type: str | None, name: str, body: Any, memo: kopf.Memo, **_: Any) -> None:
    view = _scheduling(memo).view
    if type == "DELETED":
        view.delete_taint_rule(name)
    else:
        view.upsert_taint_rule(body)


@kopf.on.event("v1", "nodes", id="allocation/node", registry=HANDLERS)
def node_changed(type: str | None, name: str, body: Any, memo: kopf.Memo, **_: Any) -> None:
    scheduling = _scheduling(memo)
    if type == "DELETED":
        scheduling.view.delete_node(name)
        return
    scheduling.view.upsert_node(body)
    if scheduling.advertiser is not None:
        scheduling.advertiser.observe_node(body)


@kopf.on.event(GROUP, PLURAL_RESOURCE_CLAIMS, id="allocation/claim", registry=HANDLERS)
def claim_changed(
    type: str | None, name: str, namespace: str | None, body: Any, memo: kopf.Memo, **_: Any
) -> None:
    scheduling = _scheduling(memo)
    key = object_key(namespace, name)
    if type == "DELETED":
        scheduling.view.delete_claim(key)
        scheduling.service.forget_claim(key)
    else:
        scheduling.view.upsert_claim(body)
        scheduling.service.note_claim(type or "ADDED", body)
    scheduling.service.claim_changed(key)


@kopf.on.event(
    SCHEDULING_GROUP, SCHEDULING_VERSION, PLURAL_POD_GROUPS, id="allocation/pod-group", registry=HANDLERS
)
def pod_group_changed(body: Any, memo: kopf.Memo, **_: Any) -> None:
    _scheduling(memo).service.gangs.group_changed(body)


@kopf.on.event("v1", "pods", id="allocation/pod", registry=HANDLERS)
def pod_changed(
    type: str | None, name: str, namespace: str | None, body: Any, memo: kopf.Memo, **_: Any
) -> None:
    scheduling = _scheduling(memo)
    key = object_key(namespace, name)
    served = serves_namespace(namespace or "", scheduling.namespaces)
    if served:
        scheduling.service.gangs.note_member(body)  # its group (if any) counts its members again
    if type == "DELETED":
        scheduling.view.delete_pod(key)
        scheduling.service.forget(key)
        if scheduling.refusals is not None:
            scheduling.refusals.forget(key)
        return
    scheduling.view.upsert_pod(body)
    if scheduling.refusals is not None and served:
        scheduling.refusals.observe(body)
    if scheduling.view.synced:
        scheduling.consider_pod(body)
    if scheduling.untranslated is not None and served and is_untranslated(body):
        scheduling.in_background(scheduling.untranslated.warn(body))
    if (
        scheduling.unserved is not None
        and served
        and scheduling.view.synced
        and asks_for_extended_resources(body.get("spec") or {})
    ):
        scheduling.in_background(scheduling.unserved.warn(body, scheduling.class_map()))
    if scheduling.hints is not None and served and scheduling.hints.wants(body):
        scheduling.in_background(scheduling.hints.warn(body))


def follow(informers: Informers, memo: kopf.Memo) -> None:
    """Fill the view from the informers' caches (``type=None``), then follow every change
    (nothing is awaited in between): the inventory's inputs before claims and pods, which
    are judged against them; then the gated pods go onto the queue and capacity changes
    wake the waiting ones."""
    scheduling = _scheduling(memo)
    for informer in (
        informers.namespaces,
        informers.volume_claims,
        informers.volumes,
        informers.storage_classes,
        informers.csi_nodes,
        informers.csi_drivers,
        informers.csi_storage_capacities,
        informers.volume_attachments,
        informers.services,
        informers.replication_controllers,
        informers.replica_sets,
        informers.stateful_sets,
        informers.classes,
        informers.slices,
        informers.taint_rules,
        informers.nodes,
    ):
        feed.subscribe(informer, HANDLERS, memo=memo, listing=True)
    scheduling.service.pod_of = informers.pods.get
    scheduling.service.group_members = lambda key: informers.pods.by_index(POD_GROUP, key)
    scheduling.service.pod_group = informers.pod_groups.get
    scheduling.service.assume_pod = informers.pods.assume
    feed.subscribe(informers.pod_groups, HANDLERS, memo=memo)
    feed.subscribe(informers.claims, HANDLERS, memo=memo, listing=True)
    feed.subscribe(informers.pods, HANDLERS, memo=memo, listing=True)
    scheduling.view.synced = True
    scheduling.view.on_change(scheduling.service.waiters.note)  # at once: for the attempts running meanwhile
    scheduling.view.on_change(scheduling.wake_waiting)
    for pod in informers.pods.values():
        scheduling.consider_pod(pod)
