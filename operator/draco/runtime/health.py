"""Liveness and readiness over HTTP, for the operator's Deployment probes.

`/healthz` answers 200 while the event loop runs and every registered background task
(the work-queue workers) is alive; a dead worker means a restart is the fix. `/readyz`
answers 200 once every readiness condition is met: the lifecycle's initial LIST has filled
its caches and queued everything (and whatever else other parts register, such as the
scheduler's view). Both return JSON saying what is missing, plus whatever facts parts
`describe` (the operator adds `leader`: whether this replica holds the Lease).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp.web

from draco.logs import get_logger

__all__ = ["Health", "serve_health"]

log = get_logger(__name__)


@dataclass
class Health:
    """Named readiness conditions and watched tasks, shared through Kopf's memo."""

    pending: set[str] = field(default_factory=set)
    tasks: dict[str, asyncio.Task[object]] = field(default_factory=dict)
    facts: dict[str, Callable[[], object]] = field(default_factory=dict)

    def describe(self, name: str, fact: Callable[[], object]) -> None:
        """Report `fact()` under `name` in both probes' JSON (information, not a condition)."""
        self.facts[name] = fact

    def details(self) -> dict[str, object]:
        return {name: fact() for name, fact in self.facts.items()}

    def require(self, name: str) -> None:
        """Readiness now also waits for `name` (call before the watches start)."""
        self.pending.add(name)

    def mark_ready(self, name: str) -> None:
        if name in self.pending:
            self.pending.discard(name)
            log.info("Ready", condition=name, still_waiting=sorted(self.pending))

    @property
    def ready(self) -> bool:
        return not self.pending

    def watch(self, name: str, task: asyncio.Task[object]) -> None:
        """Liveness fails once `task` has ended (workers must run for the operator's life)."""
        self.tasks[name] = task

    def dead_tasks(self) -> list[str]:
        return sorted(name for name, task in self.tasks.items() if task.done())


async def serve_health(health: Health, *, port: int, host: str = "0.0.0.0") -> aiohttp.web.AppRunner:
    """Start the probe server; the caller keeps the runner and calls `cleanup()` at exit."""

    async def healthz(_: aiohttp.web.Request) -> aiohttp.web.Response:
        dead = health.dead_tasks()
        return aiohttp.web.json_response(
            {"alive": not dead, "dead": dead, **health.details()}, status=500 if dead else 200
        )

    async def readyz(_: aiohttp.web.Request) -> aiohttp.web.Response:
        waiting = sorted(health.pending)
        return aiohttp.web.json_response(
            {"ready": not waiting, "waiting": waiting, **health.details()}, status=503 if waiting else 200
        )

    app = aiohttp.web.Application()
    app.add_routes([aiohttp.web.get("/healthz", healthz), aiohttp.web.get("/readyz", readyz)])
    runner = aiohttp.web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, host, port).start()
    log.info("Serving health probes", port=port)
    return runner
