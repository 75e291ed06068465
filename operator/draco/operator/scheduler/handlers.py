"""Handlers of the allocation half: watch events in, pod keys onto a work queue.

Every handler here is thin and runs on the event loop (never in a thread, so the view is
only ever touched from one thread). Watch events of DeviceClasses, ResourceSlices,
DeviceTaintRules and Nodes (Kopf's), and of Pods and ResourceClaims (the operator's
informers, shared with the lifecycle) keep the :class:`ClusterView` current; gated pods
go onto the ``allocation`` work queue whose workers run :meth:`AllocationService.sync_pod`.

Waiting pods are not polled. A pod that cannot be placed waits until something changes
that might let it fit: the view reports inventory and capacity changes (coalesced over a
short window, so a burst of slice updates wakes waiting pods once), and a change to one
of the pod's claims wakes that pod alone.

At startup the view is filled before any worker runs, so a restarted operator knows every
written allocation before it allocates anything: claims and pods from the informers'
caches (listed by `start_operator`, then kept current by their watches, which started
where those LISTs ended), the rest by listing the API. The claims the view counts as
holding devices are thus exactly the informer's, whatever was deleted while the operator
started, and its own writes enter that cache at once (``Informer.assume``).

The view always covers the whole cluster, whatever ``--namespace`` says: devices are
cluster-scoped, so claims of every namespace hold them, and pods of every namespace use
their node's cpu and memory. ``--namespace`` only decides which gated pods this operator
allocates for.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any, Final

import kopf

from draco.allocator.place import Policy
from draco.api.constants import GROUP, VERSION
from draco.kube.client import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NODES,
    RESOURCE_SLICES,
    Kube,
    connect,
)
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.options import serves_namespace
from draco.operator.scheduler.allocation import AllocationService, AllocationSettings
from draco.operator.scheduler.nodecapacity import NodeCapacity
from draco.operator.scheduler.untranslated import UntranslatedPods, is_untranslated
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.podclaims import has_scheduling_gate
from draco.scheduling.view import ClusterView

__all__ = ["Scheduling"]

log = get_logger(__name__)

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
    """What the handlers share, kept on Kopf's memo as ``memo.scheduling``."""

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
    _wake: asyncio.TimerHandle | None = None
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    def wake_waiting(self) -> None:
        if self._wake is None:
            self._wake = asyncio.get_running_loop().call_later(WAKE_COALESCE_S, self._fire_wake)

    def _fire_wake(self) -> None:
        self._wake = None
        self.service.retry_waiting()

    def on_claim(self, type_: str, claim: dict[str, Any]) -> None:
        """The claim informer's handler."""
        meta = claim.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if type_ == "DELETED":
            self.view.delete_claim(key)
            self.service.forget_claim(key)
        else:
            self.view.upsert_claim(claim)
            self.service.note_claim(claim)
        self.service.claim_changed(key)

    def on_pod(self, type_: str, pod: dict[str, Any]) -> None:
        """The pod informer's handler."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if type_ == "DELETED":
            self.view.delete_pod(key)
            self.service.forget(key)
            return
        self.view.upsert_pod(pod)
        if self.view.synced:
            self.consider_pod(pod)
        if (
            self.untranslated is not None
            and is_untranslated(pod)
            and serves_namespace(str(meta.get("namespace", "")), self.namespaces)
        ):
            # The informer's handlers are synchronous: the Event is written in the background.
            task = asyncio.get_running_loop().create_task(self.untranslated.warn(pod))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def consider_pod(self, pod: Any) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        served = serves_namespace(str(meta.get("namespace", "")), self.namespaces)
        if served and has_scheduling_gate(pod) and not meta.get("deletionTimestamp"):
            self.service.gated_pods[key] = pod
            self.queue.add(key)
        else:
            self.service.gated_pods.pop(key, None)


def _settings(options: Any) -> AllocationSettings:
    """The allocation options of ``memo.options`` (``OperatorOptions``; defaults without)."""
    chosen = getattr(options, "placement_policy", None)
    policy: Policy = "first"
    if chosen == "pack":
        policy = "pack"
    elif chosen == "spread":
        policy = "spread"
    timeout = getattr(options, "binding_timeout_s", None)
    allocation_timeout = getattr(options, "allocation_timeout_s", None)
    return AllocationSettings(
        extended_resources=bool(getattr(options, "extended_resources", True)),
        policy=policy,
        binding_timeout_s=float(timeout) if timeout is not None else AllocationSettings.binding_timeout_s,
        allocation_timeout_s=(
            float(allocation_timeout)
            if allocation_timeout is not None
            else AllocationSettings.allocation_timeout_s
        ),
    )


@kopf.on.startup(id="draco-scheduling")
async def start_scheduling(memo: kopf.Memo, **_: Any) -> None:
    options = memo.get("options")
    namespaces: tuple[str, ...] = tuple(getattr(options, "namespaces", ()) or ())
    health = memo.get("health")
    if health is not None:
        health.require(SCHEDULING_READY)
    kube = await connect(field_manager="draco-scheduler")
    claims: Informer = memo.claim_informer
    pods: Informer = memo.pod_informer
    view = ClusterView(claim_cache=claims)
    queue: WorkQueue[str] = WorkQueue("allocation")
    settings = replace(_settings(options), node_label=bool(memo.get("node_label", False)))
    service = AllocationService(kube=kube, view=view, enqueue=queue.add, settings=settings)
    scheduling = Scheduling(kube=kube, view=view, queue=queue, service=service, namespaces=namespaces)
    scheduling.untranslated = UntranslatedPods(kube)
    memo.scheduling = scheduling
    for device_class in await kube.list(DEVICE_CLASSES):
        view.upsert_class(device_class)
    for resource_slice in await kube.list(RESOURCE_SLICES):
        view.upsert_slice(resource_slice)
    for rule in await kube.list(DEVICE_TAINT_RULES):
        view.upsert_taint_rule(rule)
    for node in await kube.list(NODES):
        view.upsert_node(node)
    # The informers' caches now, then every change (nothing is awaited in between).
    claims.subscribe(scheduling.on_claim)
    pods.subscribe(scheduling.on_pod)
    view.synced = True
    view.on_capacity(scheduling.wake_waiting)
    for pod in pods.values():
        scheduling.consider_pod(pod)
    # The CEL worker process takes a moment to start (more on a busy node): before the first
    # attempt, not inside its wall-clock budget.
    await service.offload.prestart()
    workers = int(getattr(options, "workers", 0) or 0) * WORKERS_PER_OPTION or WORKERS
    scheduling.runner = asyncio.create_task(queue.run(service.sync_pod, workers=workers), name="allocation")
    if service.settings.extended_resources:
        advertiser = NodeCapacity(
            kube=kube, view=view, inventory=service.current_inventory, offload=service.offload
        )
        scheduling.advertiser = advertiser
        view.on_capacity(advertiser.poke)
        scheduling.capacity = asyncio.create_task(advertiser.run(), name="extended-resource-capacity")
    if health is not None:
        health.watch("allocation-workers", scheduling.runner)
        health.mark_ready(SCHEDULING_READY)
    log.info(
        "Allocation started",
        nodes=len(view.nodes),
        slices=len(view.slices),
        allocated_claims=len(view.claims),
        policy=service.settings.policy,
        workers=workers,
    )


@kopf.on.cleanup(id="draco-scheduling")
async def stop_scheduling(memo: kopf.Memo, **_: Any) -> None:
    scheduling: Scheduling | None = getattr(memo, "scheduling", None)
    if scheduling is None:
        return
    scheduling.queue.shut_down()
    if scheduling.runner is not None:
        scheduling.runner.cancel()
    if scheduling.capacity is not None:
        scheduling.capacity.cancel()
    await scheduling.kube.close()


def _deleted(event: kopf.RawEvent) -> bool:
    return event.get("type") == "DELETED"


def _object(event: kopf.RawEvent) -> dict[str, Any]:
    """The raw object of the event (never Kopf's Body view, which would keep the whole
    body alive through every sub-view the view stores)."""
    obj: Any = event.get("object")
    return obj if isinstance(obj, dict) else {}


@kopf.on.event(GROUP, VERSION, "deviceclasses")
async def class_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    body = _object(event)
    view: ClusterView = memo.scheduling.view
    if _deleted(event):
        view.delete_class(body["metadata"]["name"])
    else:
        view.upsert_class(body)


@kopf.on.event(GROUP, VERSION, "resourceslices")
async def slice_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    body = _object(event)
    view: ClusterView = memo.scheduling.view
    if _deleted(event):
        view.delete_slice(body["metadata"]["name"])
    else:
        view.upsert_slice(body)


@kopf.on.event(GROUP, VERSION, "devicetaintrules")
async def taint_rule_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    body = _object(event)
    view: ClusterView = memo.scheduling.view
    if _deleted(event):
        view.delete_taint_rule(body["metadata"]["name"])
    else:
        view.upsert_taint_rule(body)


@kopf.on.event("", "v1", "nodes")
async def node_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    body = _object(event)
    view: ClusterView = memo.scheduling.view
    if _deleted(event):
        view.delete_node(body["metadata"]["name"])
    else:
        view.upsert_node(body)
        if memo.scheduling.advertiser is not None:
            memo.scheduling.advertiser.observe_node(body)
