"""Pure work off the event loop: the thread pool, its stop flag, warming selectors in
slices under a deadline, and the event-loop-lag gauge."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time

import pytest

from draco.allocator import Inventory
from draco.allocator.devices import DeviceRecord
from draco.allocator.selectors import SelectorCache
from draco.runtime.looplag import LoopLagSampler
from draco.runtime.metrics import REGISTRY
from draco.runtime.offload import Deadline, Offloader

DRIVER = "gpu.example.com"
MODEL = f'device.attributes["{DRIVER}"].model == "a100"'
INDEX = f'device.attributes["{DRIVER}"].index < 2'


def inventory(cache: SelectorCache, *, devices: int = 6) -> Inventory:
    return Inventory.build(
        classes=[],
        slices=[
            {
                "metadata": {"name": "s"},
                "spec": {
                    "driver": DRIVER,
                    "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                    "nodeName": "n1",
                    "devices": [
                        {
                            "name": f"gpu-{i}",
                            "attributes": {
                                "model": {"string": "a100" if i % 2 else "h100"},
                                "index": {"int": i},
                            },
                        }
                        for i in range(devices)
                    ],
                },
            }
        ],
        cache=cache,
    )


def test_a_deadline_of_none_or_zero_never_expires() -> None:
    assert not Deadline(None).expired()
    assert not Deadline(0).expired()
    assert Deadline(None).remaining() is None


def test_a_spent_deadline_expires() -> None:
    deadline = Deadline(1e-9)
    while not deadline.expired():
        pass
    assert deadline.remaining() == 0.0


def test_run_runs_in_a_thread_while_the_loop_goes_on() -> None:
    offloader = Offloader()

    async def scenario() -> bool:
        loop_ran = threading.Event()

        def work(_stop: threading.Event) -> bool:
            # Only the loop can set this: the call would deadlock if it ran on the loop.
            return loop_ran.wait(timeout=30) and threading.current_thread() is not threading.main_thread()

        async def on_the_loop() -> None:
            await asyncio.sleep(0)
            loop_ran.set()

        result, _ = await asyncio.gather(offloader.run(work), on_the_loop())
        return result

    try:
        assert asyncio.run(scenario()) is True
    finally:
        offloader.shutdown()


def test_cancelling_the_caller_stops_the_work_and_waits_for_it() -> None:
    offloader = Offloader()
    finished = threading.Event()

    async def scenario() -> None:
        started = threading.Event()

        def work(stop: threading.Event) -> None:
            started.set()
            stop.wait(timeout=30)
            finished.set()

        task = asyncio.create_task(offloader.run(work))
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The cancellation went on only after the thread returned.
        assert finished.is_set()

    try:
        asyncio.run(scenario())
    finally:
        offloader.shutdown()


def test_warm_fills_the_cache_without_changing_answers() -> None:
    cold, warmed = SelectorCache(), SelectorCache()
    cold_inventory, warm_inventory = inventory(cold), inventory(warmed)
    offloader = Offloader(processes=0, slice_s=0.0)  # in threads, one device per slice
    try:
        assert asyncio.run(offloader.warm(warmed, [(MODEL, INDEX)], warm_inventory.devices)) is True
    finally:
        offloader.shutdown()
    evaluated = warmed.evaluations
    # Chain order: the index selector only ran on the devices the model selector accepted.
    assert evaluated == 6 + 3
    for cold_device, warm_device in zip(cold_inventory.devices, warm_inventory.devices, strict=True):
        for expression in (MODEL, INDEX):
            assert warmed.evaluate(expression, warm_device) == cold.evaluate(expression, cold_device)
    assert warmed.evaluations == evaluated + 3  # only INDEX on the rejected devices was missing
    assert not warmed.missing([(MODEL, INDEX)], warm_inventory.devices)


def test_warm_stops_at_the_deadline_and_keeps_what_it_did() -> None:
    cache = SelectorCache()
    devices = inventory(cache).devices
    offloader = Offloader(processes=0)
    try:
        spent = Deadline(1e-9)
        while not spent.expired():
            pass
        assert asyncio.run(offloader.warm(cache, [(MODEL,)], devices, deadline=spent)) is False
        assert cache.evaluations == 0
        assert cache.missing([(MODEL,)], devices)
    finally:
        offloader.shutdown()


def test_warm_in_a_process_gives_the_answers_evaluated_here() -> None:
    here, there = SelectorCache(), SelectorCache()
    here_devices, there_devices = inventory(here).devices, inventory(there).devices
    failing = f'device.attributes["{DRIVER}"].missing == 1'
    offloader = Offloader(processes=1)
    try:
        done = asyncio.run(offloader.warm(there, [(MODEL, INDEX), (failing,)], there_devices))
    finally:
        offloader.shutdown()
    assert done is True
    assert there.evaluations == 0  # nothing ran in this process
    assert not there.missing([(MODEL, INDEX), (failing,)], there_devices)
    for a, b in zip(here_devices, there_devices, strict=True):
        for expression in (MODEL, INDEX, failing):
            mine, theirs = here.evaluate(expression, a), there.evaluate(expression, b)
            if isinstance(mine, Exception):
                assert type(theirs) is type(mine)
                assert str(theirs) == str(mine)
            else:
                assert theirs == mine


def test_a_spent_deadline_stops_warming_in_a_process_before_it_starts() -> None:
    cache = SelectorCache()
    devices = inventory(cache).devices
    spent = Deadline(1e-9)
    while not spent.expired():
        pass
    offloader = Offloader(processes=1)
    try:
        assert asyncio.run(offloader.warm(cache, [(MODEL,)], devices, deadline=spent)) is False
    finally:
        offloader.shutdown()
    assert cache.missing([(MODEL,)], devices)


def test_cache_warm_resumes_where_it_stopped() -> None:
    cache = SelectorCache()
    devices = inventory(cache).devices
    calls = 0

    def after_two() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 2

    position = cache.warm([(MODEL,)], devices, stop=after_two)
    assert position == 2
    assert cache.evaluations == 2
    assert cache.warm([(MODEL,)], devices, start=position) == len(devices)
    assert cache.evaluations == len(devices)


def test_warm_skips_a_chain_that_does_not_compile() -> None:
    cache = SelectorCache()
    devices = inventory(cache).devices
    assert cache.warm([("device.driver ==",), (MODEL,)], devices) == len(devices)
    assert cache.evaluations == len(devices)
    assert not cache.missing([("device.driver ==",)], devices)


def lag() -> float:
    return REGISTRY.get_sample_value("draco_event_loop_lag_seconds") or 0.0


def test_the_lag_gauge_grows_while_the_loop_is_blocked() -> None:
    async def scenario() -> float:
        sampler = LoopLagSampler(asyncio.get_running_loop(), interval=0.02).start()
        try:
            # Block the loop (no await) until the sampler, from its thread, reports the lag.
            give_up = time.monotonic() + 30
            while lag() < 0.1 and time.monotonic() < give_up:
                time.sleep(0.005)  # noqa: ASYNC251  (blocking the loop is the point)
            seen = lag()
        finally:
            sampler.stop()
        return seen

    assert asyncio.run(scenario()) >= 0.1


def test_concurrent_warms_of_one_selector_share_the_work_and_both_finish() -> None:
    cache = SelectorCache()
    devices = inventory(cache, devices=40).devices
    offloader = Offloader(processes=1)

    async def both() -> list[bool]:
        return list(
            await asyncio.gather(
                offloader.warm(cache, [(MODEL,)], devices), offloader.warm(cache, [(MODEL, INDEX)], devices)
            )
        )

    try:
        assert asyncio.run(both()) == [True, True]
    finally:
        offloader.shutdown()
    assert not cache.missing([(MODEL,), (MODEL, INDEX)], devices)
    assert cache.evaluations == 0


def test_a_warm_whose_last_devices_another_caller_answered_finishes() -> None:
    # Three callers of one chain (allocation, class status, node capacity): each finds some
    # of its devices in another's chunk, waits for answers and, once they came, has nothing
    # left to send. It must finish then, not wait for answers that will never come.
    offloader = Offloader(processes=1)

    async def three(cache: SelectorCache, devices: list[DeviceRecord]) -> list[bool]:
        warms = [offloader.warm(cache, [(MODEL, INDEX)], devices) for _ in range(3)]
        return list(await asyncio.wait_for(asyncio.gather(*warms), 60))

    try:
        for _ in range(3):
            cache = SelectorCache()
            devices = inventory(cache, devices=600).devices
            assert asyncio.run(three(cache, devices)) == [True, True, True]
            assert not cache.missing([(MODEL, INDEX)], devices)
    finally:
        offloader.shutdown()


def test_a_dead_worker_process_is_replaced_on_the_next_call() -> None:
    import os
    import signal
    from concurrent.futures.process import BrokenProcessPool

    cache = SelectorCache()
    devices = inventory(cache).devices
    offloader = Offloader(processes=1)

    async def scenario() -> bool:
        worker = await offloader.call_in_process(os.getpid)
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):
            await offloader.call_in_process(os.getpid)
        assert await offloader.call_in_process(os.getpid) != worker
        return await offloader.warm(cache, [(MODEL,)], devices)

    try:
        assert asyncio.run(scenario()) is True
    finally:
        offloader.shutdown()
    assert not cache.missing([(MODEL,)], devices)


def test_a_worker_process_that_died_while_idle_is_replaced_for_the_next_warm() -> None:
    import os
    import signal

    cache = SelectorCache()
    devices = inventory(cache).devices
    offloader = Offloader(processes=1)

    try:
        worker = asyncio.run(offloader.call_in_process(os.getpid))
        os.kill(worker, signal.SIGKILL)
        give_up = time.monotonic() + 60
        while offloader._pool is not None and not offloader._pool.broken and time.monotonic() < give_up:
            time.sleep(0.01)  # until the pool saw its worker die, with nothing in flight
        assert asyncio.run(offloader.warm(cache, [(MODEL,)], devices)) is True
    finally:
        offloader.shutdown()
    assert not cache.missing([(MODEL,)], devices)


_ORPHAN_SCRIPT = """
import asyncio, os, sys, time
from draco.runtime.offload import Offloader

offloader = Offloader(processes=1)
print(asyncio.run(offloader.call_in_process(os.getpid)), flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may never reap an orphan)."""
    from pathlib import Path

    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_worker_process_exits_when_its_operator_is_killed() -> None:
    # SIGKILL gives the operator no chance to stop its pool: the worker must notice alone
    # (its stdin ends), or it stays forever.
    import os
    import signal
    import subprocess

    parent = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT], stdout=subprocess.PIPE, start_new_session=True
    )
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    try:
        assert _running(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 60
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(worker), "the worker process outlived its operator"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
