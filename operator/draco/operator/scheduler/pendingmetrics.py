"""The pods and groups that wait for devices, as metrics computed when scraped.

What kube-scheduler's ``scheduler_pending_pods{queue}`` says of its queue, for draco's:
the gated pods this operator places and has not placed yet, read from the allocation's
own state when Prometheus asks (no per-pod series, nothing counted on the hot path):

- ``draco_pending_pods{queue, reason}``: ``queue`` as upstream's, ``active`` (to be tried
  or being tried), ``backoff`` (failed, its backoff not over), ``unschedulable`` (failed,
  waiting for a change that may help); ``reason``: the last attempt's result,
  ``unschedulable`` (no node fits), ``timeout`` (the attempt's budget ran out),
  ``binding_failed``, ``waiting`` (for claims to be made, for binding conditions, for a
  claim another pod is writing), ``conflict``, ``group`` (placed with its group), or ``""``
  (not tried yet);
- ``draco_pending_pod_max_wait_seconds{reason}``: how long the longest-waiting of them has
  waited since it was created;
- ``draco_pending_groups{reason}`` and ``draco_pending_group_max_wait_seconds{reason}``:
  the same for groups placed all or nothing (a group waits since its first member was
  created; ``reason`` is the group's last attempt's, ``""`` before one);
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
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from draco.api.bodies import meta_of
from draco.operator.scheduler.gangs import GROUP_PREFIX
from draco.scheduling.devicetaints import parse_time
from draco.scheduling.groups import group_of

if TYPE_CHECKING:
    from draco.operator.scheduler.allocation import AllocationService

#: Why a pod waits that its group is placed with (`AllocationService.sync_pod`).
GROUP_REASON: Final = "group"

__all__ = ["PendingCollector"]

#: Upstream's queues that draco's waiting has (no ``gated``: draco is what the gate waits for).
QUEUES: Final = ("active", "backoff", "unschedulable")


def _created(pod: Mapping[str, Any]) -> float | None:
    stamp = parse_time(meta_of(pod).get("creationTimestamp"))
    return stamp.timestamp() if stamp is not None else None


def _classes(claim: Mapping[str, Any] | None) -> set[str]:
    """The DeviceClasses an unallocated claim asks for (every alternative of a prioritized list)."""
    if claim is None or (claim.get("status") or {}).get("allocation"):
        return set()
    found: set[str] = set()
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        exactly = request.get("exactly") or {}
        if exactly.get("deviceClassName"):
            found.add(str(exactly["deviceClassName"]))
        found.update(
            str(s["deviceClassName"]) for s in request.get("firstAvailable") or () if s.get("deviceClassName")
        )
    return found


class PendingCollector(Collector):
    """See the module docstring."""

    def __init__(self, service: AllocationService, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.service = service
        self.wall_clock = wall_clock

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        service, waiters = self.service, self.service.waiters
        gated = dict(service.gated_pods)
        waiting = dict(waiters.waiting)
        reasons = dict(waiters.reasons)
        backoff = dict(waiters.backoff_until)
        now, moment = self.wall_clock(), waiters.clock()
        # Zero series for pods not tried yet, so that a query finds the metric with nothing pending.
        pods: Counter[tuple[str, str]] = Counter({(queue, ""): 0 for queue in QUEUES})
        longest: dict[str, float] = {"": 0.0}
        classes: Counter[str] = Counter()
        groups: dict[str, float] = defaultdict(lambda: now)
        for key, pod in gated.items():
            reason = reasons.get(key, "")
            if key not in waiting:
                queue = "active"
            elif backoff.get(key, 0.0) > moment:
                queue = "backoff"
            else:
                queue = "unschedulable"
            pods[(queue, reason)] += 1
            created = _created(pod)
            waited = max(0.0, now - created) if created is not None else 0.0
            longest[reason] = max(longest.get(reason, 0.0), waited)
            for claim_key in waiting.get(key, ()):
                for name in _classes(service.claims.known(claim_key)):
                    classes[name] += 1
            ref = group_of(pod) if reason == GROUP_REASON else None
            if ref is not None and created is not None:
                groups[GROUP_PREFIX + ref.key] = min(groups[GROUP_PREFIX + ref.key], created)
        yield _family(
            "draco_pending_pods",
            "Gated pods this operator has not placed yet, by queue and by the last attempt's result.",
            ("queue", "reason"),
            pods,
        )
        yield _family(
            "draco_pending_pod_max_wait_seconds",
            "How long the longest-waiting pending pod has waited since it was created, by reason.",
            ("reason",),
            {(reason,): value for reason, value in longest.items()},
        )
        group_counts: Counter[tuple[str]] = Counter({("",): 0})
        group_longest: dict[tuple[str], float] = {("",): 0.0}
        for key, first in groups.items():
            label = (reasons.get(key, ""),)
            group_counts[label] += 1
            group_longest[label] = max(group_longest.get(label, 0.0), max(0.0, now - first))
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
            {(name,): count for name, count in classes.items()},
        )


def _family(
    name: str, documentation: str, labels: tuple[str, ...], values: Mapping[Any, float]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for label_values, value in sorted(values.items()):
        family.add_metric(list(label_values), value)
    return family
