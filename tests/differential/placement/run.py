"""Running many cases through both systems at once: a few cases in flight per control plane.

Each case is put into both control planes (its nodes, slices, namespaces, bound pods and
allocated claims), then its incoming pod into both, then both outcomes are awaited,
judged, and the case's objects deleted. ``concurrency`` cases are in flight at a time; a
case that must be alone (``generator.exclusive``) waits until the others are done and
keeps new ones out until it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from . import render, rules
from .generator import Generator, Json, exclusive
from .judge import Verdict, judge
from .systems import System, scale


class CaseLock:
    """Shared for most cases, exclusive for those that must be alone; a waiting
    exclusive case keeps new shared ones out (it is not starved)."""

    def __init__(self) -> None:
        self.condition = asyncio.Condition()
        self.shared_holders = 0
        self.exclusive_held = False
        self.exclusive_waiting = 0

    @contextlib.asynccontextmanager
    async def hold(self, *, alone: bool) -> AsyncIterator[None]:
        async with self.condition:
            if alone:
                self.exclusive_waiting += 1
                await self.condition.wait_for(lambda: not self.exclusive_held and self.shared_holders == 0)
                self.exclusive_waiting -= 1
                self.exclusive_held = True
            else:
                await self.condition.wait_for(lambda: not self.exclusive_held and not self.exclusive_waiting)
                self.shared_holders += 1
        try:
            yield
        finally:
            async with self.condition:
                if alone:
                    self.exclusive_held = False
                else:
                    self.shared_holders -= 1
                self.condition.notify_all()


@dataclass
class Judged:
    index: int
    case: Json
    verdict: Verdict


def world_of(case: Json, tag: str) -> rules.World:
    allocated = [
        result
        for body, status in render.existing_claims(case, tag)
        for result in render.device_results({"status": status})
    ]
    return rules.world_of(
        nodes=render.nodes(case, tag),
        namespaces=render.namespaces(case, tag),
        pods=render.existing_pods(case, tag, "upstream"),
        slices=render.slices(case, tag),
        allocated=allocated,
    )


async def run_case(upstream: System, draco: System, case: Json, tag: str) -> Verdict:
    systems = (upstream, draco)
    timeout, grace, refused_grace = 60 * scale(), 3 * scale(), 10 * scale()
    try:
        await asyncio.gather(*(s.apply(case, tag) for s in systems))
        await asyncio.gather(*(s.submit(case, tag) for s in systems))
        outcomes = await asyncio.gather(
            *(
                s.outcome(case, tag, within_s=timeout, grace=grace, refused_grace=refused_grace)
                for s in systems
            )
        )
        world = world_of(case, tag)
        pod = render.incoming_pod(case, tag, "upstream")
        return judge(world, pod, case["claim"], outcomes[0], upstream.cycles(case, tag), outcomes[1])
    except Exception as exc:  # a case the harness could not run is a mismatch with its reason
        return Verdict(
            "harness: the case could not be run",
            True,
            [f"harness: {type(exc).__name__}"],
            {"error": "".join(traceback.format_exception(exc))[-4000:]},
        )
    finally:
        with contextlib.suppress(Exception):
            await asyncio.gather(*(s.cleanup(case, tag) for s in systems))


async def run_cases(
    upstream: System,
    draco: System,
    generator: Generator,
    indices: Iterable[int],
    *,
    concurrency: int,
    on_judged: Callable[[Judged], None],
) -> None:
    lock = CaseLock()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in indices:
        queue.put_nowait(index)

    async def worker() -> None:
        while True:
            try:
                index = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            case = generator.case(index)
            async with lock.hold(alone=exclusive(case)):
                verdict = await run_case(upstream, draco, case, f"c{index}")
            on_judged(Judged(index, case, verdict))

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}/{fifteen:.2f} on {os.cpu_count()} cores"


class Clock:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def seconds(self) -> float:
        return time.monotonic() - self.started
