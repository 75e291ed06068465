"""The work queue keeps client-go's promises: dedup, one worker per key, backoff, delays."""

from __future__ import annotations

import asyncio

import pytest

from draco.runtime.metrics import REGISTRY
from draco.runtime.workqueue import QueueShutDown, RetryableError, WorkQueue


async def test_a_waiting_key_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue("t-dedup")
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert await queue.get() == "a"
    assert await queue.get() == "b"
    assert REGISTRY.get_sample_value("workqueue_depth", {"name": "t-dedup"}) == 0


async def test_a_key_added_while_processing_comes_back_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue("t-processing")
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    assert len(queue) == 0, "must not be handed to a second worker while the first holds it"
    queue.done(key)
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert queue.idle


async def test_backoff_doubles_and_is_capped() -> None:
    queue: WorkQueue[str] = WorkQueue("t-backoff", base_delay=0.01, max_delay=0.05)
    assert [queue.backoff(n) for n in range(5)] == [0.01, 0.02, 0.04, 0.05, 0.05]
    assert queue.backoff(10_000) == 0.05


async def test_rate_limited_adds_count_failures_until_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue("t-ratelimit", base_delay=0.001)
    queue.add_rate_limited("a")
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 2
    assert await asyncio.wait_for(queue.get(), 1) == "a"
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_add_after_waits_and_the_earliest_deadline_wins() -> None:
    queue: WorkQueue[str] = WorkQueue("t-after")
    queue.add_after("a", 10)
    queue.add_after("a", 0.02)
    assert "a" in queue and len(queue) == 0
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_run_retries_failures_and_honours_requeue_delays() -> None:
    queue: WorkQueue[str] = WorkQueue("t-run", base_delay=0.001)
    calls: list[str] = []

    async def sync(key: str) -> float | None:
        calls.append(key)
        if key == "flaky" and calls.count("flaky") < 3:
            raise RetryableError("not yet")
        if key == "poll" and calls.count("poll") < 2:
            return 0.01
        return None

    runner = asyncio.create_task(queue.run(sync, workers=3))
    queue.add("flaky")
    queue.add("poll")
    queue.add("plain")
    for _ in range(200):
        if calls.count("flaky") == 3 and calls.count("poll") == 2 and queue.idle:
            break
        await asyncio.sleep(0.01)
    assert calls.count("flaky") == 3
    assert calls.count("poll") == 2
    assert calls.count("plain") == 1
    assert queue.num_requeues("flaky") == 0, "a success forgets the failures"
    queue.shut_down()
    await asyncio.wait_for(runner, 1)
    assert (REGISTRY.get_sample_value("workqueue_retries_total", {"name": "t-run"}) or 0) == 2


async def test_a_key_is_never_processed_by_two_workers_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue("t-exclusive")
    active: set[str] = set()
    overlaps = 0
    done = 0

    async def sync(key: str) -> None:
        nonlocal overlaps, done
        if key in active:
            overlaps += 1
        active.add(key)
        await asyncio.sleep(0.01)
        active.discard(key)
        done += 1

    runner = asyncio.create_task(queue.run(sync, workers=4))
    for _ in range(5):
        queue.add("k")
        await asyncio.sleep(0.004)
    for _ in range(100):
        if queue.idle:
            break
        await asyncio.sleep(0.01)
    queue.shut_down()
    await asyncio.wait_for(runner, 1)
    assert overlaps == 0
    assert done >= 2


async def test_get_on_a_shut_down_queue_raises() -> None:
    queue: WorkQueue[str] = WorkQueue("t-shutdown")
    queue.shut_down()
    with pytest.raises(QueueShutDown):
        await queue.get()
    queue.add("ignored")
    assert len(queue) == 0


async def test_wait_idle_waits_for_running_queued_and_retrying_keys() -> None:
    """What the agent's tests and benchmarks wait on: nothing queued, running or scheduled."""
    queue: WorkQueue[str] = WorkQueue("t-idle", base_delay=0.05)
    seen: list[str] = []
    release = asyncio.Event()
    failed: set[str] = set()
    flaky_failed = asyncio.Event()

    async def sync(key: str) -> None:
        if key == "slow":
            await release.wait()
        if key == "flaky" and key not in failed:
            failed.add(key)
            flaky_failed.set()
            raise RuntimeError("first try fails")
        seen.append(key)

    await asyncio.wait_for(queue.wait_idle(), 1)  # a new queue is idle
    task = asyncio.create_task(queue.run(sync, workers=2))
    queue.add("slow")
    queue.add("flaky")
    idle = asyncio.create_task(queue.wait_idle())
    await asyncio.wait_for(flaky_failed.wait(), 5)
    await asyncio.sleep(0)  # let the waiter look: "slow" still runs, "flaky" waits for its retry
    assert not idle.done()
    release.set()
    await asyncio.wait_for(idle, 5)
    assert sorted(seen) == ["flaky", "slow"] and queue.idle
    queue.shut_down()
    await asyncio.wait_for(task, 5)
