"""A keyed work queue: the same key is never worked on twice at once, and a key added
while it waits is queued only once.

Events name *what* changed (a pool, a claim); workers look up the newest state when they
get to it. So a burst of 50 events about one claim is one sync, and a sync that fails is
retried later with backoff (client-go's workqueue, the asyncio way).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from draco.logs import get_logger

__all__ = ["KeyedQueue"]

log = get_logger(__name__)

K = TypeVar("K", bound=Hashable)


class KeyedQueue(Generic[K]):
    def __init__(self, *, name: str, max_backoff: float = 30.0) -> None:
        self.name = name
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._pending: set[K] = set()
        self._active: set[K] = set()
        self._again: set[K] = set()
        self._failures: dict[K, int] = {}
        self._max_backoff = max_backoff
        self._idle = asyncio.Event()
        self._idle.set()
        self._delayed = 0

    def add(self, key: K) -> None:
        if key in self._pending:
            return
        if key in self._active:
            self._again.add(key)
            return
        self._pending.add(key)
        self._idle.clear()
        self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        self._delayed += 1
        self._idle.clear()

        def fire() -> None:
            self._delayed -= 1
            self.add(key)
            self._check_idle()

        asyncio.get_running_loop().call_later(delay, fire)

    def _check_idle(self) -> None:
        if not self._pending and not self._active and not self._delayed:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until nothing is queued, running or waiting for a retry (benchmarks, tests)."""
        await self._idle.wait()

    async def run(self, handler: Callable[[K], Awaitable[None]], *, workers: int) -> None:
        async def worker() -> None:
            while True:
                key = await self._queue.get()
                self._pending.discard(key)
                self._active.add(key)
                try:
                    await handler(key)
                    self._failures.pop(key, None)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    failures = self._failures.get(key, 0) + 1
                    self._failures[key] = failures
                    delay = min(0.2 * 2 ** (failures - 1), self._max_backoff)
                    log.warning(
                        "Sync failed; retrying", queue=self.name, key=str(key), error=repr(exc), delay=delay
                    )
                    self.add_after(key, delay)
                finally:
                    self._active.discard(key)
                    if key in self._again:
                        self._again.discard(key)
                        self.add(key)
                    self._check_idle()

        await asyncio.gather(*(worker() for _ in range(workers)))
