"""The event loop's lag as a gauge: how long a callback posted to the loop waits to run.

Probes, admission and every controller share one loop; anything that holds it (a long
computation, a blocking call) delays all of them. ``draco_event_loop_lag_seconds`` makes
that visible. The sampler is a thread, not a task: it posts a callback to the loop every
``interval`` seconds and waits for it, updating the gauge while it waits, so a stalled
loop shows a growing lag on ``/metrics`` (served by its own thread) during the stall
rather than once the stall is over.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Final

from prometheus_client import Gauge, Histogram

from draco.runtime.metrics import REGISTRY

__all__ = ["EVENT_LOOP_LAG", "EVENT_LOOP_LAG_HISTOGRAM", "LoopLagSampler"]

#: Seconds between samples.
DEFAULT_INTERVAL_S: Final = 0.5

EVENT_LOOP_LAG = Gauge(
    "draco_event_loop_lag_seconds",
    "How long the last callback posted to the event loop waited before it ran (while it still "
    "waits: how long so far). Sampled every 0.5 s.",
    registry=REGISTRY,
)
EVENT_LOOP_LAG_HISTOGRAM = Histogram(
    "draco_event_loop_lag_sample_seconds",
    "Event loop lag samples (see draco_event_loop_lag_seconds).",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)


class LoopLagSampler:
    """Samples the lag of ``loop`` from a daemon thread until :meth:`stop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, interval: float = DEFAULT_INTERVAL_S) -> None:
        self.loop = loop
        self.interval = interval
        self.last: float = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="draco-loop-lag", daemon=True)

    def start(self) -> LoopLagSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            ran = threading.Event()
            posted = time.monotonic()
            try:
                self.loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # the loop is closed
                return
            while not ran.wait(self.interval):
                if self._stopping.is_set():
                    return
                EVENT_LOOP_LAG.set(time.monotonic() - posted)
            self.last = time.monotonic() - posted
            EVENT_LOOP_LAG.set(self.last)
            EVENT_LOOP_LAG_HISTOGRAM.observe(self.last)
