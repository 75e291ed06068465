"""`status.devices` entries: what the agent tells the cluster about a claim's devices.

Each allocated device of this agent's drivers gets one entry (driver, pool, device,
shareID) with a `Ready` condition, the binding conditions the allocation copied from the
device (`draco.dev/prepared` True once prepared; on failure the failure conditions True
instead) and `data.cdiDeviceIDs`. Entries of other drivers — or of this driver on other
nodes — are left exactly as they are; the caller writes the merged list with the claim's
resourceVersion, so a concurrent writer makes the write fail and be retried, never lost.

A prepared device whose driver could not make the runtime enforce everything (a GPU
share's memory) says so in its `Ready` condition's message. A prepared device that is
unhealthy now (its health taint, `health`) gets a `Healthy` condition, False, naming the
device and the cause; it goes when the device recovers.

Conditions keep their `lastTransitionTime` while their status does not change, so
re-running an idempotent prepare produces an identical list and no write at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from draco.agent.health import HEALTHY_CONDITION, UNHEALTHY_REASON, describe_problem
from draco.agent.prepare import DeviceOutcome
from draco.api.meta import format_time

__all__ = [
    "READY_CONDITION",
    "DeviceKey",
    "device_entries",
    "entry_key",
    "merge_device_statuses",
    "unhealthy_message",
]

READY_CONDITION: Final = "Ready"

EntryKey = tuple[str, str, str, str]
#: driver, pool, device.
DeviceKey = tuple[str, str, str]


def unhealthy_message(device: DeviceKey, problem: str) -> str:
    """`device gpu.nvidia.com/node-1/gpu-0 is unhealthy: XID 79 (GPU has fallen off the bus)`."""
    return f"device {'/'.join(device)} is unhealthy: {describe_problem(problem)}"


def entry_key(entry: Mapping[str, Any]) -> EntryKey:
    """The list-map key of `status.devices`: driver, pool, device, shareID."""
    return (
        str(entry.get("driver")),
        str(entry.get("pool")),
        str(entry.get("device")),
        str(entry.get("shareID") or ""),
    )


def _condition(
    type_: str,
    status: bool,
    *,
    reason: str,
    message: str,
    previous: Mapping[str, Mapping[str, Any]],
    now: str,
) -> dict[str, Any]:
    text = "True" if status else "False"
    old = previous.get(type_)
    since = (
        old["lastTransitionTime"]
        if old and old.get("status") == text and old.get("lastTransitionTime")
        else now
    )
    return {"type": type_, "status": text, "lastTransitionTime": since, "reason": reason, "message": message}


def device_entries(
    outcomes: Sequence[DeviceOutcome],
    *,
    existing: Sequence[Mapping[str, Any]],
    now: datetime,
    health: Mapping[DeviceKey, str] | None = None,
) -> list[dict[str, Any]]:
    """The entries for `outcomes`, reusing transition times from `existing` entries;
    `health` holds the problem (the health taint's value) of each unhealthy device."""
    stamp = format_time(now.replace(microsecond=0))
    before = {entry_key(e): e for e in existing}
    out = []
    for outcome in outcomes:
        result = outcome.result
        entry: dict[str, Any] = {
            "driver": result["driver"],
            "pool": result["pool"],
            "device": result["device"],
        }
        if result.get("shareID"):
            entry["shareID"] = result["shareID"]
        previous = {c["type"]: c for c in (before.get(entry_key(entry)) or {}).get("conditions") or []}
        ok = outcome.error is None
        reason = "Prepared" if ok else outcome.reason
        message = "; ".join(outcome.notes) if ok else outcome.error or ""
        conditions = [
            _condition(READY_CONDITION, ok, reason=reason, message=message, previous=previous, now=stamp)
        ]
        for name in result.get("bindingConditions") or []:
            conditions.append(
                _condition(name, ok, reason=reason, message=message, previous=previous, now=stamp)
            )
        for name in result.get("bindingFailureConditions") or []:
            conditions.append(
                _condition(name, not ok, reason=reason, message=message, previous=previous, now=stamp)
            )
        device: DeviceKey = (str(result["driver"]), str(result["pool"]), str(result["device"]))
        problem = (health or {}).get(device)
        if ok and problem:
            conditions.append(
                _condition(
                    HEALTHY_CONDITION,
                    False,
                    reason=UNHEALTHY_REASON,
                    message=unhealthy_message(device, problem),
                    previous=previous,
                    now=stamp,
                )
            )
        entry["conditions"] = conditions
        if ok:
            entry["data"] = {"cdiDeviceIDs": list(outcome.cdi_device_ids)}
        out.append(entry)
    return out


def merge_device_statuses(
    existing: Sequence[Mapping[str, Any]],
    mine: Sequence[Mapping[str, Any]],
    *,
    owned: Callable[[Mapping[str, Any]], bool],
) -> list[dict[str, Any]]:
    """`existing` without the entries `owned` says are ours, plus `mine`."""
    return [dict(e) for e in existing if not owned(e)] + [dict(e) for e in mine]
