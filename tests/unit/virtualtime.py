"""An event loop on virtual time, for tests of timing logic without sleeps.

The loop's clock (``loop.time()``, what ``call_later`` and ``asyncio.sleep`` use) starts
at 0 and moves only when the loop would otherwise wait: where a real loop would block in
its selector until the next timer is due, this one polls the real file descriptors
without blocking and jumps its clock to that timer. A test then ``await``s
``asyncio.sleep(seconds)`` to let that much virtual time pass, at once and exactly, and
what the code under test scheduled with the loop's timers runs as it would have.

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
