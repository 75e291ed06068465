"""Which gated pods wait, on what, and when they are tried again.

A pod that cannot be placed now is not polled: it waits on the keys of its claims (a
change to one of them wakes that pod alone, `claim_changed`) and on the cluster's capacity
(`retry_all`, coalesced by the controller). An attempt that ran out of its wall-clock
budget is retried after a delay that doubles per consecutive time-out, up to upstream's
cap (`timed_out`).

This is the one place that decides when a pod is tried again: a per-pod backoff for other
outcomes, or a requeue targeted at more kinds of change, belong here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

__all__ = ["TIMEOUT_BACKOFF_MAX_S", "TIMEOUT_BACKOFF_S", "WaitingPods"]

#: Retry delays after timed-out attempts: first, doubling up to the cap.
TIMEOUT_BACKOFF_S: Final = 1.0
#: Upstream's scheduler caps a pod's backoff at 10 s (podMaxBackoffSeconds); so does draco: a
#: timed-out attempt keeps its work, so the next one is never wasted.
TIMEOUT_BACKOFF_MAX_S: Final = 10.0


@dataclass
class WaitingPods:
    """``enqueue(pod_key)`` puts a pod back on the allocation work queue."""

    enqueue: Callable[[str], None]
    #: Pods that could not finish, and the claim keys whose change may unblock them.
    waiting: dict[str, frozenset[str]] = field(default_factory=dict)
    #: The same, by claim key: a claim change wakes its pods without a scan of every
    #: waiting pod (thousands wait during a burst, and every claim write is a change).
    _waiters: dict[str, set[str]] = field(default_factory=dict)
    #: Consecutive timed-out attempts per pod.
    timeouts: dict[str, int] = field(default_factory=dict)

    def __contains__(self, pod_key: object) -> bool:
        return pod_key in self.waiting

    def wait(self, pod_key: str, claim_keys: frozenset[str]) -> None:
        self.stop(pod_key)
        self.waiting[pod_key] = claim_keys
        for claim_key in claim_keys:
            self._waiters.setdefault(claim_key, set()).add(pod_key)

    def stop(self, pod_key: str) -> None:
        for claim_key in self.waiting.pop(pod_key, frozenset()):
            pods = self._waiters.get(claim_key)
            if pods is not None:
                pods.discard(pod_key)
                if not pods:
                    del self._waiters[claim_key]

    def claim_changed(self, claim_key: str) -> None:
        for pod_key in list(self._waiters.get(claim_key, ())):
            self.enqueue(pod_key)

    def retry_all(self) -> None:
        for pod_key in list(self.waiting):
            self.enqueue(pod_key)

    def timed_out(self, pod_key: str) -> tuple[int, float]:
        """Count one more timed-out attempt: (how many in a row, the delay before the next)."""
        count = self.timeouts.get(pod_key, 0) + 1
        self.timeouts[pod_key] = count
        return count, min(TIMEOUT_BACKOFF_S * 2 ** (count - 1), TIMEOUT_BACKOFF_MAX_S)

    def not_timed_out(self, pod_key: str) -> None:
        self.timeouts.pop(pod_key, None)

    def forget(self, pod_key: str) -> None:
        self.stop(pod_key)
        self.timeouts.pop(pod_key, None)
