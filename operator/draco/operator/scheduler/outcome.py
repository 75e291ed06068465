"""The outcome of one allocation attempt (a pod's or a group's): what happened, and what
the attempt asks of the waiting (`waiting.py`): when to look again, what to wait on."""

from __future__ import annotations

from dataclasses import dataclass

from draco.scheduling.wakeups import UNKNOWN, Interest

__all__ = ["Outcome"]


@dataclass
class Outcome:
    result: str
    #: None: done (or waiting for an event); a float: call again after that many seconds.
    again: float | None = None
    #: Claim keys whose change should wake the pod while it waits.
    waits_on: frozenset[str] = frozenset()
    #: Which capacity changes may help it (`draco.scheduling.wakeups`).
    interest: Interest = UNKNOWN
