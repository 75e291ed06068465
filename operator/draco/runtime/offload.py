"""CPU-bound pure work (CEL selectors, allocator searches) run off the event loop.

One operator process serves probes, admission, watches and every controller on one
asyncio loop. A DeviceClass selector can legally cost milliseconds per device, and with
thousands of devices evaluating it is tens of seconds of pure Python: on the loop that is
tens of seconds without `/healthz`, webhooks or any other allocation. So:

- :meth:`Offloader.warm` evaluates selectors into a :class:`SelectorCache` in a worker
  *process*, in chunks of devices, and stores the answers in the cache as they come
  back; the allocator and the class status, run afterwards, find every answer cached
  (the cache only remembers answers, it never changes them);
- :meth:`Offloader.run` runs one call (a search over cached answers, an inventory build)
  in a small thread pool; if the caller is cancelled, it sets the call's stop flag and
  waits for the thread before the cancellation goes on, so a caller never leaves a thread
  working on state it is about to change.

Why a process for CEL: pure-Python work in a thread holds the GIL, and although CPython
hands the GIL to a waiting thread every switch interval (5 ms), every wake-up of the loop
(each socket read, each timer) waits for one: measured with `benchmarks/stall.py`, a
selector evaluated in threads left `/healthz` at a p99 of about 2 s and ordinary pods at
0.5/s on a loaded machine. The process takes only the devices' published content
(attributes, capacity) and the expressions, and answers per (expression, device content)
(`draco.runtime.celworker`); it is a plain child fed over pipes
(`draco.runtime.workerprocess`), which imports only the CEL environment and exits with
its operator. ``processes=0`` evaluates in the thread pool instead (tests, or where processes are not
wanted).

A :class:`Deadline` is the wall-clock budget of one attempt; work polls it between chunks
(never the pure layers' own decisions: they only see a stop callback).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Final, TypeVar

from draco.allocator.devices import DeviceRecord
from draco.allocator.selectors import SelectorCache
from draco.runtime.celworker import WARM_UP, ChunkAnswer, WireDevice, evaluate_chunk
from draco.runtime.workerprocess import WorkerProcesses

__all__ = [
    "DEFAULT_PROCESSES",
    "DEFAULT_SLICE_S",
    "DEFAULT_WORKERS",
    "Deadline",
    "Offloader",
    "shared_offloader",
    "shutdown_shared",
]

T = TypeVar("T")

#: Threads in the pool: work is serialized by the GIL anyway; two let a short search run
#: beside a long selector evaluation.
DEFAULT_WORKERS: Final = 2
#: Longest stretch of work between two visits to the loop (fairness between callers).
DEFAULT_SLICE_S: Final = 0.05
#: Worker processes evaluating CEL.
DEFAULT_PROCESSES: Final = 1
#: Devices sent to the worker process at a time; it answers after ``PROCESS_SLICE_S`` of
#: work at most (a costly selector) or the whole chunk (a cheap one).
CHUNK_DEVICES: Final = 256
#: The most devices sent at once (a cheap selector's chunks grow up to this).
MAX_CHUNK_DEVICES: Final = 4096
#: Longest work of the process per chunk: the granularity of deadlines and of turns.
PROCESS_SLICE_S: Final = 0.25

#: Chunks of one caller queued for the process at once.
PIPELINE: Final = 2


class Deadline:
    """A wall-clock budget (monotonic); ``None`` seconds: none."""

    __slots__ = ("at", "seconds")

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.at = None if seconds is None or seconds <= 0 else time.monotonic() + seconds

    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def remaining(self) -> float | None:
        return None if self.at is None else max(self.at - time.monotonic(), 0.0)


class Offloader:
    """A thread pool for pure work; see the module docstring."""

    def __init__(
        self,
        *,
        workers: int = DEFAULT_WORKERS,
        processes: int = DEFAULT_PROCESSES,
        slice_s: float = DEFAULT_SLICE_S,
    ) -> None:
        self.slice_s = slice_s
        self.processes = processes
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="draco-offload")
        self._pool: WorkerProcesses | None = None
        self._broken = False
        #: Device content id -> expressions a chunk in the process is evaluating on it.
        self._in_flight: dict[int, frozenset[str]] = {}
        self._progress: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def _process_pool(self) -> WorkerProcesses:
        if self._pool is not None and (self._broken or self._pool.broken):
            # The worker died (killed, out of memory): start another for the next call.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._broken = False
        if self._pool is None:
            self._pool = WorkerProcesses(self.processes, name="draco-cel")
        return self._pool

    async def run(self, fn: Callable[[threading.Event], T], /) -> T:
        """``fn(stop)`` in the pool. ``stop`` is set when the caller is cancelled; the
        cancellation waits until ``fn`` returns (it should poll ``stop``)."""
        stop = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(self._executor, fn, stop)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.wait({future})
            if not future.cancelled():
                future.exception()  # retrieved: its outcome does not matter any more
            raise

    async def warm(
        self,
        cache: SelectorCache,
        chains: Sequence[Sequence[str]],
        devices: Sequence[DeviceRecord],
        *,
        deadline: Deadline | None = None,
    ) -> bool:
        """Evaluate ``chains`` on ``devices`` into ``cache`` off the loop, in slices.

        True when every device is done; False when ``deadline`` expired first (what was
        evaluated stays cached, so the next attempt goes on from there)."""
        if not chains or not devices:
            return True
        if self.processes > 0:
            return await self._warm_in_process(cache, chains, devices, deadline=deadline)
        if not cache.missing(chains, devices):
            return True
        position = 0
        while position < len(devices):
            if deadline is not None and deadline.expired():
                return False
            start = position

            def one_slice(stop: threading.Event, start: int = start) -> int:
                until = time.monotonic() + self.slice_s

                def enough() -> bool:
                    return (
                        stop.is_set()
                        or time.monotonic() >= until
                        or (deadline is not None and deadline.expired())
                    )

                return cache.warm(chains, devices, start=start, stop=enough)

            position = await self.run(one_slice)
        return True

    async def _warm_in_process(
        self,
        cache: SelectorCache,
        chains: Sequence[Sequence[str]],
        devices: Sequence[DeviceRecord],
        *,
        deadline: Deadline | None,
    ) -> bool:
        todo = deque(cache.unevaluated(chains, devices))
        wire_chains = [tuple(chain) for chain in chains]
        expressions = frozenset(e for chain in chains for e in chain)
        pool = self._process_pool()
        size = CHUNK_DEVICES
        # Up to PIPELINE chunks of this caller in the process's queue at once, so that it
        # never idles while the loop gets around to sending the next one; the queue is
        # first come, first served between callers.
        outstanding: deque[tuple[asyncio.Future[ChunkAnswer], list[DeviceRecord]]] = deque()
        while todo or outstanding:
            if deadline is not None and deadline.expired():
                return False  # chunks still out store their answers when they come back
            while todo and len(outstanding) < PIPELINE:
                chunk: list[DeviceRecord] = []
                elsewhere: list[DeviceRecord] = []
                for _ in range(len(todo)):
                    if len(chunk) >= size:
                        break
                    device = todo.popleft()
                    if not cache.unevaluated(chains, [device], limit=1):
                        continue  # another caller's chunk answered it meanwhile
                    if expressions <= self._in_flight.get(device.cel_key, frozenset()):
                        elsewhere.append(device)  # in another caller's chunk now: later
                    else:
                        chunk.append(device)
                todo.extend(elsewhere)
                if not chunk:
                    break
                outstanding.append((self._send(cache, pool, wire_chains, expressions, chunk), chunk))
            if not outstanding:
                if not todo:
                    continue  # other callers answered what was left meanwhile: done
                # What is left is being evaluated for another caller: wait for answers.
                progress = self._progress_event()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        progress.wait(), timeout=deadline.remaining() if deadline is not None else None
                    )
                continue
            future, chunk = outstanding.popleft()
            done = (await future)[0]
            todo.extendleft(reversed(chunk[done:]))
            # A costly selector: send about what one slice gets through (less to copy); a
            # cheap one: send more at a time (fewer trips).
            size = min(size * 4, MAX_CHUNK_DEVICES) if done >= len(chunk) else max(2 * done, 4)
        return True

    def _progress_event(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        if self._progress is None or self._progress[0] is not loop:
            self._progress = (loop, asyncio.Event())
        return self._progress[1]

    def _send(
        self,
        cache: SelectorCache,
        pool: WorkerProcesses,
        chains: list[tuple[str, ...]],
        expressions: frozenset[str],
        chunk: list[DeviceRecord],
    ) -> asyncio.Future[ChunkAnswer]:
        """Queue one chunk for the process; its answers go into ``cache`` when they come
        back, whether or not the caller still waits for them."""
        wire: list[WireDevice] = [(d.cel_key, d.driver, d.pool, dict(d.raw)) for d in chunk]
        for device in chunk:
            self._in_flight[device.cel_key] = self._in_flight.get(device.cel_key, frozenset()) | expressions
        future = asyncio.get_running_loop().run_in_executor(
            pool, evaluate_chunk, chains, wire, PROCESS_SLICE_S
        )

        def store(finished: asyncio.Future[ChunkAnswer]) -> None:
            if not finished.cancelled() and isinstance(finished.exception(), BrokenProcessPool):
                self._broken = True
            for device in chunk:
                left = self._in_flight.get(device.cel_key, frozenset()) - expressions
                if left:
                    self._in_flight[device.cel_key] = left
                else:
                    self._in_flight.pop(device.cel_key, None)
            if not finished.cancelled() and finished.exception() is None:
                _, results, compile_status = finished.result()
                for expression, error in compile_status.items():
                    cache.note_compiled_elsewhere(expression, error)
                for expression, cel_key, result in results:
                    cache.store(expression, cel_key, result)
            if self._progress is not None:
                waiting, self._progress = self._progress[1], None
                waiting.set()

        future.add_done_callback(store)
        return future

    async def prestart(self) -> None:
        """Start the worker process now rather than at the first evaluation, and warm it:
        importing draco and the first CEL compile and evaluation there take a moment (0.4 s
        on a quiet machine, seconds on a busy one) that would otherwise count against the
        first allocation's wall-clock budget."""
        if self.processes > 0:
            await self.call_in_process(evaluate_chunk, *WARM_UP)

    async def call_in_process(self, fn: Callable[..., T], /, *args: Any) -> T:
        """``fn(*args)`` in the worker process (in a thread with ``processes=0``); ``fn``
        and its arguments must pickle (a module-level function of pure inputs, in a module
        the worker can import: not ``__main__``)."""
        if self.processes <= 0:
            return await self.run(lambda _stop: fn(*args))
        try:
            return await asyncio.get_running_loop().run_in_executor(self._process_pool(), fn, *args)
        except BrokenProcessPool:
            self._broken = True
            raise

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


_SHARED: Offloader | None = None


def shared_offloader() -> Offloader:
    """The process's offloader (created on first use)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Offloader()
    return _SHARED


def shutdown_shared() -> None:
    """Stop the process's offloader (at exit); the next use creates a new one."""
    global _SHARED
    if _SHARED is not None:
        _SHARED.shutdown()
        _SHARED = None
