"""Kopf's frame around the operator: its settings, its login, and one startup and one
cleanup handler that build, start and stop the composition root (`root.Operator`).

These are the only handlers the operator registers with Kopf (importing `draco.operator`
registers them): every kind the controllers read comes from the root's informers, not
from Kopf's watches (see `informers.py` for why). What `draco operator` hands over
through Kopf's memo is read here once: the options and the probes (`cli.py` serves them
before leading); the root itself is kept on the memo as ``memo.operator`` for the
cleanup handler. Resources opened here are closed by `stop_operator`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import kopf

from draco.api.constants import NODE_FIELD
from draco.kube.capabilities import field_selector_served
from draco.kube.client import RESOURCE_CLAIMS, Kube, connect
from draco.kube.reachable import until_answered
from draco.logs import get_logger
from draco.operator.kopfstate import MemoryDiffBaseStorage, MemoryProgressStorage
from draco.operator.login import kopf_connection_info
from draco.operator.options import OperatorOptions
from draco.operator.root import Operator
from draco.runtime.health import Health, serve_health
from draco.runtime.looplag import LoopLagSampler
from draco.runtime.offload import shared_offloader

__all__ = ["start_operator", "stop_operator"]

log = get_logger(__name__)

#: The connection pool of the process's one API client.
CONNECTIONS = 400


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
    options: OperatorOptions = memo.get("options") or OperatorOptions()
    configure_settings(settings)
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
