"""The promise draco makes about every pod it is responsible for: it makes progress, or it
says why not, and what it says is current.

A pod waits for draco while draco's scheduling gate is on it, or while it names draco as
its scheduler and is not bound. Such a pod, once it has not changed for `grace` seconds,
must carry a Warning Event saying why it waits (`WHY_REASONS`) that was recorded at or
after its last change; an Event from before the change is an answer to another question.
Changes to the pod's status subresource do not count (draco's own `PodScheduled`
condition is written beside its Event); changes to its metadata and spec do (a claim
recorded, an annotation applied again). A pod whose claims are allocated and wait for
their binding conditions says so (`BindingConditionsPending`), which is progress.

Pure: pods and events as the API lists them (events.k8s.io/v1) in, broken promises out.
The soak checks it every round, the stale-annotation e2e after each restart.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Final

from draco.api.constants import SCHEDULER_NAME, SCHEDULING_GATE

__all__ = ["WHY_REASONS", "last_change", "unexplained_waits", "waits_for_draco"]

#: The reasons that say why a pod waits: kube-scheduler's (FailedScheduling), upstream's
#: resourceclaim controller's (FailedResourceClaimCreation), draco's for an unreadable
#: claims annotation, and binding conditions being waited for (the claims are allocated).
WHY_REASONS: Final = frozenset(
    {"FailedScheduling", "FailedResourceClaimCreation", "InvalidResourceClaims", "BindingConditionsPending"}
)

#: managedFields and creation times have whole seconds; Events have microseconds.
_SLACK_S: Final = 1.0


def waits_for_draco(pod: Mapping[str, Any]) -> bool:
    """The pod is draco's to place now: gated by draco, or naming draco and unbound."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if any(g.get("name") == SCHEDULING_GATE for g in spec.get("schedulingGates") or []):
        return True
    return spec.get("schedulerName") == SCHEDULER_NAME and not spec.get("nodeName")


def _time(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def last_change(pod: Mapping[str, Any]) -> float:
    """When the pod's metadata or spec last changed (its status aside), in epoch seconds."""
    meta = pod.get("metadata") or {}
    times = [_time(meta.get("creationTimestamp"))]
    times += [
        _time(f.get("time")) for f in meta.get("managedFields") or [] if f.get("subresource") != "status"
    ]
    return max((t for t in times if t is not None), default=0.0)


def _observed(event: Mapping[str, Any]) -> float:
    """When an Event (events.k8s.io/v1) was last observed."""
    series = event.get("series") or {}
    times = [
        _time(series.get("lastObservedTime")),
        _time(event.get("eventTime")),
        _time(event.get("deprecatedLastTimestamp")),
    ]
    return max((t for t in times if t is not None), default=0.0)


def unexplained_waits(
    pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]], *, now: float, grace: float
) -> dict[str, str]:
    """uid -> what is wrong, for each pod that waits for draco, has not changed for `grace`
    seconds, and carries no Warning Event of `WHY_REASONS` recorded since its last change."""
    latest: dict[str, float] = {}
    for event in events:
        if event.get("type") != "Warning" and event.get("reason") != "BindingConditionsPending":
            continue
        if event.get("reason") not in WHY_REASONS:
            continue
        uid = str((event.get("regarding") or {}).get("uid") or "")
        latest[uid] = max(latest.get(uid, 0.0), _observed(event))
    broken: dict[str, str] = {}
    for pod in pods:
        if not waits_for_draco(pod):
            continue
        meta = pod.get("metadata") or {}
        uid, changed = str(meta.get("uid", "")), last_change(pod)
        if now - changed < grace:
            continue
        told = latest.get(uid)
        if told is None:
            why = "has no Event saying why it waits"
        elif told < changed - _SLACK_S:
            why = "has no Event saying why it waits since its last change"
        else:
            continue
        broken[uid] = (
            f"pod {meta.get('namespace', '')}/{meta.get('name', '')} (uid {uid}) waits for draco, "
            f"unchanged for {now - changed:.0f}s, and {why}"
        )
    return broken
