"""The allocation controller: informer events in, pod keys onto a work queue.

Every handler here is thin and runs on the event loop (never in a thread, so the view is
only ever touched from one thread). The operator's informers of DeviceClasses,
ResourceSlices, DeviceTaintRules, Nodes, Pods and ResourceClaims (`operator.informers`,
shared with the other controllers) keep the :class:`ClusterView` current; gated pods go
onto the ``allocation`` work queue whose workers run :meth:`AllocationService.sync_pod`.

Waiting pods are not polled. A pod that cannot be placed waits until something changes
that might let it fit: the view reports inventory and capacity changes with what changed
(merged over a short window, so a burst of slice updates wakes waiting pods once), which
wake only the pods they may help, and a change to one of the pod's claims wakes that pod
alone; either way no sooner than the pod's backoff allows (`waiting.py`).

At startup the view is filled before any worker runs, so a restarted operator knows every
written allocation before it allocates anything: everything from the informers' caches
(listed before any controller starts, then kept current by their watches, which started
where those LISTs ended). What the view holds is thus exactly the informers' caches,
whatever was deleted while the operator started or while a watch was broken, and the
controller's own claim writes enter that cache at once (``Informer.assume``).

The view always covers the whole cluster, whatever ``--namespace`` says: devices are
cluster-scoped, so claims of every namespace hold them, and pods of every namespace use
their node's cpu and memory. ``--namespace`` only decides which gated pods this operator
allocates for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

from draco.api.bodies import ResourceClaimBody, meta_of
from draco.api.corebodies import NodeBody, PodBody
from draco.kube.client import Kube, Obj
from draco.kube.informer import ChangeType
from draco.logs import get_logger
from draco.operator.informers import POD_GROUP, Informers, without_managed_fields
from draco.operator.options import OperatorOptions, serves_namespace
from draco.operator.scheduler.allocation import AllocationService, AllocationSettings
from draco.operator.scheduler.hints import ExtendedResourceHints
from draco.operator.scheduler.nodecapacity import NodeCapacity
from draco.operator.scheduler.refusals import Refusals
from draco.operator.scheduler.unserved import UnservedPods
from draco.operator.scheduler.untranslated import UntranslatedPods, is_untranslated
from draco.runtime.health import Health
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.extendedresources import resource_class_map
from draco.scheduling.podclaims import has_scheduling_gate
from draco.scheduling.view import ClusterView, StorageKind
from draco.scheduling.wakeups import CapacityChange

__all__ = ["FIELD_MANAGER", "AllocationController", "Scheduling"]

log = get_logger(__name__)

#: Who the allocation's writes are from (managedFields).
FIELD_MANAGER: Final = "draco-scheduler"
#: Concurrent pod syncs; the work is mostly waiting for the API server: each pod waits for
#: three writes in a row (claim metadata, claim status, pod), so it is the number of pods in
#: flight that bounds throughput, not the CPU (16 capped a 2,000-pod burst at ~20 pods/s
#: while the machine had CPU to spare). The decision itself is serialized.
WORKERS: Final = 64
#: Allocation workers per ``--workers`` (which sizes the other queues).
WORKERS_PER_OPTION: Final = 4
#: The readiness condition of the allocation half: its initial listing is done.
SCHEDULING_READY: Final = "scheduling-listed"
#: Capacity changes closer together than this wake waiting pods once.
WAKE_COALESCE_S: Final = 0.2


@dataclass
class Scheduling:
    """What the informer handlers share."""

    kube: Kube
    view: ClusterView
    queue: WorkQueue[str]
    service: AllocationService
    runner: asyncio.Task[None] | None = None
    #: Advertises extended resources backed by DeviceClasses on the Nodes, and its task.
    advertiser: NodeCapacity | None = None
    capacity: asyncio.Task[None] | None = None
    #: ``--namespace`` patterns: whose gated pods are allocated here (empty: all).
    namespaces: tuple[str, ...] = ()
    #: Warns about pods that still use the native spec.resourceClaims.
    untranslated: UntranslatedPods | None = None
    #: Warns about pods that ask for a mapped extended resource draco does not serve.
    unserved: UnservedPods | None = None
    _classes_map: dict[str, str] | None = None
    #: The safety net for pods kube-scheduler refused where they were pinned, and its queue.
    refusals: Refusals | None = None
    refusal_queue: WorkQueue[str] | None = None
    refusal_runner: asyncio.Task[None] | None = None
    #: Hints for pods kube-scheduler finds short of an extended resource draco could serve.
    hints: ExtendedResourceHints | None = None
    _wake: asyncio.TimerHandle | None = None
    #: The changes since the last wake-up, merged.
    _changed: CapacityChange = field(default_factory=CapacityChange)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    def wake_waiting(self, change: CapacityChange) -> None:
        self._changed = self._changed | change
        if self._wake is None:
            self._wake = asyncio.get_running_loop().call_later(WAKE_COALESCE_S, self._fire_wake)

    def _fire_wake(self) -> None:
        self._wake = None
        change, self._changed = self._changed, CapacityChange()
        self.service.capacity_changed(change)

    def on_claim(self, type_: ChangeType, claim: ResourceClaimBody) -> None:
        """The claim informer's handler."""
        meta = meta_of(claim)
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if type_ == "DELETED":
            self.view.delete_claim(key)
            self.service.forget_claim(key)
        else:
            self.view.upsert_claim(claim)
            self.service.note_claim(type_, claim)
        self.service.claim_changed(key)

    def on_pod(self, type_: ChangeType, pod: PodBody) -> None:
        """The pod informer's handler."""
        meta = meta_of(pod)
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if serves_namespace(meta.get("namespace", ""), self.namespaces):
            self.service.gangs.note_member(pod)  # its group (if any) counts its members again
        if type_ == "DELETED":
            self.view.delete_pod(key)
            self.service.forget(key)
            if self.refusals is not None:
                self.refusals.forget(key)
            return
        self.view.upsert_pod(pod)
        if self.refusals is not None and serves_namespace(meta.get("namespace", ""), self.namespaces):
            self.refusals.observe(pod)
        if self.view.synced:
            self.consider_pod(pod)
        if (
            self.untranslated is not None
            and is_untranslated(pod)
            and serves_namespace(meta.get("namespace", ""), self.namespaces)
        ):
            # The informer's handlers are synchronous: the Event is written in the background.
            self._in_background(self.untranslated.warn(pod))
        if (
            self.unserved is not None
            and self.view.synced
            and _asks_for_extended_resources(pod)
            and serves_namespace(meta.get("namespace", ""), self.namespaces)
        ):
            self._in_background(self.unserved.warn(pod, self._class_map()))
        if (
            self.hints is not None
            and self.hints.wants(pod)
            and serves_namespace(meta.get("namespace", ""), self.namespaces)
        ):
            self._in_background(self.hints.warn(pod))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _class_map(self) -> dict[str, str]:
        """Extended resource name -> DeviceClass, rebuilt after a class changed."""
        if self._classes_map is None:
            self._classes_map = resource_class_map(self.view.classes.values())
        return self._classes_map

    def on_class(self, type_: ChangeType, obj: Obj) -> None:
        self._classes_map = None
        if type_ == "DELETED":
            self.view.delete_class(obj["metadata"]["name"])
        else:
            self.view.upsert_class(obj)

    def on_slice(self, type_: ChangeType, obj: Obj) -> None:
        if type_ == "DELETED":
            self.view.delete_slice(obj["metadata"]["name"])
        else:
            self.view.upsert_slice(obj)

    def on_taint_rule(self, type_: ChangeType, obj: Obj) -> None:
        if type_ == "DELETED":
            self.view.delete_taint_rule(obj["metadata"]["name"])
        else:
            self.view.upsert_taint_rule(obj)

    def on_namespace(self, type_: ChangeType, obj: Obj) -> None:
        if type_ == "DELETED":
            self.view.delete_namespace(obj["metadata"]["name"])
        else:
            self.view.upsert_namespace(obj)

    def on_storage(self, kind: StorageKind) -> Callable[[ChangeType, Obj], None]:
        """The handler of one storage kind's informer (namespaced kinds keyed ``ns/name``)."""

        def handle(type_: ChangeType, obj: Obj) -> None:
            meta = obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])
            if type_ == "DELETED":
                self.view.delete_storage(kind, key)
            else:
                self.view.upsert_storage(kind, key, obj)

        return handle

    def on_workload(self, kind: str) -> Callable[[ChangeType, Obj], None]:
        """The handler of the Service, ReplicationController, ReplicaSet or StatefulSet
        informer (what kube-scheduler's default spreading groups pods by)."""

        def handle(type_: ChangeType, obj: Obj) -> None:
            meta = obj["metadata"]
            if type_ == "DELETED":
                self.view.delete_workload(kind, str(meta.get("namespace", "")), str(meta["name"]))
            else:
                self.view.upsert_workload(kind, obj)

        return handle

    def on_pod_group(self, type_: ChangeType, obj: Obj) -> None:
        """The PodGroup informer's handler: the group waiting for it looks again."""
        del type_
        self.service.gangs.group_changed(obj)

    def on_node(self, type_: ChangeType, obj: NodeBody) -> None:
        if type_ == "DELETED":
            self.view.delete_node(obj["metadata"]["name"])
            return
        self.view.upsert_node(obj)
        if self.advertiser is not None:
            self.advertiser.observe_node(obj)

    def subscribe(self, informers: Informers) -> None:
        """Fill the view from the informers' caches, then follow every change (nothing is
        awaited in between): the inventory's inputs before claims and pods, which are
        judged against them; then the gated pods go onto the queue and capacity changes
        wake the waiting ones."""
        informers.namespaces.subscribe(self.on_namespace)
        informers.volume_claims.subscribe(self.on_storage("persistentvolumeclaims"))
        informers.volumes.subscribe(self.on_storage("persistentvolumes"))
        informers.storage_classes.subscribe(self.on_storage("storageclasses"))
        informers.csi_nodes.subscribe(self.on_storage("csinodes"))
        informers.csi_drivers.subscribe(self.on_storage("csidrivers"))
        informers.csi_storage_capacities.subscribe(self.on_storage("csistoragecapacities"))
        informers.volume_attachments.subscribe(self.on_storage("volumeattachments"))
        informers.services.subscribe(self.on_workload("Service"))
        informers.replication_controllers.subscribe(self.on_workload("ReplicationController"))
        informers.replica_sets.subscribe(self.on_workload("ReplicaSet"))
        informers.stateful_sets.subscribe(self.on_workload("StatefulSet"))
        informers.classes.subscribe(self.on_class)
        informers.slices.subscribe(self.on_slice)
        informers.taint_rules.subscribe(self.on_taint_rule)
        informers.nodes.subscribe(self.on_node)
        self.service.pod_of = informers.pods.get
        self.service.group_members = lambda key: informers.pods.by_index(POD_GROUP, key)
        self.service.pod_group = informers.pod_groups.get
        self.service.assume_pod = informers.pods.assume
        informers.pod_groups.subscribe(self.on_pod_group, replay=False)
        informers.claims.subscribe(self.on_claim)
        informers.pods.subscribe(self.on_pod)
        self.view.synced = True
        self.view.on_change(self.service.waiters.note)  # at once: for the attempts running meanwhile
        self.view.on_change(self.wake_waiting)
        for pod in informers.pods.values():
            self.consider_pod(pod)

    def consider_pod(self, pod: PodBody) -> None:
        meta = meta_of(pod)
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        served = serves_namespace(meta.get("namespace", ""), self.namespaces)
        if served and has_scheduling_gate(pod) and not meta.get("deletionTimestamp"):
            # Without managedFields, as the pod informer keeps it: a burst of new pods
            # waits here by the thousand, and those are half a pod's memory.
            self.service.gated_pods[key] = without_managed_fields(pod)
            self.service.pod_changed(key)  # no sooner than its backoff allows
        else:
            self.service.gated_pods.pop(key, None)
            if served:
                self.service.record_claims(pod)


def _settings(options: OperatorOptions) -> AllocationSettings:
    """The allocation options of the operator's options."""
    return AllocationSettings(
        extended_resources=options.extended_resources,
        policy=options.placement_policy,
        binding_timeout_s=options.binding_timeout_s,
        group_timeout_s=options.group_timeout_s,
        allocation_timeout_s=options.allocation_timeout_s,
        node_label=options.claims_node_label,
    )


class AllocationController:
    """Allocation of gated pods (see the module docstring), in the operator's one shape:
    built with what it needs, started once the informers are synced, stopped at the end."""

    name: Final = "allocation"

    def __init__(self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health) -> None:
        self.informers = informers
        self.options = options
        self.health = health
        kube = kube.with_field_manager(FIELD_MANAGER)
        view = ClusterView(claim_cache=informers.claims)
        queue: WorkQueue[str] = WorkQueue("allocation")
        service = AllocationService(
            kube=kube,
            view=view,
            claim_informer=informers.claims,
            enqueue=queue.add,
            enqueue_after=queue.add_after,
            settings=_settings(options),
        )
        self.scheduling = Scheduling(
            kube=kube, view=view, queue=queue, service=service, namespaces=options.namespaces
        )
        self.scheduling.untranslated = UntranslatedPods(kube)
        if options.extended_resources:
            self.scheduling.unserved = UnservedPods(kube)
        refusal_queue: WorkQueue[str] = WorkQueue("refusals")
        refusals = Refusals(
            kube=kube,
            view=view,
            pods=informers.pods,
            claims=informers.claims,
            enqueue_after=refusal_queue.add_after,
            grace_s=options.refusal_grace_s,
        )
        service.avoided = refusals.avoided_nodes
        self.scheduling.refusals, self.scheduling.refusal_queue = refusals, refusal_queue
        if options.extended_resources:
            self.scheduling.hints = ExtendedResourceHints(kube, classes=lambda: view.classes)
        health.require(SCHEDULING_READY)

    async def start(self) -> None:
        scheduling, view = self.scheduling, self.scheduling.view
        service = scheduling.service
        scheduling.subscribe(self.informers)
        # The CEL worker process takes a moment to start (more on a busy node): before the
        # first attempt, not inside its wall-clock budget.
        await service.offload.prestart()
        workers = self.options.workers * WORKERS_PER_OPTION or WORKERS
        scheduling.runner = asyncio.create_task(
            scheduling.queue.run(service.sync_pod, workers=workers), name="allocation"
        )
        if scheduling.refusals is not None and scheduling.refusal_queue is not None:
            scheduling.refusal_runner = asyncio.create_task(
                scheduling.refusal_queue.run(scheduling.refusals.sync, workers=4), name="refusals"
            )
            self.health.watch("refusal-workers", scheduling.refusal_runner)
        if service.settings.extended_resources:
            advertiser = NodeCapacity(
                kube=scheduling.kube, view=view, inventory=service.current_inventory, offload=service.offload
            )
            scheduling.advertiser = advertiser
            view.on_capacity(advertiser.poke)
            scheduling.capacity = asyncio.create_task(advertiser.run(), name="extended-resource-capacity")
        self.health.watch("allocation-workers", scheduling.runner)
        self.health.mark_ready(SCHEDULING_READY)
        log.info(
            "Allocation started",
            nodes=len(view.nodes),
            slices=len(view.slices),
            allocated_claims=len(view.claims),
            policy=service.settings.policy,
            workers=workers,
        )

    async def stop(self) -> None:
        scheduling = self.scheduling
        scheduling.queue.shut_down()
        if scheduling.runner is not None:
            scheduling.runner.cancel()
        if scheduling.refusal_queue is not None:
            scheduling.refusal_queue.shut_down()
        if scheduling.refusal_runner is not None:
            scheduling.refusal_runner.cancel()
        if scheduling.capacity is not None:
            scheduling.capacity.cancel()


def _asks_for_extended_resources(pod: PodBody) -> bool:
    """Some container requests or limits a resource with a domain (cheap: no parsing)."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        resources = container.get("resources") or {}
        for section in (resources.get("limits") or {}, resources.get("requests") or {}):
            if any("/" in name for name in section):
                return True
    return False
