"""Kopf handlers of the device-taint-eviction controller: start and stop, and watch events
of ResourceSlices and DeviceTaintRules (Kopf's) and of ResourceClaims and Pods (the
operator's informers, `startup.py`) handed to the service (`service.EvictionController`).
Off with `draco operator --no-device-taint-eviction`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import kopf

from draco.api.constants import (
    GROUP,
    PLURAL_DEVICE_TAINT_RULES,
    PLURAL_RESOURCE_SLICES,
)
from draco.api.constants import VERSION as DRACO_VERSION
from draco.kube.client import DEVICE_TAINT_RULES, RESOURCE_SLICES, Obj, connect
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.devicetainteviction.service import FIELD_MANAGER, QUEUE_NAME, EvictionController, Item
from draco.operator.options import OperatorOptions, serves_namespace
from draco.runtime.workqueue import WorkQueue

__all__ = [
    "rule_event",
    "slice_event",
    "start_device_taint_eviction",
    "stop_device_taint_eviction",
]

log = get_logger(__name__)

MEMO_KEY: Final = "device_taint_eviction"


def _controller(memo: kopf.Memo) -> EvictionController | None:
    controller: EvictionController | None = memo.get(MEMO_KEY)
    if controller is not None and not controller.health_watched:
        health = memo.get("health")
        if health is not None and controller.runner is not None:
            health.watch("device-taint-eviction-workers", controller.runner)
            controller.health_watched = True
    return controller


@kopf.on.startup(id="device-taint-eviction")
async def start_device_taint_eviction(memo: kopf.Memo, **_: Any) -> None:
    options: OperatorOptions = memo.get("options") or OperatorOptions()
    if not options.device_taint_eviction:
        log.info("Device taint eviction is off (--no-device-taint-eviction)")
        return
    kube = await connect(field_manager=FIELD_MANAGER)
    queue: WorkQueue[Item] = WorkQueue(QUEUE_NAME)
    controller = EvictionController(kube=kube, queue=queue)
    # Everything is known before a worker runs: a pool seen in part could look tainted.
    slices = await kube.list(RESOURCE_SLICES)
    rules = await kube.list(DEVICE_TAINT_RULES)
    # Claims and pods: the informers' caches (listed by `start_operator`) and then every
    # change, nothing awaited in between, so nothing deleted meanwhile is missed.
    claims: Informer = memo.claim_informer
    pods: Informer = memo.pod_informer

    def served(obj: Obj) -> bool:
        return serves_namespace((obj.get("metadata") or {}).get("namespace") or "", options.namespaces)

    controller.prime(
        slices=slices,
        rules=rules,
        claims=[c for c in claims.values() if served(c)],
        pods=[p for p in pods.values() if served(p)],
    )

    def on_claim(type_: str, obj: Obj) -> None:
        if served(obj):
            controller.on_claim(obj, deleted=type_ == "DELETED")

    def on_pod(type_: str, obj: Obj) -> None:
        if served(obj):
            controller.on_pod(obj, deleted=type_ == "DELETED")

    claims.subscribe(on_claim, replay=False)
    pods.subscribe(on_pod, replay=False)
    controller.runner = asyncio.create_task(
        queue.run(controller.sync, workers=options.workers), name=QUEUE_NAME
    )
    memo[MEMO_KEY] = controller
    _controller(memo)
    log.info(
        "Device taint eviction started",
        rules=len(controller.state.rules),
        allocated_claims=len(controller.state.claims),
        pods=len(controller.state.pods),
        pending=len(controller.state.pending),
    )


@kopf.on.cleanup(id="device-taint-eviction")
async def stop_device_taint_eviction(memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    if controller is None:
        return
    controller.queue.shut_down()
    if controller.runner is not None:
        try:
            await asyncio.wait_for(controller.runner, timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            controller.runner.cancel()
    await controller.kube.close()
    memo[MEMO_KEY] = None


@kopf.on.event(GROUP, DRACO_VERSION, PLURAL_RESOURCE_SLICES, id="device-taint-eviction-slice")
async def slice_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    if controller is not None:
        controller.on_slice(dict(body), deleted=type == "DELETED")


@kopf.on.event(GROUP, DRACO_VERSION, PLURAL_DEVICE_TAINT_RULES, id="device-taint-eviction-rule")
async def rule_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    if controller is not None:
        controller.on_rule(dict(body), deleted=type == "DELETED")
