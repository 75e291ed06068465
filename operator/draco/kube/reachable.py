"""Start-up calls that wait for the API server instead of exiting.

A process that exits because the API server did not answer comes back under its pod's
CrashLoopBackOff, which doubles up to five minutes: after an outage of seconds (the
server restarting, etcd paused), the operator would lead nothing for minutes and the
webhook would stay unregistered. So each process runs the calls it needs before it can
work (the version check, the capability probes, the first LISTs, the webhook's
registration) through `until_answered`, which waits out `APIUnavailableError` and
timeouts with a backoff like client-go's (0.5 s doubling to 10 s) and lets every other
error through: a server that answers "no" is not made to say "yes" by asking again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from draco.errors import APIUnavailableError
from draco.logs import get_logger

__all__ = ["until_answered"]

log = get_logger(__name__)

T = TypeVar("T")

#: The first wait after an unanswered call, and the longest.
FIRST_DELAY_S: Final = 0.5
MAX_DELAY_S: Final = 10.0


async def until_answered(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    first_delay_s: float = FIRST_DELAY_S,
    max_delay_s: float = MAX_DELAY_S,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """``await call()`` until the API server answers it; its result (or its error, when
    the error is not about the server being unreachable or not ready).

    Logs each failed try at warning with the delay before the next, and once at info when
    a call answers after failures, so an outage reads as a bounded stretch in the log."""
    delay = first_delay_s
    failures = 0
    while True:
        try:
            result = await call()
        except (APIUnavailableError, TimeoutError) as exc:
            failures += 1
            log.warning(
                "API server not answering; trying again",
                what=what,
                failures=failures,
                delay=delay,
                error=str(exc) or type(exc).__name__,
            )
            await sleep(delay)
            delay = min(delay * 2, max_delay_s)
            continue
        if failures:
            log.info("API server answered", what=what, failures=failures)
        return result
