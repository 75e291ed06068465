"""``kill -USR1 <pid>`` logs every asyncio task and where it waits.

An operator that stops making progress without using CPU is waiting on something that
will not come; its threads' stacks (py-spy) only show the idle event loop. The tasks'
own stacks say which await it is.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any, Final

from draco.logs import get_logger

__all__ = ["install_task_dump", "task_stacks"]

log = get_logger(__name__)

#: Enough to reach from a worker's loop down to the await that holds it.
MAX_FRAMES: Final = 40


def task_stacks() -> list[dict[str, object]]:
    """Every task of the running loop: its name and the awaits it is suspended in,
    outermost first (``Task.get_stack`` shows only the outermost coroutine)."""
    found: list[dict[str, object]] = []
    for task in asyncio.all_tasks():
        frames: list[str] = []
        awaiting: Any = task.get_coro()
        leaf: Any = awaiting
        while awaiting is not None and len(frames) < MAX_FRAMES:
            leaf = awaiting
            frame = getattr(awaiting, "cr_frame", None) or getattr(awaiting, "gi_frame", None)
            if frame is not None:
                frames.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
            awaiting = getattr(awaiting, "cr_await", None) or getattr(awaiting, "gi_yieldfrom", None)
        found.append({"task": task.get_name(), "stack": frames, "awaits": repr(leaf)[:200]})
    return sorted(found, key=lambda entry: str(entry["task"]))


def install_task_dump(loop: asyncio.AbstractEventLoop) -> None:
    """Log :func:`task_stacks` on SIGUSR1 (where the platform has it)."""
    if not hasattr(signal, "SIGUSR1"):
        return

    def dump() -> None:
        for entry in task_stacks():
            log.info("Task", **entry)

    loop.add_signal_handler(signal.SIGUSR1, dump)
