"""Device taints and when they evict: a taint with its origin (a slice's device or a
DeviceTaintRule), the NoExecute tolerations copied into an allocation result, the rules
and what they select, and an allocated claim's eviction time.

An allocated claim's eviction time is the minimum, over its devices and their NoExecute
taints, of the taint's `timeAdded` (or `timeAdded + min(tolerationSeconds)` when NoExecute
tolerations with seconds copied into the allocation result match it); a matching
NoExecute toleration without seconds tolerates the taint forever. Each taint must be
tolerated on its own. Pure: no I/O, no clock (every time is passed in).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from draco.api.bodies import DeviceRequestAllocationResultBody, ResourceClaimBody
from draco.api.constants import EVICTION_IN_PROGRESS_CONDITION, TAINT_EFFECT_NO_EXECUTE, TOLERATION_OP_EQUAL
from draco.api.tolerations import matches as toleration_matches

__all__ = [
    "DeviceId",
    "Eviction",
    "Origin",
    "Rule",
    "Taint",
    "Toleration",
    "TrackedTaint",
    "allocation_results",
    "claim_eviction",
    "device_id",
    "evicting_taints",
    "eviction_of_claim",
    "parse_time",
    "tolerations_of",
]

#: (driver, pool, device): how a device is named across the cluster.
DeviceId = tuple[str, str, str]

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_time(value: object) -> datetime.datetime | None:
    """An RFC 3339 timestamp as the API writes it, in UTC; None when absent or unreadable."""
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


# --- taints, their origin, tolerations -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str
    #: `timeAdded`; a taint written without one (no admission webhook stamped it) counts
    #: from its object's creation, and failing that from the epoch (in effect at once).
    time_added: datetime.datetime

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], *, default_time: datetime.datetime | None) -> Taint:
        return cls(
            key=str(raw.get("key") or ""),
            value=str(raw.get("value") or ""),
            effect=str(raw.get("effect") or ""),
            time_added=parse_time(raw.get("timeAdded")) or default_time or _EPOCH,
        )


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a taint comes from: a DeviceTaintRule (`rule` set) or taint number `index` of
    a device in a ResourceSlice. Sorted as upstream: rules first by name, then
    driver/pool/device/index."""

    rule: str = ""
    rule_uid: str = ""
    slice: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    index: int = 0

    @property
    def sort_key(self) -> tuple[int, str, str, str, str, int]:
        if self.rule:
            return (0, self.rule, "", "", "", 0)
        return (1, self.driver, self.pool, self.device, self.slice, self.index)

    def __str__(self) -> str:
        if self.rule:
            return f"DeviceTaintRule {self.rule}"
        return f"ResourceSlice {self.slice} {self.driver}/{self.pool}/{self.device} taint #{self.index}"


@dataclass(frozen=True, slots=True)
class TrackedTaint:
    taint: Taint
    origin: Origin


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str
    seconds: int | None

    def matches(self, taint: Taint) -> bool:
        """Upstream `ToleratesTaint`: key (empty matches all), effect (empty matches all),
        then the value unless the operator is Exists."""
        return toleration_matches(
            key=self.key,
            operator=self.operator,
            value=self.value,
            effect=self.effect,
            taint_key=taint.key,
            taint_value=taint.value,
            taint_effect=taint.effect,
        )


def tolerations_of(result: DeviceRequestAllocationResultBody) -> tuple[Toleration, ...]:
    """The tolerations copied into one allocation result (`results[].tolerations`)."""
    found: list[Toleration] = []
    for raw in result.get("tolerations") or []:
        seconds = raw.get("tolerationSeconds")
        found.append(
            Toleration(
                key=str(raw.get("key") or ""),
                operator=str(raw.get("operator") or TOLERATION_OP_EQUAL),
                value=str(raw.get("value") or ""),
                effect=str(raw.get("effect") or ""),
                seconds=int(seconds) if isinstance(seconds, int) and not isinstance(seconds, bool) else None,
            )
        )
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Eviction:
    """When pods of a claim (or a pod) must go, and every taint that says so."""

    when: datetime.datetime
    reasons: tuple[Origin, ...]

    def join(self, other: Eviction | None) -> Eviction:
        if other is None:
            return self
        reasons = {origin.sort_key: origin for origin in (*self.reasons, *other.reasons)}
        return Eviction(
            when=min(self.when, other.when),
            reasons=tuple(reasons[key] for key in sorted(reasons)),
        )

    @property
    def rule_uids(self) -> frozenset[str]:
        return frozenset(origin.rule_uid for origin in self.reasons if origin.rule)

    def describe(self) -> str:
        return ", ".join(str(origin) for origin in self.reasons)


# --- rules -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """A DeviceTaintRule as the controller needs it (spec, identity, its condition)."""

    name: str
    uid: str
    generation: int
    #: (driver, pool, device), None per field when unset; None for no selector at all.
    selector: tuple[str | None, str | None, str | None] | None
    taint: Taint
    #: The `EvictionInProgress` condition the rule shows now, if any.
    condition: Mapping[str, Any] | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Rule:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        raw_selector = spec.get("deviceSelector")
        selector = None
        if isinstance(raw_selector, Mapping):
            selector = (raw_selector.get("driver"), raw_selector.get("pool"), raw_selector.get("device"))
        condition = next(
            (
                c
                for c in (obj.get("status") or {}).get("conditions") or []
                if c.get("type") == EVICTION_IN_PROGRESS_CONDITION
            ),
            None,
        )
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation") or 0),
            selector=selector,
            taint=Taint.from_json(
                spec.get("taint") or {}, default_time=parse_time(meta.get("creationTimestamp"))
            ),
            condition=condition,
        )

    @property
    def evicts(self) -> bool:
        return self.taint.effect == TAINT_EFFECT_NO_EXECUTE

    def matches(self, device: DeviceId) -> bool:
        """Upstream `ruleMatchesDevice`: no selector matches nothing; set fields must equal."""
        if self.selector is None:
            return False
        driver, pool, name = self.selector
        return (
            (driver is None or driver == device[0])
            and (pool is None or pool == device[1])
            and (name is None or name == device[2])
        )

    def same_spec(self, other: Rule) -> bool:
        return self.uid == other.uid and self.selector == other.selector and self.taint == other.taint

    @property
    def origin(self) -> Origin:
        return Origin(rule=self.name, rule_uid=self.uid)

    def as_no_execute(self) -> Rule:
        """This rule as if its effect were NoExecute (the `None` effect's simulation)."""
        taint = Taint(self.taint.key, self.taint.value, TAINT_EFFECT_NO_EXECUTE, self.taint.time_added)
        return Rule(self.name, self.uid, self.generation, self.selector, taint, self.condition)


# --- one claim ---------------------------------------------------------------------------------


def allocation_results(claim: ResourceClaimBody) -> list[DeviceRequestAllocationResultBody]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return (allocation.get("devices") or {}).get("results") or []


def device_id(result: DeviceRequestAllocationResultBody) -> DeviceId:
    return (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))


def claim_eviction(
    claim: ResourceClaimBody,
    *,
    slice_taints: Mapping[DeviceId, Sequence[TrackedTaint]],
    rules: Iterable[Rule],
) -> Eviction | None:
    """When pods using the allocated `claim` must be evicted, or None (upstream
    `claimEvictionTime`). `slice_taints` holds the NoExecute taints of published devices;
    of `rules`, those with the NoExecute effect count."""
    return eviction_of_claim(claim, slice_taints, evicting_taints(rules))


def evicting_taints(rules: Iterable[Rule]) -> list[tuple[Rule, TrackedTaint]]:
    """The NoExecute rules with their taint, prepared once for many claims."""
    return [(rule, TrackedTaint(rule.taint, rule.origin)) for rule in rules if rule.evicts]


def eviction_of_claim(
    claim: ResourceClaimBody,
    slice_taints: Mapping[DeviceId, Sequence[TrackedTaint]],
    evicting: Sequence[tuple[Rule, TrackedTaint]],
) -> Eviction | None:
    when: datetime.datetime | None = None
    reasons: dict[tuple[int, str, str, str, str, int], Origin] = {}
    for result in allocation_results(claim):
        device = device_id(result)
        taints = [tracked for rule, tracked in evicting if rule.matches(device)]
        published = slice_taints.get(device)
        if published:
            taints.extend(published)
        if not taints:
            continue
        tolerations = [t for t in tolerations_of(result) if t.effect == TAINT_EFFECT_NO_EXECUTE]
        for tracked in taints:
            at = _taint_eviction_time(tracked.taint, tolerations)
            if at is None:
                continue
            reasons[tracked.origin.sort_key] = tracked.origin
            when = at if when is None or at < when else when
    if when is None:
        return None
    return Eviction(when=when, reasons=tuple(reasons[key] for key in sorted(reasons)))


def _taint_eviction_time(taint: Taint, tolerations: Sequence[Toleration]) -> datetime.datetime | None:
    """When one taint evicts given the NoExecute tolerations; None if tolerated forever."""
    seconds: int | None = None
    for toleration in tolerations:
        if not toleration.matches(taint):
            continue
        if toleration.seconds is None:
            return None
        limit = max(0, toleration.seconds)
        seconds = limit if seconds is None else min(seconds, limit)
    if seconds is None:
        return taint.time_added
    return taint.time_added + datetime.timedelta(seconds=seconds)
