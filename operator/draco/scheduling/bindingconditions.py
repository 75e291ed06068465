"""Where the devices of written claims stand with their binding conditions, pure.

A device that declares ``bindingConditions`` is not ready when its claim is written: the
node agent (or another driver component) reports, in the claim's ``status.devices``, each
condition True once the device is prepared, or one of the device's
``bindingFailureConditions`` True when it cannot be. Like upstream's DynamicResources
PreBind, a pod is bound only once every condition of every device of its claims is True;
a failure condition, or the conditions not met within the binding timeout since the
allocation (``allocationTimestamp``), clears the allocation and the pod starts over.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from draco.api.bodies import AllocationResultBody, ResourceClaimBody, ResourceClaimStatusBody, key_of

__all__ = ["BindingFailure", "BindingMet", "BindingWait", "binding_state", "needs_timestamp"]

Device = tuple[str, str, str]
#: Looked at again a little after the earliest deadline of what is still awaited.
_AFTER_DEADLINE_S: Final = 0.1


@dataclass(frozen=True, slots=True)
class BindingFailure:
    """A device's binding failed (a failure condition True, or the timeout run out): its
    claim is deallocated and the pod starts over. ``waited``: seconds since the allocation."""

    claim: ResourceClaimBody
    message: str
    status: Literal["failure", "timeout"]
    waited: float


@dataclass(frozen=True, slots=True)
class BindingMet:
    """Every binding condition is True; ``waited``: the longest wait since an allocation."""

    waited: float


@dataclass(frozen=True, slots=True)
class BindingWait:
    """Some conditions are not True yet: ``message`` says which; look again ``again`` s on."""

    message: str
    again: float


def needs_timestamp(allocations: Iterable[AllocationResultBody]) -> bool:
    """Whether some device of the allocations declares binding conditions (its allocation
    then carries ``allocationTimestamp``, from which the binding timeout counts)."""
    return any(
        r.get("bindingConditions")
        for allocation in allocations
        for r in (allocation.get("devices") or {}).get("results") or []
    )


def binding_state(
    claims: Sequence[ResourceClaimBody], *, timeout_s: float, now: datetime.datetime
) -> BindingFailure | BindingWait | BindingMet | None:
    """None when no device of ``claims`` declares binding conditions; :class:`BindingMet`
    when every one is True; else the first failure (a failure condition True, or the
    timeout run out), or what is awaited."""
    pending: list[str] = []
    deadline_in: float | None = None
    waited: float | None = None
    for claim in claims:
        status = claim.get("status") or {}
        allocation = status.get("allocation") or {}
        conditions = _device_conditions(status)
        for result in (allocation.get("devices") or {}).get("results") or []:
            wanted = result.get("bindingConditions") or []
            if not wanted:
                continue
            device = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
            have = conditions.get(device, {})
            failed = [c for c in result.get("bindingFailureConditions") or [] if have.get(c) == "True"]
            elapsed = _age_s(allocation.get("allocationTimestamp"), now)
            waited = elapsed if waited is None else max(waited, elapsed)
            if failed or elapsed >= timeout_s:
                why = (
                    f"binding failure condition {', '.join(failed)} is True"
                    + _failure_detail(status, device, failed)
                    if failed
                    else f"binding conditions were not met within {timeout_s:g}s"
                )
                return BindingFailure(
                    claim,
                    f"ResourceClaim {key_of(claim)} device {'/'.join(device)}: {why}; "
                    "the allocation was cleared and the pod is retried after its backoff",
                    "failure" if failed else "timeout",
                    elapsed,
                )
            missing = [c for c in wanted if have.get(c) != "True"]
            if missing:
                pending.append(f"{key_of(claim)} device {'/'.join(device)} waits for {', '.join(missing)}")
                left = max(timeout_s - elapsed, 0.0)
                deadline_in = left if deadline_in is None else min(deadline_in, left)
    if not pending:
        return None if waited is None else BindingMet(waited)
    return BindingWait(
        "waiting for binding conditions: " + "; ".join(pending), (deadline_in or 0.0) + _AFTER_DEADLINE_S
    )


def _age_s(stamp: object, now: datetime.datetime) -> float:
    if not isinstance(stamp, str) or not stamp:
        return 0.0
    try:
        then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (now - then).total_seconds()


def _device_conditions(status: ResourceClaimStatusBody) -> dict[Device, dict[str, str]]:
    found: dict[Device, dict[str, str]] = {}
    for entry in status.get("devices") or []:
        device = (entry.get("driver", ""), entry.get("pool", ""), entry.get("device", ""))
        found[device] = {str(c.get("type")): str(c.get("status")) for c in entry.get("conditions") or []}
    return found


def _failure_detail(status: ResourceClaimStatusBody, device: Device, failed: Sequence[str]) -> str:
    """The cause the node gave with the failure condition (its reason and message), so the
    pod's Event says why, not only that a condition turned True."""
    for entry in status.get("devices") or []:
        if (entry.get("driver", ""), entry.get("pool", ""), entry.get("device", "")) != device:
            continue
        for condition in entry.get("conditions") or []:
            if condition.get("type") in failed and condition.get("message"):
                return f" ({condition.get('reason') or 'no reason'}: {condition['message']})"
    return ""
