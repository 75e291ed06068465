"""A DeviceTaintRule's `EvictionInProgress` condition and when to write it: how many pods
a NoExecute rule evicts (or, for the `None` effect, would evict, naming them), at most one
write per `RULE_STATUS_PERIOD_S` unless the rule's generation changed. Pure.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from draco.api.constants import EVICTION_IN_PROGRESS_CONDITION, TAINT_EFFECT_NO_EXECUTE, TAINT_EFFECT_NONE
from draco.scheduling.devicetaints import Rule, parse_time

__all__ = ["RULE_STATUS_PERIOD_S", "Simulation", "rule_condition", "rule_status_due"]

#: A rule's status is rewritten at most this often (upstream `ruleStatusPeriod`),
#: unless its generation changed.
RULE_STATUS_PERIOD_S: Final = 10.0
#: How many pods a `NoEffect` message names before it only counts the rest.
SIMULATION_PODS_NAMED: Final = 50


@dataclass(frozen=True, slots=True)
class Simulation:
    """What a rule selects and would evict (the `None` effect's condition)."""

    published_devices: int
    allocated_devices: int
    #: namespace -> pod names, sorted.
    pods: Mapping[str, tuple[str, ...]]

    @property
    def pod_count(self) -> int:
        return sum(len(names) for names in self.pods.values())


# --- the rule's condition --------------------------------------------------------------------


def _count(n: int, one: str, many: str) -> str:
    return f"1 {one}" if n == 1 else f"{n} {many}"


def _namespaces(n: int) -> str:
    return "1 namespace" if n == 1 else f"{n} different namespaces"


def rule_condition(
    rule: Rule,
    *,
    pending: Mapping[str, Sequence[str]],
    evicted: int,
    simulation: Simulation | None = None,
) -> dict[str, Any]:
    """The `EvictionInProgress` condition `rule` should show, without `lastTransitionTime`
    (upstream's reasons and messages). `pending`: namespace -> pods pending eviction
    because of the rule (NoExecute); `simulation`: for the `None` effect; `evicted`: pods
    this controller process evicted because of the rule."""
    status, message = "False", ""
    if rule.taint.effect == TAINT_EFFECT_NO_EXECUTE:
        count = sum(len(names) for names in pending.values())
        if count:
            status, reason = "True", "PodsPendingEviction"
            verb = "needs" if count == 1 else "need"
            message = f"{_count(count, 'pod', 'pods')} {verb} to be evicted in {_namespaces(len(pending))}."
        elif evicted:
            reason = "Completed"
        else:
            reason = "NotStarted"
    elif rule.taint.effect == TAINT_EFFECT_NONE:
        reason = "NoEffect"
        sim = simulation or Simulation(0, 0, {})
        message = (
            f"{_count(sim.published_devices, 'published device', 'published devices')} selected. "
            f"{_count(sim.allocated_devices, 'allocated device', 'allocated devices')} selected. "
            f"{_count(sim.pod_count, 'pod', 'pods')} would be evicted in {_namespaces(len(sim.pods))} "
            "if the effect was NoExecute"
        )
        message += f": {_name_pods(sim.pods)}." if sim.pods else "."
        message += " Kept up to date while the effect is None."
    else:
        reason = "OtherEffect"
        message = "Eviction only happens for the NoExecute effect."
    if evicted:
        message = (message + " " if message else "") + (
            f"{_count(evicted, 'pod', 'pods')} evicted since starting the controller."
        )
    return {
        "type": EVICTION_IN_PROGRESS_CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": rule.generation,
    }


def _name_pods(pods: Mapping[str, Sequence[str]]) -> str:
    """`ns-a (p1, p2), ns-b (p3)`, naming at most `SIMULATION_PODS_NAMED` pods."""
    parts: list[str] = []
    named = 0
    total = sum(len(names) for names in pods.values())
    for namespace, names in pods.items():
        room = SIMULATION_PODS_NAMED - named
        if room <= 0:
            break
        shown = list(names[:room])
        named += len(shown)
        parts.append(f"{namespace} ({', '.join(shown)}{', ...' if len(shown) < len(names) else ''})")
    text = ", ".join(parts)
    if named < total:
        text += f" and {total - named} more"
    return text


def rule_status_due(
    rule: Rule, desired: Mapping[str, Any], *, now: datetime.datetime
) -> tuple[bool, float | None]:
    """Whether to write `desired` now, and else how long to wait (None: nothing to write).

    At most one write per `RULE_STATUS_PERIOD_S` (counted from the condition's
    `lastTransitionTime`, bumped on every write) unless the generation changed.
    """
    current = rule.condition
    if current is None:
        return True, None
    same = all(current.get(k) == v for k, v in desired.items())
    if same:
        return False, None
    if current.get("observedGeneration") == rule.generation:
        written = parse_time(current.get("lastTransitionTime"))
        if written is not None:
            since = (now - written).total_seconds()
            if 0 <= since < RULE_STATUS_PERIOD_S:
                return False, RULE_STATUS_PERIOD_S - since
    return True, None
