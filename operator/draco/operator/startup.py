"""The operator's Kopf activities: its settings, its login, and the startup and cleanup
handlers that build, start and stop the composition root (`root.Operator`), on Kopf's
default registry (importing `draco.operator` registers them, so ``kopf run -m
draco.operator`` runs the operator too, as one replica with the default options).

The controllers' reactions are Kopf event handlers on registries of their own, bound to
what they hand changes to and fed by the root's informers rather than by Kopf's watches
(`draco.operator.feed` says why). Kopf's memo carries only what `draco operator` hands its
activities, read here once: the options and the probes (`cli.py` serves
them before leading); the root itself is kept on the memo as ``memo.operator`` for the
cleanup handler. Resources opened here are closed by `stop_operator`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import kopf

from draco.api.constants import NODE_FIELD
from draco.frame.login import register_login
from draco.frame.settings import configure_kopf
from draco.kube.capabilities import field_selector_served
from draco.kube.client import RESOURCE_CLAIMS, Kube, connect
from draco.kube.reachable import until_answered
from draco.logs import get_logger
from draco.operator.options import OperatorOptions
from draco.operator.root import Operator
from draco.runtime.health import Health, serve_health
from draco.runtime.looplag import LoopLagSampler
from draco.runtime.offload import shared_offloader

__all__ = ["start_operator", "stop_operator"]

log = get_logger(__name__)

#: The connection pool of the process's one API client.
CONNECTIONS = 400


register_login(kopf.get_default_registry())


@kopf.on.startup(id="draco-operator")
async def start_operator(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    options: OperatorOptions = memo.get("options") or OperatorOptions()
    # Kopf watches nothing here: no CRD watch after its start-up scan.
    configure_kopf(settings, watches_crds=False)
    health: Health = memo.get("health") or Health()
    if options.health_port and memo.get("health_runner") is None:
        # (`draco operator` with leader election serves the probes before it leads.)
        memo.health_runner = await serve_health(health, port=options.health_port)
    memo.loop_lag = LoopLagSampler(asyncio.get_running_loop()).start()
    memo.offload_prestart = asyncio.create_task(shared_offloader().prestart(), name="draco-offload-prestart")
    # One client for the whole process; each controller writes under its own field manager.
    # Its pool carries what four clients of 100 connections did: a long-lived connection
    # per watch, and every controller's workers (allocation alone runs 64) with their Events.
    kube = await connect(connections=CONNECTIONS)
    try:
        # Waits out an API server that is restarting: Kopf would retry a failed start-up
        # handler only after a minute, holding the lease all that time.
        operator = await until_answered(
            lambda: _start(kube=kube, options=options, health=health), what="start the operator"
        )
    except BaseException:
        await kube.close()
        raise
    memo.operator = operator
    log.info("Operator started", namespaces=list(options.namespaces) or "all", workers=options.workers)


async def _start(*, kube: Kube, options: OperatorOptions, health: Health) -> Operator:
    """One try at starting the operator over `kube`: nothing of it left running if it fails."""
    # Where CRD selectable fields are not served (kube-apiserver < 1.31), node agents find
    # their claims by a label that the allocation then writes (`draco.kube.capabilities`).
    if not await field_selector_served(kube, RESOURCE_CLAIMS, NODE_FIELD):
        options = dataclasses.replace(options, claims_node_label=True)
    operator = Operator(kube=kube, options=options, health=health)
    try:
        await operator.start()
    except BaseException:
        await operator.stop()
        raise
    return operator


@kopf.on.cleanup(id="draco-operator")
async def stop_operator(memo: kopf.Memo, **_: Any) -> None:
    operator: Operator | None = memo.get("operator")
    if operator is not None:
        await operator.stop()
    runner = memo.get("health_runner")
    if runner is not None:
        await runner.cleanup()
    sampler: LoopLagSampler | None = memo.get("loop_lag")
    if sampler is not None:
        sampler.stop()
    if operator is not None:
        await operator.kube.close()
    log.info("Operator stopped")
