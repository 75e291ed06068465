"""Which gated pods wait, on what, and when they are tried again.

This is the one place that decides when a pod is tried again, like upstream's scheduling
queue:

- **Backoff.** Each failed attempt (no node fits, the attempt timed out, a binding failure
  condition turned True) counts one more failure; the pod is not tried again before
  1 s, 2 s, 4 s, 8 s, then 10 s have passed since (upstream's pod backoff,
  `draco.scheduling.wakeups.backoff_s`). Allocating the pod resets the count.
- **Targeted wake-ups.** A pod that cannot be placed now is not polled: it waits on the
  keys of its claims (a change to one of them wakes that pod alone, `claim_changed`) and
  on what its last attempt said it could use (its :class:`Interest`); a capacity change
  wakes only the pods it may help (`capacity_changed`, what upstream's queueing hints
  do). A pod woken while it backs off is queued for the moment its backoff ends, never
  sooner; several wake-ups meanwhile are one.
- **Changes during an attempt.** A change that lands while an attempt runs (after it read
  the view) reaches only the pods already waiting: on its first attempt, not this one. The
  attempt asks `missed` when it is done: if a capacity change since it began may help it,
  or one of its own claims changed (a node agent reported a binding condition meanwhile),
  it is queued again once its backoff ends (not at once: a claim that churns must not keep
  its neighbours busy). The same holds for a claim the lifecycle generates for the pod
  meanwhile (`claim_generated`): an attempt that read a stale claim-statuses annotation
  (a claim gone, or another's) before the new claim existed waits on the old name, and
  the new claim's arrival is what it must not miss.
- **Flush.** A pod whose attempt failed is tried again after ``FLUSH_S`` at the latest,
  whatever happened (upstream's podMaxInUnschedulablePodsDuration): a change the interest could
  not foresee costs a delay, never a pod stuck forever.

The clock is a parameter (``clock``): the unit tests drive it by hand.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from draco.scheduling.wakeups import (
    BACKOFF_MAX_S,
    UNKNOWN,
    CapacityChange,
    Interest,
    backoff_s,
)

__all__ = ["BACKOFF_MAX_S", "FLUSH_S", "WaitingPods"]

#: Upstream's podMaxInUnschedulablePodsDuration: a waiting pod is tried again after this
#: long even when no change woke it.
FLUSH_S: Final = 300.0
#: Changes remembered for the attempts that run meanwhile (an attempt that began before
#: the oldest one remembered assumes it missed something).
RECENT_CHANGES: Final = 256
#: Claims whose last change is remembered (beyond, all are forgotten at once, and an
#: attempt that began before assumes it missed a change of its claims).
RECENT_CLAIMS: Final = 65536


@dataclass
class _LastChanged:
    """When each key last changed, in `WaitingPods`' numbering of changes, bounded: past
    ``RECENT_CLAIMS`` keys it forgets them all and remembers only since when it knows."""

    _at: dict[str, int] = field(default_factory=dict)
    _known_since: int = 0

    def record(self, key: str, number: int) -> None:
        if len(self._at) >= RECENT_CLAIMS:
            self._at.clear()
            self._known_since = number
        self._at[key] = number

    def discard(self, key: str) -> None:
        self._at.pop(key, None)

    def since(self, mark: int, keys: frozenset[str] | tuple[str, ...]) -> bool:
        """Whether one of ``keys`` may have changed after ``mark``."""
        return mark < self._known_since or any(self._at.get(k, 0) > mark for k in keys)


@dataclass
class WaitingPods:
    """``enqueue(pod_key, delay)`` puts a pod back on the allocation work queue after
    ``delay`` seconds (0: now; the earliest of several pending deadlines wins)."""

    enqueue: Callable[[str, float], None]
    clock: Callable[[], float] = time.monotonic
    #: Pods that could not finish, and the claim keys whose change may unblock them.
    waiting: dict[str, frozenset[str]] = field(default_factory=dict)
    #: What each waiting pod could use (see the module docstring).
    interests: dict[str, Interest] = field(default_factory=dict)
    #: Why each waiting pod waits: its last attempt's result (what the metrics show).
    reasons: dict[str, str] = field(default_factory=dict)
    #: Failed attempts in a row per pod, and when its backoff ends (the clock's time).
    failures: dict[str, int] = field(default_factory=dict)
    backoff_until: dict[str, float] = field(default_factory=dict)
    #: The same as ``waiting``, by claim key: a claim change wakes its pods without a scan
    #: of every waiting pod (thousands wait during a burst, and every claim write is a change).
    _waiters: dict[str, set[str]] = field(default_factory=dict)
    #: Capacity changes as they happened, numbered (for `missed`).
    _recent: deque[tuple[int, CapacityChange]] = field(default_factory=lambda: deque(maxlen=RECENT_CHANGES))
    #: When each claim last changed (in the same numbering), and since when that is known.
    _claim_changes: _LastChanged = field(default_factory=_LastChanged)
    #: When a claim was last generated for each pod (the same numbering), and since when.
    _generated: _LastChanged = field(default_factory=_LastChanged)
    _changes: int = 0

    def __contains__(self, pod_key: object) -> bool:
        return pod_key in self.waiting

    # --- waiting ---------------------------------------------------------------------------------

    def wait(
        self, pod_key: str, claim_keys: frozenset[str], interest: Interest = UNKNOWN, *, reason: str = ""
    ) -> None:
        self.stop(pod_key)
        self.waiting[pod_key] = claim_keys
        self.interests[pod_key] = interest
        self.reasons[pod_key] = reason
        for claim_key in claim_keys:
            self._waiters.setdefault(claim_key, set()).add(pod_key)

    def stop(self, pod_key: str) -> None:
        self.interests.pop(pod_key, None)
        self.reasons.pop(pod_key, None)
        for claim_key in self.waiting.pop(pod_key, frozenset()):
            pods = self._waiters.get(claim_key)
            if pods is not None:
                pods.discard(pod_key)
                if not pods:
                    del self._waiters[claim_key]

    def forget(self, pod_key: str) -> None:
        self.stop(pod_key)
        self._generated.discard(pod_key)
        self.failures.pop(pod_key, None)
        self.backoff_until.pop(pod_key, None)

    # --- backoff ---------------------------------------------------------------------------------

    def failed(self, pod_key: str) -> tuple[int, float]:
        """Count one more failed attempt: (how many in a row, the backoff it starts)."""
        count = self.failures.get(pod_key, 0) + 1
        self.failures[pod_key] = count
        delay = backoff_s(count)
        self.backoff_until[pod_key] = self.clock() + delay
        return count, delay

    def succeeded(self, pod_key: str) -> None:
        """The pod was allocated: its next failure starts from the first step again (and
        the claims generated for it are no news to any attempt)."""
        self._generated.discard(pod_key)
        self.failures.pop(pod_key, None)
        self.backoff_until.pop(pod_key, None)

    def backoff_left(self, pod_key: str) -> float:
        """Seconds until the pod may be tried again (0: now)."""
        until = self.backoff_until.get(pod_key)
        if until is None:
            return 0.0
        left = until - self.clock()
        if left <= 0:
            del self.backoff_until[pod_key]
            return 0.0
        return left

    def wake(self, pod_key: str) -> None:
        """Try the pod again as soon as its backoff allows."""
        self.enqueue(pod_key, self.backoff_left(pod_key))

    # --- what wakes whom ---------------------------------------------------------------------

    def claim_changed(self, claim_key: str) -> None:
        self._changes += 1
        self._claim_changes.record(claim_key, self._changes)
        for pod_key in list(self._waiters.get(claim_key, ())):
            self.wake(pod_key)

    def claim_generated(self, pod_key: str) -> None:
        """The lifecycle made a claim for ``pod_key``: wake the pod if it waits, and tell an
        attempt of it that runs meanwhile (`missed`), which may have resolved the pod's
        claims before this one existed."""
        self._changes += 1
        self._generated.record(pod_key, self._changes)
        if pod_key in self.waiting:
            self.wake(pod_key)

    def note(self, change: CapacityChange) -> None:
        """Remember a change as it happens (for the attempts running meanwhile)."""
        self._changes += 1
        self._recent.append((self._changes, change))

    def mark(self) -> int:
        """Where an attempt begins in the sequence of changes (give it to `missed`)."""
        return self._changes

    def missed(
        self,
        mark: int,
        interest: Interest,
        claim_keys: frozenset[str] = frozenset(),
        *,
        pod_key: str | None = None,
    ) -> bool:
        """Whether a change since ``mark`` may help a pod with ``interest`` whose claims
        are ``claim_keys`` (and, given ``pod_key``, whether a claim was generated for it)."""
        if self._changes == mark:
            return False
        if pod_key is not None and self._generated.since(mark, (pod_key,)):
            return True
        if claim_keys and self._claim_changes.since(mark, claim_keys):
            return True
        recent = [(number, change) for number, change in self._recent if number > mark]
        if len(self._recent) == self._recent.maxlen and self._recent[0][0] > mark + 1:
            return True  # forgotten: assume it helps
        return any(interest.helped_by(change) for _, change in recent)

    def capacity_changed(self, change: CapacityChange) -> int:
        """Wake the waiting pods ``change`` may help (each after its backoff); how many."""
        woken = 0
        for pod_key, interest in list(self.interests.items()):
            if interest.helped_by(change):
                self.wake(pod_key)
                woken += 1
        return woken
