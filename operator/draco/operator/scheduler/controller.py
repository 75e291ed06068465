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
from typing import Final

from prometheus_client.registry import Collector

from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.operator.scheduler.allocation import AllocationService, AllocationSettings
from draco.operator.scheduler.handlers import AllocationHandlers
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
from draco.scheduling.view import ClusterView

__all__ = ["FIELD_MANAGER", "AllocationController"]

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


def _settings(options: OperatorOptions) -> AllocationSettings:
    """The allocation options of the operator's options."""
    return AllocationSettings(
        extended_resources=options.extended_resources,
        policy=options.placement_policy,
        binding_timeout_s=options.binding_timeout_s,
        preemption_timeout_s=options.preemption_timeout_s,
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
        demand: DemandReports = NO_DEMAND,
    ) -> None:
        """``demand`` is told of the pods and groups that fit nowhere (the autoscaling
        controller's, when it runs)."""
        self.informers = informers
        self.options = options
        self.health = health
        kube = kube.with_field_manager(FIELD_MANAGER)
        view = ClusterView(claim_cache=informers.claims)
        self.queue: WorkQueue[str] = WorkQueue("allocation")
        self.refusal_queue: WorkQueue[str] = WorkQueue("refusals")
        self.refusals = Refusals(
            kube=kube,
            view=view,
            pods=informers.pods,
            claims=informers.claims,
            enqueue_after=self.refusal_queue.add_after,
            grace_s=options.refusal_grace_s,
        )
        self.service = AllocationService(
            kube=kube,
            view=view,
            claim_informer=informers.claims,
            pods=informers.pods,
            pod_groups=informers.pod_groups,
            enqueue=self.queue.add,
            enqueue_after=self.queue.add_after,
            settings=_settings(options),
            avoided=self.refusals.avoided_nodes,
            demand=demand,
        )
        extended = options.extended_resources
        #: Advertises extended resources backed by DeviceClasses on the Nodes.
        self.advertiser = (
            NodeCapacity(
                kube=kube, view=view, inventory=self.service.current_inventory, offload=self.service.offload
            )
            if extended
            else None
        )
        self.handlers = AllocationHandlers(
            self.service,
            refusals=self.refusals,
            untranslated=UntranslatedPods(kube),
            advertiser=self.advertiser,
            unserved=UnservedPods(kube) if extended else None,
            hints=ExtendedResourceHints(kube, classes=lambda: view.classes) if extended else None,
            namespaces=options.namespaces,
        )
        self.runner: asyncio.Task[None] | None = None
        self.refusal_runner: asyncio.Task[None] | None = None
        self.capacity: asyncio.Task[None] | None = None
        health.require(SCHEDULING_READY)
        self.collectors = self._collectors()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _collectors(self) -> list[Collector]:
        """The metrics of what waits and what is free, read from the service when scraped."""
        service = self.service
        pending = PendingCollector(
            gated_pods=service.gated_pods, waiters=service.waiters, claim=service.claims.known
        )
        return [pending, PoolCollector(service.view.current_inventory, refresh=self._refresh)]

    def _refresh(self) -> None:
        """From the metrics thread: rebuild the stale inventory on the loop (off it, in the
        offloader's thread) for the next scrape."""
        if self._loop is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(self.service.current_inventory(), self._loop)

    async def start(self) -> None:
        service, view = self.service, self.service.view
        self.handlers.follow(self.informers)
        # The CEL worker process takes a moment to start (more on a busy node): before the
        # first attempt, not inside its wall-clock budget.
        await service.offload.prestart()
        workers = self.options.workers * WORKERS_PER_OPTION or WORKERS
        self.runner = asyncio.create_task(
            self.queue.run(service.sync_pod, workers=workers), name="allocation"
        )
        self.refusal_runner = asyncio.create_task(
            self.refusal_queue.run(self.refusals.sync, workers=4), name="refusals"
        )
        self.health.watch("refusal-workers", self.refusal_runner)
        if self.advertiser is not None:
            view.on_capacity(self.advertiser.poke)
            self.capacity = asyncio.create_task(self.advertiser.run(), name="extended-resource-capacity")
        self.health.watch("allocation-workers", self.runner)
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
        for collector in self.collectors:
            with contextlib.suppress(KeyError):  # (not registered: start did not get that far)
                REGISTRY.unregister(collector)
        self._loop = None
        self.queue.shut_down()
        if self.runner is not None:
            self.runner.cancel()
        self.refusal_queue.shut_down()
        if self.refusal_runner is not None:
            self.refusal_runner.cancel()
        if self.capacity is not None:
            self.capacity.cancel()
