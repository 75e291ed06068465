"""CPU-bound pure work (CEL selectors, allocator searches) run off the event loop.

One operator process serves probes, admission, watches and every controller on one
asyncio loop. A DeviceClass selector can legally cost milliseconds per device, and with
thousands of devices evaluating it is tens of seconds of pure Python: on the loop that is
tens of seconds without `/healthz`, webhooks or any other allocation. So such work runs
in a small thread pool, in slices:

- :meth:`Offloader.run` runs one call in the pool (and, if the caller is cancelled, sets
  the call's stop flag and waits for the thread before the cancellation goes on, so a
  caller never leaves a thread working on state it is about to change);
- :meth:`Offloader.warm` evaluates selectors into a :class:`SelectorCache` slice by slice
  (each slice at most ``slice_s`` of work), so that the allocator, run afterwards, finds
  every answer cached; the cache only remembers answers, it never changes them.

Why threads and not a process: the state the work reads (the inventory, the cache) lives
here, and copying 10,000+ devices to another process per attempt costs more than it
saves. Pure-Python work in a thread still holds the GIL, but CPython hands the GIL to a
waiting thread every switch interval (``sys.getswitchinterval()``, 5 ms by default), so
the loop gets to run every few milliseconds instead of once the work is done:
`benchmarks/stall.py` measures what that gives `/healthz`.

A :class:`Deadline` is the wall-clock budget of one attempt; work polls it (never the
pure layers' own decisions: they only see a stop callback).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final, ParamSpec, TypeVar

from draco.allocator.devices import DeviceRecord
from draco.allocator.selectors import SelectorCache

__all__ = ["DEFAULT_SLICE_S", "DEFAULT_WORKERS", "Deadline", "Offloader", "shared_offloader"]

T = TypeVar("T")
P = ParamSpec("P")

#: Threads in the pool: work is serialized by the GIL anyway; two let a short search run
#: beside a long selector evaluation.
DEFAULT_WORKERS: Final = 2
#: Longest stretch of work between two visits to the loop (fairness between callers).
DEFAULT_SLICE_S: Final = 0.05


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

    def __init__(self, *, workers: int = DEFAULT_WORKERS, slice_s: float = DEFAULT_SLICE_S) -> None:
        self.slice_s = slice_s
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="draco-offload")

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

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


_SHARED: Offloader | None = None


def shared_offloader() -> Offloader:
    """The process's offloader (created on first use)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Offloader()
    return _SHARED
