"""The pods and groups that wait for devices, as metrics computed when scraped.

What kube-scheduler's ``scheduler_pending_pods{queue}`` says of its queue, for draco's:
the gated pods this operator places and has not placed yet, read from the allocation's
own state when Prometheus asks (no per-pod series, nothing counted on the hot path):

- ``draco_pending_pods{queue, reason}``: ``queue`` as upstream's, ``active`` (to be tried
  or being tried), ``backoff`` (failed, its backoff not over), ``unschedulable`` (failed,
  waiting for a change that may help); ``reason``: the last attempt's result,
  ``unschedulable`` (no node fits), ``timeout`` (the attempt's budget ran out),
  ``binding_failed``, ``waiting`` (for claims to be made, for binding conditions, for a
  claim another pod is writing), ``conflict``, ``group`` (placed with its group), or ``untried``
  (not tried yet);
- ``draco_pending_pod_max_wait_seconds{reason}``: how long the longest-waiting of them has
  waited since it was created;
- ``draco_pending_groups{reason}`` and ``draco_pending_group_max_wait_seconds{reason}``:
  the same for groups placed all or nothing (a group waits since its first member was
  created; ``reason`` is the group's last attempt's, ``untried`` before one);
- ``draco_pending_pod_deviceclass_requests{deviceclass}``: how many of them ask for a
  class in a claim not allocated yet (what a class's exhaustion keeps waiting).

The name is draco's, not upstream's: these pods are gated, so kube-scheduler already counts
them as ``scheduler_pending_pods{queue="gated"}``; a sum over both would count them twice.

Read from the metrics server's thread while the loop changes the state: each dict is
copied whole first (one C-level copy under the GIL), and the cached bodies are never
changed in place (`draco.kube.informer`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from draco.api.bodies import ResourceClaimBody, meta_of
from draco.api.corebodies import PodBody
from draco.operator.scheduler.gangs import GROUP_PREFIX
from draco.scheduling.devicetaints import parse_time
from draco.scheduling.groups import group_of
from draco.scheduling.podclaims import device_class_names

if TYPE_CHECKING:
    from draco.operator.scheduler.waiting import WaitingPods

#: The reason of a pod or group not tried yet (Prometheus drops a label whose value is empty).
UNTRIED: Final = "untried"
#: Why a pod waits that its group is placed with (`AllocationService.sync_pod`).
GROUP_REASON: Final = "group"

__all__ = ["PendingCollector"]

#: Upstream's queues that draco's waiting has (no ``gated``: draco is what the gate waits for).
QUEUES: Final = ("active", "backoff", "unschedulable")


def _created(pod: Mapping[str, Any]) -> float | None:
    stamp = parse_time(meta_of(pod).get("creationTimestamp"))
    return stamp.timestamp() if stamp is not None else None


def _classes(claim: ResourceClaimBody | None) -> list[str]:
    """The DeviceClasses an unallocated claim asks for (every alternative of a prioritized list)."""
    if claim is None or (claim.get("status") or {}).get("allocation"):
        return []
    return device_class_names(claim.get("spec") or {})


class PendingCollector(Collector):
    """See the module docstring. What it reads of the allocation (its only seam with it):
    ``gated_pods``, the gated pods it places (`AllocationService.gated_pods`), ``waiters``,
    why and how each waits (`WaitingPods`), and ``claim(key)``, a pending claim's body
    (`PendingClaims.known`)."""

    def __init__(
        self,
        *,
        gated_pods: Mapping[str, PodBody],
        waiters: WaitingPods,
        claim: Callable[[str], ResourceClaimBody | None],
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.gated_pods = gated_pods
        self.waiters = waiters
        self.claim = claim
        self.wall_clock = wall_clock

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        tally = self._tally()
        yield _family(
            "draco_pending_pods",
            "Gated pods this operator has not placed yet, by queue and by the last attempt's result.",
            ("queue", "reason"),
            tally.pods,
        )
        yield _family(
            "draco_pending_pod_max_wait_seconds",
            "How long the longest-waiting pending pod has waited since it was created, by reason.",
            ("reason",),
            {(reason,): value for reason, value in tally.longest.items()},
        )
        group_counts: Counter[tuple[str]] = Counter({(UNTRIED,): 0})
        group_longest: dict[tuple[str], float] = {(UNTRIED,): 0.0}
        for key, first in tally.groups.items():
            label = (tally.reasons.get(key) or UNTRIED,)
            group_counts[label] += 1
            group_longest[label] = max(group_longest.get(label, 0.0), max(0.0, tally.now - first))
        yield _family(
            "draco_pending_groups",
            "Groups of pods placed all or nothing that wait whole, by the group's last attempt's result.",
            ("reason",),
            group_counts,
        )
        yield _family(
            "draco_pending_group_max_wait_seconds",
            "How long the longest-waiting group has waited since its first member was created, by reason.",
            ("reason",),
            group_longest,
        )
        yield _family(
            "draco_pending_pod_deviceclass_requests",
            "Pending pods whose unallocated claims ask for the DeviceClass.",
            ("deviceclass",),
            {(name,): count for name, count in tally.classes.items()},
        )

    def _tally(self) -> _Tally:
        """One pass over the gated pods, on copies of the allocation's dicts."""
        waiters = self.waiters
        gated = dict(self.gated_pods)
        waiting = dict(waiters.waiting)
        backoff = dict(waiters.backoff_until)
        tally = _Tally(now=self.wall_clock(), reasons=dict(waiters.reasons))
        moment = waiters.clock()
        for key, pod in gated.items():
            reason = tally.reasons.get(key) or UNTRIED
            if key not in waiting:
                queue = "active"
            elif backoff.get(key, 0.0) > moment:
                queue = "backoff"
            else:
                queue = "unschedulable"
            tally.pods[(queue, reason)] += 1
            created = _created(pod)
            waited = max(0.0, tally.now - created) if created is not None else 0.0
            tally.longest[reason] = max(tally.longest.get(reason, 0.0), waited)
            tally.classes.update(
                {name for claim_key in waiting.get(key, ()) for name in _classes(self.claim(claim_key))}
            )
            ref = group_of(pod) if reason == GROUP_REASON else None
            if ref is not None and created is not None:
                group = GROUP_PREFIX + ref.key
                tally.groups[group] = min(tally.groups.get(group, created), created)
        return tally


@dataclass
class _Tally:
    """What one pass over the gated pods counts (`PendingCollector._tally`)."""

    now: float
    reasons: dict[str, str]
    #: Zero series for pods not tried yet, so that a query finds the metric with nothing pending.
    pods: Counter[tuple[str, str]] = field(default_factory=lambda: Counter({(q, UNTRIED): 0 for q in QUEUES}))
    longest: dict[str, float] = field(default_factory=lambda: {UNTRIED: 0.0})
    classes: Counter[str] = field(default_factory=Counter)
    #: Each waiting group's key and its first member's creation.
    groups: dict[str, float] = field(default_factory=dict)


def _family(
    name: str, documentation: str, labels: tuple[str, ...], values: Mapping[Any, float]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for label_values, value in sorted(values.items()):
        family.add_metric(list(label_values), value)
    return family
