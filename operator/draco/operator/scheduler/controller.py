"""The allocation controller: Kopf event handlers in (`handlers.py`, fed by the operator's
informers), pod keys onto a work queue.

The handlers are thin and run on the event loop (never in a thread, so the view is only
ever touched from one thread). Through them the operator's informers of DeviceClasses,
ResourceSlices, DeviceTaintRules, Nodes, Pods, ResourceClaims and what placement reads
besides (`operator.informers`, shared with the other controllers) keep the
:class:`ClusterView` current; gated pods go onto the ``allocation`` work queue whose
workers run :meth:`AllocationService.sync_pod`.

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
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

import kopf

from draco.api.bodies import key_of, meta_of
from draco.api.corebodies import PodBody
from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.informers import Informers, without_managed_fields
from draco.operator.options import OperatorOptions, serves_namespace
from draco.operator.scheduler.allocation import AllocationService, AllocationSettings
from draco.operator.scheduler.handlers import follow
from draco.operator.scheduler.hints import ExtendedResourceHints
from draco.operator.scheduler.nodecapacity import NodeCapacity
from draco.operator.scheduler.pendingmetrics import PendingCollector
from draco.operator.scheduler.poolmetrics import PoolCollector
from draco.operator.scheduler.refusals import Refusals
from draco.operator.scheduler.unserved import UnservedPods
from draco.operator.scheduler.untranslated import UntranslatedPods
from draco.runtime.health import Health
from draco.runtime.metrics import REGISTRY
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.demand import NO_DEMAND, DemandReports
from draco.scheduling.extendedresources import resource_class_map
from draco.scheduling.podclaims import waits_for_draco
from draco.scheduling.view import ClusterView
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

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (an Event to write) without awaiting it: the handlers never await."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def class_map(self) -> dict[str, str]:
        """Extended resource name -> DeviceClass, rebuilt after a class changed."""
        if self._classes_map is None:
            self._classes_map = resource_class_map(self.view.classes.values())
        return self._classes_map

    def forget_class_map(self) -> None:
        """A DeviceClass changed: the map is built again when next asked for."""
        self._classes_map = None

    def consider_pod(self, pod: PodBody) -> None:
        meta = meta_of(pod)
        key = key_of(pod)
        served = serves_namespace(meta.get("namespace", ""), self.namespaces)
        if served and waits_for_draco(pod) and not meta.get("deletionTimestamp"):
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

    def __init__(
        self,
        *,
        kube: Kube,
        informers: Informers,
        options: OperatorOptions,
        health: Health,
        memo: kopf.Memo,
        demand: DemandReports = NO_DEMAND,
    ) -> None:
        """``demand`` is told of the pods and groups that fit nowhere (the autoscaling
        controller's, when it runs)."""
        self.informers = informers
        self.memo = memo
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
            demand=demand,
        )
        self.scheduling = Scheduling(
            kube=kube, view=view, queue=queue, service=service, namespaces=options.namespaces
        )
        memo.scheduling = self.scheduling  # what the handlers hand changes to
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
        self.collectors = [
            PendingCollector(
                gated_pods=service.gated_pods, waiters=service.waiters, claim=service.claims.known
            ),
            PoolCollector(view.current_inventory, refresh=self._refresh),
        ]
        self._loop: asyncio.AbstractEventLoop | None = None

    def _refresh(self) -> None:
        """From the metrics thread: rebuild the stale inventory on the loop (off it, in the
        offloader's thread) for the next scrape."""
        if self._loop is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(self.scheduling.service.current_inventory(), self._loop)

    async def start(self) -> None:
        scheduling, view = self.scheduling, self.scheduling.view
        service = scheduling.service
        follow(self.informers, self.memo)
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
        self._loop = asyncio.get_running_loop()
        for collector in self.collectors:
            REGISTRY.register(collector)
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
        for collector in self.collectors:
            with contextlib.suppress(KeyError):  # (not registered: start did not get that far)
                REGISTRY.unregister(collector)
        self._loop = None
        scheduling.queue.shut_down()
        if scheduling.runner is not None:
            scheduling.runner.cancel()
        if scheduling.refusal_queue is not None:
            scheduling.refusal_queue.shut_down()
        if scheduling.refusal_runner is not None:
            scheduling.refusal_runner.cancel()
        if scheduling.capacity is not None:
            scheduling.capacity.cancel()
