"""Operator start and stop: Kopf settings, the API client, the informers of claims and
pods, the lifecycle service and its workers and probes, all put on Kopf's memo for the
handlers.

Kopf runs `start_operator` before it starts any watch, so every handler finds `memo.kube`,
`memo.options`, `memo.health`, `memo.claim_informer`, `memo.pod_informer` and
`memo.lifecycle` in place. Claims and pods are not watched through Kopf: one informer of
each (`informer.Informer`) lists and watches them, and every part that keeps state about
them (lifecycle, allocation, DeviceClass status) subscribes to it, so all of them see the
same objects in the same order, including the deletions that happen while the operator
starts. Resources the operator opens here are closed by `stop_operator`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from draco.api.constants import NODE_FIELD
from draco.kube.capabilities import field_selector_served
from draco.kube.client import PODS, RESOURCE_CLAIMS, Kube, connect
from draco.kube.informer import Informer
from draco.kube.login import kopf_connection_info
from draco.logs import get_logger
from draco.operator.kopfstate import MemoryDiffBaseStorage, MemoryProgressStorage
from draco.operator.metrics import ClaimsCollector
from draco.operator.options import OperatorOptions
from draco.operator.resourceclaim.lifecycle import Lifecycle
from draco.operator.stores import without_managed_fields
from draco.runtime.health import Health, serve_health
from draco.runtime.looplag import LoopLagSampler
from draco.runtime.metrics import REGISTRY
from draco.runtime.offload import shared_offloader
from draco.runtime.workqueue import WorkQueue

__all__ = ["LIFECYCLE_READY", "start_operator", "stop_operator"]

log = get_logger(__name__)

#: The readiness condition of the lifecycle: its initial LIST is done.
LIFECYCLE_READY = "lifecycle-listed"
#: Upstream's queue name for the resourceclaim controller.
LIFECYCLE_QUEUE = "resource_claim"

_claims_collector: ClaimsCollector | None = None


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """Kopf settings that keep it from writing on our objects and from hanging on watches."""
    # Our Events are explicit (kube.emit_event); Kopf turning log lines into Events would
    # duplicate them with less useful wording.
    settings.posting.enabled = False
    settings.posting.level = logging.WARNING
    # Watches are restarted regularly so a silently dropped connection cannot stall us.
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    # Kopf logs every handler success at INFO: one line per watch event. Keep those for DEBUG.
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # No progress or last-handled annotations on pods and claims.
    settings.persistence.progress_storage = MemoryProgressStorage()
    diffbase = MemoryDiffBaseStorage()
    # Only change-detecting handlers (on.create/update/field) read Kopf's diffs; draco has
    # none, so the per-event essence copy is skipped unless one gets registered.
    diffbase.changing_handlers = bool(kopf.get_default_registry()._changing.get_all_handlers())
    settings.persistence.diffbase_storage = diffbase


@kopf.on.login(id="draco-login")
async def login(**_: Any) -> kopf.ConnectionInfo:
    """Kopf's credentials: the same ones, in the same order, as every other client of the
    process (`draco.kube.config`). Kopf calls this again when the API answers 401."""
    return await kopf_connection_info()


@kopf.on.startup(id="draco-operator")
async def start_operator(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    global _claims_collector
    options: OperatorOptions = memo.get("options") or OperatorOptions()
    memo.options = options
    configure_settings(settings)
    if memo.get("kube") is None:
        memo.kube = await connect()
    kube: Kube = memo.kube
    health: Health = memo.get("health") or Health()
    memo.health = health
    health.require(LIFECYCLE_READY)
    if options.health_port and memo.get("health_runner") is None:
        # (`draco operator` with leader election serves the probes before it leads.)
        memo.health_runner = await serve_health(health, port=options.health_port)
    if memo.get("loop_lag") is None:
        memo.loop_lag = LoopLagSampler(asyncio.get_running_loop()).start()
    memo.offload_prestart = asyncio.create_task(shared_offloader().prestart(), name="draco-offload-prestart")

    # Every namespace, whatever --namespace says: allocation counts what every claim holds
    # and every pod uses; the lifecycle keeps to its namespaces.
    claims = Informer(kube, RESOURCE_CLAIMS)
    pods = Informer(kube, PODS, trim=without_managed_fields)
    memo.claim_informer = claims
    memo.pod_informer = pods
    queue: WorkQueue[str] = WorkQueue(LIFECYCLE_QUEUE)
    lifecycle = Lifecycle(kube, queue=queue, namespaces=options.namespaces)
    # The allocation half runs in this process too (its startup comes next): gated pods'
    # claim names are recorded by its pin, not by a write of their own.
    lifecycle.allocation_records = True
    # Where CRD selectable fields are not served (kube-apiserver < 1.31), node agents find
    # their claims by a label that allocation then writes (`draco.kube.capabilities`).
    memo.node_label = not await field_selector_served(kube, RESOURCE_CLAIMS, NODE_FIELD)
    lifecycle.node_label = memo.node_label
    memo.lifecycle = lifecycle
    if _claims_collector is not None:
        REGISTRY.unregister(_claims_collector)
    _claims_collector = ClaimsCollector(lifecycle.claims.values)
    REGISTRY.register(_claims_collector)
    await lifecycle.prime(claims=claims, pods=pods)
    for informer in (claims, pods):
        for watch in informer.tasks:
            health.watch(watch.get_name(), watch)
    task: asyncio.Task[object] = asyncio.create_task(
        queue.run(lifecycle.sync, workers=options.workers), name="draco-lifecycle-workers"
    )
    memo.lifecycle_task = task
    health.watch("lifecycle-workers", task)
    health.mark_ready(LIFECYCLE_READY)
    log.info("Operator started", namespaces=list(options.namespaces) or "all", workers=options.workers)


@kopf.on.cleanup(id="draco-operator")
async def stop_operator(memo: kopf.Memo, **_: Any) -> None:
    global _claims_collector
    lifecycle: Lifecycle | None = memo.get("lifecycle")
    if lifecycle is not None:
        lifecycle.queue.shut_down()
    task: asyncio.Task[object] | None = memo.get("lifecycle_task")
    if task is not None:
        try:
            await asyncio.wait_for(task, timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
    if _claims_collector is not None:
        REGISTRY.unregister(_claims_collector)
        _claims_collector = None
    runner = memo.get("health_runner")
    if runner is not None:
        await runner.cleanup()
    sampler: LoopLagSampler | None = memo.get("loop_lag")
    if sampler is not None:
        sampler.stop()
        memo.loop_lag = None
    for name in ("claim_informer", "pod_informer"):
        informer: Informer | None = memo.get(name)
        if informer is not None:
            await informer.stop()
    kube: Kube | None = memo.get("kube")
    if kube is not None:
        await kube.close()
        memo.kube = None
    log.info("Operator stopped")
