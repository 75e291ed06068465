"""An event loop on virtual time, for tests of timing logic without sleeps.

The loop's clock (``loop.time()``, what ``call_later`` and ``asyncio.sleep`` use) starts
at 0 and moves only when the loop would otherwise wait: where a real loop would block in
its selector until the next timer is due, this one polls the real file descriptors
without blocking and jumps its clock to that timer. A test then ``await``s
``asyncio.sleep(seconds)`` to let that much virtual time pass, at once and exactly, and
what the code under test scheduled with the loop's timers runs as it would have.

Work handed to threads (``loop.run_in_executor``, ``asyncio.to_thread``) takes real time:
while any is unfinished the clock stands still and the loop waits for it as a real loop
would, so a thread's work is never overtaken by timers it would have beaten.

    run_virtual(main())   # runs the coroutine on a fresh virtual-time loop
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")


class _Selector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self.loop is not None and self.loop.in_threads:
            # A thread's answer wakes the loop through its self-pipe; timers wait for it.
            return super().select(timeout)
        ready = super().select(0)
        if not ready and timeout and self.loop is not None:
            self.loop.advance(timeout)
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """See the module docstring."""

    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0
        #: Calls handed to threads and not answered yet.
        self.in_threads = 0

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
        future = super().run_in_executor(executor, func, *args)
        self.in_threads += 1

        def done(_: asyncio.Future[Any]) -> None:
            self.in_threads -= 1

        future.add_done_callback(done)
        return future

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()
