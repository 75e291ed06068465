"""An asyncio work queue with client-go's semantics, for controllers that sync by key.

Why not let Kopf call the sync code directly: a controller that reacts to pods *and*
claims must funnel both into one serialized "sync this key" step, retry failures with a
per-key exponential backoff, and never work on the same key twice at the same time. That is
client-go's rate-limited work queue, and this is the same contract:

- a key is queued at most once (adding it again while it waits is a no-op);
- a key is never handed to two workers at once: added while being processed, it is queued
  again when the worker calls `done()`;
- `add_rate_limited` waits `base_delay * 2**failures` (capped at `max_delay`) before the
  key comes back; `forget` resets the count after a success;
- `add_after` queues a key later (a requeue with a deadline, a poll).

`run(sync, workers=N)` drives N workers: `sync(key)` returns None when done or a delay in
seconds to be called again; an exception is logged (with the API's status and reason for
a `KubeError`) and the key retried with backoff. `wait_idle()` waits until nothing is
queued, running or scheduled (tests and benchmarks). Metrics follow client-go's
`workqueue_*` names with the queue's `name` label. The operator's controllers and the node
agent's pool and claim syncs all use this one queue.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from draco.errors import KubeError, QueueShutDown, RetryableError
from draco.logs import get_logger
from draco.runtime.metrics import (
    WORKQUEUE_ADDS,
    WORKQUEUE_DEPTH,
    WORKQUEUE_QUEUE_DURATION,
    WORKQUEUE_RETRIES,
    WORKQUEUE_WORK_DURATION,
)

__all__ = ["QueueShutDown", "RetryableError", "SyncFunction", "WorkQueue"]

K = TypeVar("K", bound=Hashable)

#: What a worker calls for each key: None = done, a float = call again after that many seconds.
SyncFunction = Callable[[K], Awaitable[float | None]]

log = get_logger(__name__)


class WorkQueue(Generic[K]):
    """A deduplicating, rate-limited queue of keys (see the module docstring)."""

    def __init__(self, name: str, *, base_delay: float = 0.005, max_delay: float = 300.0) -> None:
        self.name = name
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._added_at: dict[K, float] = {}
        self._failures: dict[K, int] = {}
        self._delayed: dict[K, asyncio.TimerHandle] = {}
        self._due: dict[K, float] = {}
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._shutting_down = False
        self._depth = WORKQUEUE_DEPTH.labels(name=name)
        self._adds = WORKQUEUE_ADDS.labels(name=name)
        self._retries = WORKQUEUE_RETRIES.labels(name=name)
        self._queue_duration = WORKQUEUE_QUEUE_DURATION.labels(name=name)
        self._work_duration = WORKQUEUE_WORK_DURATION.labels(name=name)
        self._depth.set(0)

    # --- adding ---------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue `key` now, unless it is already waiting."""
        if self._shutting_down or key in self._dirty:
            return
        self._adds.inc()
        self._dirty.add(key)
        self._added_at.setdefault(key, time.monotonic())
        self._idle.clear()
        if key in self._processing:
            return  # `done()` puts it back once the current worker is finished with it
        self._queue.append(key)
        self._depth.set(len(self._queue))
        self._wakeup.set()

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` once `delay` seconds have passed; the earliest pending deadline wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if key in self._due and self._due[key] <= due:
            return
        if key in self._delayed:
            self._delayed.pop(key).cancel()
        self._due[key] = due
        self._delayed[key] = loop.call_at(due, self._fire_delayed, key)
        self._idle.clear()

    def _fire_delayed(self, key: K) -> None:
        self._delayed.pop(key, None)
        self._due.pop(key, None)
        self.add(key)
        self._check_idle()

    def add_rate_limited(self, key: K) -> None:
        """Queue `key` after its exponential backoff (one more failure counted)."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        self._retries.inc()
        self.add_after(key, self.backoff(failures))

    def backoff(self, failures: int) -> float:
        """The delay before retry number `failures + 1`: base * 2**failures, capped."""
        return float(min(self.max_delay, self.base_delay * 2.0 ** min(failures, 64)))

    def forget(self, key: K) -> None:
        """Stop counting failures for `key` (call after it synced successfully)."""
        self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        return self._failures.get(key, 0)

    # --- taking -----------------------------------------------------------------------------

    async def get(self) -> K:
        """The next key to work on; the caller must call `done(key)` afterwards."""
        while not self._queue:
            if self._shutting_down:
                raise QueueShutDown(self.name)
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._depth.set(len(self._queue))
        self._dirty.discard(key)
        self._processing.add(key)
        added = self._added_at.pop(key, None)
        if added is not None:
            self._queue_duration.observe(time.monotonic() - added)
        return key

    def done(self, key: K) -> None:
        """The worker finished `key`; if it was added meanwhile, it goes back in line."""
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._depth.set(len(self._queue))
            self._wakeup.set()
        self._check_idle()

    def _check_idle(self) -> None:
        if self.idle:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until nothing is queued, being processed or scheduled for later."""
        while not self.idle:
            self._idle.clear()
            await self._idle.wait()

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, key: object) -> bool:
        return key in self._dirty or key in self._delayed

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing being processed, nothing scheduled for later."""
        return not self._queue and not self._processing and not self._delayed

    def shut_down(self) -> None:
        """Stop accepting keys, drop delayed ones, and wake every waiting worker to exit."""
        self._shutting_down = True
        for handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        self._due.clear()
        self._wakeup.set()
        self._check_idle()

    async def stop(self, runner: asyncio.Task[None] | None, *, grace_s: float = 10.0) -> None:
        """Shut down and give `runner` (the task of `run`) `grace_s` to let its workers
        finish the keys they hold; cancel it after that."""
        self.shut_down()
        if runner is None:
            return
        try:
            await asyncio.wait_for(runner, timeout=grace_s)
        except (TimeoutError, asyncio.CancelledError):
            runner.cancel()

    # --- workers ------------------------------------------------------------------------------

    async def run(self, sync: SyncFunction[K], *, workers: int = 1) -> None:
        """Run `workers` workers calling `sync(key)` until the queue is shut down."""
        tasks = [
            asyncio.create_task(self._worker(sync), name=f"{self.name}-worker-{i}") for i in range(workers)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    async def _worker(self, sync: SyncFunction[K]) -> None:
        while True:
            try:
                key = await self.get()
            except QueueShutDown:
                return
            started = time.monotonic()
            try:
                again = await sync(key)
            except asyncio.CancelledError:
                self.done(key)
                raise
            except Exception as exc:
                api = {"status": exc.status, "reason": exc.reason} if isinstance(exc, KubeError) else {}
                log.warning(
                    "Sync failed, retrying with backoff",
                    queue=self.name,
                    key=str(key),
                    error=str(exc) or type(exc).__name__,
                    retries=self.num_requeues(key),
                    exc_info=not isinstance(exc, (RetryableError, KubeError)),
                    **api,
                )
                self.done(key)
                self.add_rate_limited(key)
            else:
                self.done(key)
                self.forget(key)
                if again is not None:
                    self.add_after(key, again)
            finally:
                self._work_duration.observe(time.monotonic() - started)
