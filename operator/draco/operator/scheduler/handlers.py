"""Allocation's reactions, as Kopf event handlers (fed by the operator's informers:
`draco.operator.feed`), bound to what they hand changes to: the allocation's
`ClusterView`, its service (:class:`~draco.operator.scheduler.allocation.AllocationService`)
and the watchers beside it. They keep the view equal to the informers' caches and put gated
pods on the ``allocation`` queue:

- what placement reads besides pods and claims (namespaces, the storage kinds, the
  selectors of Services and workload controllers, DeviceClasses, ResourceSlices,
  DeviceTaintRules, Nodes): into the view; the view reports capacity changes, which wake
  the waiting pods they may help (merged over :data:`WAKE_COALESCE_S`);
- a claim: into the view; the pods waiting on it are told (`AllocationService.claim_changed`);
- a PodGroup: the group waiting for it looks again;
- a pod: its group (if any) counts its members again; into the view; a gated pod of a
  namespace served goes onto the queue, no sooner than its backoff allows; a pod
  kube-scheduler refused where it was pinned is watched (`Refusals`); pods that use the
  native claims or an unserved extended resource, or that kube-scheduler finds short of an
  extended resource a DeviceClass could serve, get an Event (in the background: handlers
  never await).

Every handler is synchronous, on the event loop (never in a thread: the view is only ever
touched from one thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Final, cast

import kopf

from draco.api.bodies import key_of, meta_of, object_key
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
from draco.api.corebodies import PodBody
from draco.operator import feed
from draco.operator.informers import Informers, without_managed_fields
from draco.operator.options import serves_namespace
from draco.operator.scheduler.allocation import AllocationService
from draco.operator.scheduler.hints import ExtendedResourceHints
from draco.operator.scheduler.nodecapacity import NodeCapacity
from draco.operator.scheduler.refusals import Refusals
from draco.operator.scheduler.unserved import UnservedPods
from draco.operator.scheduler.untranslated import UntranslatedPods, is_untranslated
from draco.scheduling.extendedresources import resource_class_map
from draco.scheduling.podclaims import waits_for_draco
from draco.scheduling.requests import asks_for_extended_resources
from draco.scheduling.view import StorageKind
from draco.scheduling.wakeups import CapacityChange

__all__ = ["WAKE_COALESCE_S", "AllocationHandlers"]

_ID: Final = "allocation"
#: Capacity changes closer together than this wake waiting pods once.
WAKE_COALESCE_S: Final = 0.2
#: The storage kinds the volume rules read, with the API group and version of each.
_STORAGE: Final[tuple[tuple[str, str, StorageKind, str], ...]] = (
    ("", "v1", "persistentvolumeclaims", "pvc"),
    ("", "v1", "persistentvolumes", "pv"),
    ("storage.k8s.io", "v1", "storageclasses", "storageclass"),
    ("storage.k8s.io", "v1", "csinodes", "csinode"),
    ("storage.k8s.io", "v1", "csidrivers", "csidriver"),
    ("storage.k8s.io", "v1", "csistoragecapacities", "csistoragecapacity"),
    ("storage.k8s.io", "v1", "volumeattachments", "volumeattachment"),
)
#: What kube-scheduler's default spreading groups pods by: (group, version, plural, kind).
_WORKLOADS: Final = (
    ("", "v1", "services", "Service"),
    ("", "v1", "replicationcontrollers", "ReplicationController"),
    ("apps", "v1", "replicasets", "ReplicaSet"),
    ("apps", "v1", "statefulsets", "StatefulSet"),
)


def _resource(group: str, version: str, plural: str) -> tuple[str, ...]:
    return (version, plural) if not group else (group, version, plural)


class AllocationHandlers:
    """Allocation's Kopf event handlers, on a registry of their own (see the module
    docstring); ``namespaces``: the ``--namespace`` patterns whose gated pods are
    allocated here (empty: all). The watchers beside the service are optional
    (``advertiser``, ``unserved`` and ``hints`` exist with extended resources on)."""

    def __init__(
        self,
        service: AllocationService,
        *,
        refusals: Refusals,
        untranslated: UntranslatedPods,
        advertiser: NodeCapacity | None = None,
        unserved: UnservedPods | None = None,
        hints: ExtendedResourceHints | None = None,
        namespaces: tuple[str, ...] = (),
    ) -> None:
        self.service = service
        self.view = service.view
        self.refusals = refusals
        self.untranslated = untranslated
        self.advertiser = advertiser
        self.unserved = unserved
        self.hints = hints
        self.namespaces = namespaces
        self._classes_map: dict[str, str] | None = None
        self._wake: asyncio.TimerHandle | None = None
        #: The changes since the last wake-up, merged.
        self._changed = CapacityChange()
        self._background: set[asyncio.Task[None]] = set()
        self.registry = kopf.OperatorRegistry()
        on = feed.on_event(self.registry)
        on("v1", "namespaces", id=f"{_ID}/namespace")(self.namespace_changed)
        for group, version, plural, short in _STORAGE:
            on(*_resource(group, version, plural), id=f"{_ID}/{short}", param=plural)(self.storage_changed)
        for group, version, workloads, kind in _WORKLOADS:
            on(*_resource(group, version, workloads), id=f"{_ID}/{kind.lower()}", param=kind)(
                self.workload_changed
            )
        on(GROUP, PLURAL_DEVICE_CLASSES, id=f"{_ID}/class")(self.class_changed)
        on(GROUP, PLURAL_RESOURCE_SLICES, id=f"{_ID}/slice")(self.slice_changed)
        on(GROUP, PLURAL_DEVICE_TAINT_RULES, id=f"{_ID}/taint-rule")(self.taint_rule_changed)
        on("v1", "nodes", id=f"{_ID}/node")(self.node_changed)
        on(GROUP, PLURAL_RESOURCE_CLAIMS, id=f"{_ID}/claim")(self.claim_changed)
        on(SCHEDULING_GROUP, SCHEDULING_VERSION, PLURAL_POD_GROUPS, id=f"{_ID}/pod-group")(
            self.pod_group_changed
        )
        on("v1", "pods", id=f"{_ID}/pod")(self.pod_changed)

    # --- what placement reads ------------------------------------------------------------------

    def namespace_changed(self, type: str | None, name: str, body: Any, **_: Any) -> None:
        if type == "DELETED":
            self.view.delete_namespace(name)
        else:
            self.view.upsert_namespace(body)

    def storage_changed(
        self, type: str | None, name: str, namespace: str | None, body: Any, param: Any = None, **_: Any
    ) -> None:
        """What the volume rules read (namespaced kinds keyed ``ns/name``)."""
        kind = cast(StorageKind, param)
        if type == "DELETED":
            self.view.delete_storage(kind, object_key(namespace, name))
        else:
            self.view.upsert_storage(kind, object_key(namespace, name), body)

    def workload_changed(
        self, type: str | None, name: str, namespace: str | None, body: Any, param: Any = None, **_: Any
    ) -> None:
        """What kube-scheduler's default spreading groups pods by."""
        if type == "DELETED":
            self.view.delete_workload(str(param), namespace or "", name)
        else:
            self.view.upsert_workload(str(param), body)

    def class_changed(self, type: str | None, name: str, body: Any, **_: Any) -> None:
        self._classes_map = None  # built again when next asked for
        if type == "DELETED":
            self.view.delete_class(name)
        else:
            self.view.upsert_class(body)

    def slice_changed(self, type: str | None, name: str, body: Any, **_: Any) -> None:
        if type == "DELETED":
            self.view.delete_slice(name)
        else:
            self.view.upsert_slice(body)

    def taint_rule_changed(self, type: str | None, name: str, body: Any, **_: Any) -> None:
        if type == "DELETED":
            self.view.delete_taint_rule(name)
        else:
            self.view.upsert_taint_rule(body)

    def node_changed(self, type: str | None, name: str, body: Any, **_: Any) -> None:
        if type == "DELETED":
            self.view.delete_node(name)
            return
        self.view.upsert_node(body)
        if self.advertiser is not None:
            self.advertiser.observe_node(body)

    # --- claims, groups, pods ------------------------------------------------------------------

    def claim_changed(self, type: str | None, name: str, namespace: str | None, body: Any, **_: Any) -> None:
        key = object_key(namespace, name)
        if type == "DELETED":
            self.view.delete_claim(key)
            self.service.forget_claim(key)
        else:
            self.view.upsert_claim(body)
            self.service.note_claim(type or "ADDED", body)
        self.service.claim_changed(key)

    def pod_group_changed(self, body: Any, **_: Any) -> None:
        self.service.gangs.group_changed(body)

    def pod_changed(self, type: str | None, name: str, namespace: str | None, body: Any, **_: Any) -> None:
        key = object_key(namespace, name)
        served = serves_namespace(namespace or "", self.namespaces)
        if served:
            self.service.gangs.note_member(body)  # its group (if any) counts its members again
        if type == "DELETED":
            self.view.delete_pod(key)
            self.service.nominations.forget(key)
            self.service.forget(key)
            self.refusals.forget(key)
            return
        self.view.upsert_pod(body)
        self.service.nominations.note(body, placed=not waits_for_draco(body))
        if served:
            self.refusals.observe(body)
        if self.view.synced:
            self.consider_pod(body)
        if served and is_untranslated(body):
            self._in_background(self.untranslated.warn(body))
        if (
            self.unserved is not None
            and served
            and self.view.synced
            and asks_for_extended_resources(body.get("spec") or {})
        ):
            self._in_background(self.unserved.warn(body, self._class_map()))
        if self.hints is not None and served and self.hints.wants(body):
            self._in_background(self.hints.warn(body))

    def consider_pod(self, pod: PodBody) -> None:
        """A gated pod of a namespace served goes onto the queue (no sooner than its
        backoff allows); the generated claims of one not gated are recorded on it."""
        meta = meta_of(pod)
        key = key_of(pod)
        served = serves_namespace(meta.get("namespace", ""), self.namespaces)
        if served and waits_for_draco(pod) and not meta.get("deletionTimestamp"):
            # Without managedFields, as the pod informer keeps it: a burst of new pods
            # waits here by the thousand, and those are half a pod's memory.
            self.service.gated_pods[key] = without_managed_fields(pod)
            self.service.pod_changed(key)
        else:
            self.service.gated_pods.pop(key, None)
            if served:
                self.service.record_claims(pod)

    # --- subscribing ---------------------------------------------------------------------------

    def follow(self, informers: Informers) -> None:
        """Fill the view from the informers' caches (``type=None``), then follow every
        change (nothing is awaited in between): the inventory's inputs before claims and
        pods, which are judged against them; then the gated pods go onto the queue and
        capacity changes wake the waiting ones."""
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
            feed.subscribe(informer, self.registry, listing=True)
        feed.subscribe(informers.pod_groups, self.registry)
        feed.subscribe(informers.claims, self.registry, listing=True)
        feed.subscribe(informers.pods, self.registry, listing=True)
        self.view.synced = True
        self.view.on_change(self.service.waiters.note)  # at once: for the attempts running meanwhile
        self.view.on_change(self.wake_waiting)
        for pod in informers.pods.values():
            self.consider_pod(pod)

    def wake_waiting(self, change: CapacityChange) -> None:
        """Wake the waiting pods ``change`` may help, changes within WAKE_COALESCE_S merged."""
        self._changed = self._changed | change
        if self._wake is None:
            self._wake = asyncio.get_running_loop().call_later(WAKE_COALESCE_S, self._fire_wake)

    def _fire_wake(self) -> None:
        self._wake = None
        change, self._changed = self._changed, CapacityChange()
        self.service.capacity_changed(change)

    def _class_map(self) -> dict[str, str]:
        """Extended resource name -> DeviceClass, rebuilt after a class changed."""
        if self._classes_map is None:
            self._classes_map = resource_class_map(self.view.classes.values())
        return self._classes_map

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (an Event to write) without awaiting it: the handlers never await."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
