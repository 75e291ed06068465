"""Which pods a NoExecute device taint evicts, and when: the pure half of the
device-taint-eviction controller (upstream's `devicetainteviction`, draco's API).

Taints come from two places: the devices of ResourceSlices (only slices at the newest
generation of their pool count) and DeviceTaintRules, matched against the allocation
result's driver/pool/device (a rule without `deviceSelector` matches nothing; every set
selector field must be equal). Only the `NoExecute` effect evicts; `None`, `NoSchedule`
and unknown effects are informational here.

An allocated claim's eviction time is the minimum, over its devices and their NoExecute
taints, of the taint's `timeAdded` (or `timeAdded + min(tolerationSeconds)` when NoExecute
tolerations with seconds copied into the allocation result match it); a matching
NoExecute toleration without seconds tolerates the taint forever. Each taint must be
tolerated on its own. A pod's eviction time is the minimum over the claims it uses *and*
is reserved in: the claims of its `resource.draco.dev/claims` annotation (generated ones
owner-checked) and its extended-resource claims. Pods not scheduled yet (still gated, or
without `spec.nodeName`) are never evicted.

`EvictionState` keeps what the controller knows (pools, rules, allocated claims, pods
and the pending evictions, upstream's `deletePodAt`) and answers which pods an event
affects; it does no I/O and reads no clock: every time is passed in. The controller
(`draco.operator.devicetainteviction`) feeds it watch events and acts on its answers.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    EVICTION_IN_PROGRESS_CONDITION,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    TAINT_EFFECT_NO_EXECUTE,
    TAINT_EFFECT_NONE,
    TOLERATION_OP_EQUAL,
)
from draco.api.pools import at_newest, pool_of
from draco.api.tolerations import matches as toleration_matches
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaimsError,
    claim_statuses,
    controller_pod_uid,
    has_scheduling_gate,
    is_reserved_for,
    parse_pod_claims,
    resolve_claim,
)

__all__ = [
    "RULE_STATUS_PERIOD_S",
    "DeviceId",
    "Eviction",
    "EvictionState",
    "Origin",
    "Rule",
    "Taint",
    "Update",
    "claim_eviction",
    "evicting_taints",
    "is_pod_scheduled",
    "parse_time",
    "rule_condition",
    "rule_status_due",
    "tolerations_of",
]

Obj = dict[str, Any]
#: (driver, pool, device): how a device is named across the cluster.
DeviceId = tuple[str, str, str]

#: A rule's status is rewritten at most this often (upstream `ruleStatusPeriod`),
#: unless its generation changed.
RULE_STATUS_PERIOD_S: Final = 10.0
#: How many pods a `NoEffect` message names before it only counts the rest.
SIMULATION_PODS_NAMED: Final = 50

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


def tolerations_of(result: Mapping[str, Any]) -> tuple[Toleration, ...]:
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


def allocation_results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results: list[Mapping[str, Any]] = (allocation.get("devices") or {}).get("results") or []
    return results


def device_id(result: Mapping[str, Any]) -> DeviceId:
    return (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))


def claim_eviction(
    claim: Mapping[str, Any],
    *,
    slice_taints: Mapping[DeviceId, Sequence[TrackedTaint]],
    rules: Iterable[Rule],
) -> Eviction | None:
    """When pods using the allocated `claim` must be evicted, or None (upstream
    `claimEvictionTime`). `slice_taints` holds the NoExecute taints of published devices;
    of `rules`, those with the NoExecute effect count."""
    return _claim_eviction(claim, slice_taints, evicting_taints(rules))


def evicting_taints(rules: Iterable[Rule]) -> list[tuple[Rule, TrackedTaint]]:
    """The NoExecute rules with their taint, prepared once for many claims."""
    return [(rule, TrackedTaint(rule.taint, rule.origin)) for rule in rules if rule.evicts]


def _claim_eviction(
    claim: Mapping[str, Any],
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


# --- one pod -----------------------------------------------------------------------------------


def is_pod_scheduled(pod: Mapping[str, Any]) -> bool:
    """Bound to a node and past draco's scheduling gate: only such pods are evicted."""
    return bool((pod.get("spec") or {}).get("nodeName")) and not has_scheduling_gate(pod)


def is_extended_resource_claim(claim: Mapping[str, Any]) -> bool:
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"


def claims_in_use(
    pod: Mapping[str, Any],
    *,
    claims: Mapping[str, Mapping[str, Any]],
    extended: Iterable[Mapping[str, Any]] = (),
) -> list[str]:
    """Names of the allocated claims (`claims`: this namespace's, by name) the pod uses and
    is reserved in: its annotation's claims (generated ones must be controlled by the pod)
    and `extended`, the claims the pod controls, of which extended-resource ones count."""
    uid = (pod.get("metadata") or {}).get("uid")
    names: list[str] = []
    try:
        entries = parse_pod_claims(pod)
    except PodClaimsError:
        entries = []
    statuses = claim_statuses(pod)
    for entry in entries:
        try:
            resolved = resolve_claim(pod, entry, statuses=statuses)
        except ClaimNotCreatedError:
            continue  # not created yet: certainly not tainted
        if resolved.claim_name is None or resolved.claim_name in names:
            continue
        claim = claims.get(resolved.claim_name)
        if claim is None:
            continue  # unknown or not allocated
        if resolved.check_owner and controller_pod_uid(claim) != uid:
            continue
        if is_reserved_for(claim, pod):
            names.append(resolved.claim_name)
    for claim in extended:
        name = str((claim.get("metadata") or {}).get("name", ""))
        if (
            name not in names
            and name in claims
            and is_extended_resource_claim(claim)
            and controller_pod_uid(claim) == uid
            and is_reserved_for(claim, pod)
        ):
            names.append(name)
    return names


# --- the controller's knowledge ----------------------------------------------------------------


@dataclass(slots=True)
class _Slice:
    generation: int
    #: device name -> its NoExecute taints (with their index among all the device's taints).
    taints: dict[str, tuple[tuple[int, Taint], ...]]
    devices: tuple[str, ...]


@dataclass(slots=True)
class _Pool:
    slices: dict[str, _Slice] = field(default_factory=dict)

    def published(self, driver: str, pool: str) -> list[tuple[str, _Slice]]:
        """The pool's slices at its newest generation (by name)."""
        return at_newest(self.slices.items(), lambda item: ((driver, pool), item[1].generation))

    def tainted(self, driver: str, pool: str) -> dict[DeviceId, tuple[TrackedTaint, ...]]:
        found: dict[DeviceId, tuple[TrackedTaint, ...]] = {}
        for name, published in self.published(driver, pool):
            for device, taints in published.taints.items():
                tracked = tuple(
                    TrackedTaint(
                        taint, Origin(slice=name, driver=driver, pool=pool, device=device, index=index)
                    )
                    for index, taint in taints
                )
                found[(driver, pool, device)] = found.get((driver, pool, device), ()) + tracked
        return found

    def devices(self, driver: str, pool: str) -> Iterator[DeviceId]:
        for _, published in self.published(driver, pool):
            for device in published.devices:
                yield (driver, pool, device)


def _slice_of(obj: Mapping[str, Any]) -> tuple[tuple[str, str], str, _Slice]:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    pool, generation = pool_of(spec)
    created = parse_time(meta.get("creationTimestamp"))
    taints: dict[str, tuple[tuple[int, Taint], ...]] = {}
    names: list[str] = []
    for device in spec.get("devices") or []:
        name = str(device.get("name", ""))
        names.append(name)
        evicting = tuple(
            (index, Taint.from_json(raw, default_time=created))
            for index, raw in enumerate(device.get("taints") or [])
            if raw.get("effect") == TAINT_EFFECT_NO_EXECUTE
        )
        if evicting:
            taints[name] = evicting
    return pool, str(meta.get("name", "")), _Slice(generation=generation, taints=taints, devices=tuple(names))


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _trim_claim(claim: Mapping[str, Any]) -> Obj:
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    return {
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "uid", "annotations", "ownerReferences") if k in meta
        },
        "status": {k: status[k] for k in ("allocation", "reservedFor") if k in status},
    }


def _trim_pod(pod: Mapping[str, Any]) -> Obj:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return {
        "metadata": {
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "annotations": {
                k: annotations[k] for k in (CLAIMS_ANNOTATION, CLAIM_STATUSES_ANNOTATION) if k in annotations
            },
            **({"deletionTimestamp": meta["deletionTimestamp"]} if meta.get("deletionTimestamp") else {}),
        },
        "spec": {k: spec[k] for k in ("nodeName", "schedulingGates") if spec.get(k)},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


@dataclass(frozen=True, slots=True)
class Update:
    """A change of a pod's pending eviction: `eviction` None means it is no longer pending;
    `announce` False when that needs no "Cancelling deletion" (the pod is gone or going).
    `previous` is what was pending before (its rules' status may need a rewrite)."""

    pod: str
    uid: str
    eviction: Eviction | None
    previous: Eviction | None = field(default=None, compare=False)
    announce: bool = field(default=True, compare=False)


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


class EvictionState:
    """Pools, rules, allocated claims, pods and pending evictions (see the module docstring).

    Every `on_*` method takes one watch event and returns the keys (`ns/name`) of the pods
    whose eviction may have changed; `reconcile(keys)` then recomputes them and returns the
    pending evictions that were added, moved or cancelled.
    """

    def __init__(self) -> None:
        self.pools: dict[tuple[str, str], _Pool] = {}
        self._tainted: dict[tuple[str, str], dict[DeviceId, tuple[TrackedTaint, ...]]] = {}
        self.rules: dict[str, Rule] = {}
        #: Allocated claims by `ns/name` (trimmed), with their eviction.
        self.claims: dict[str, Obj] = {}
        self.claim_evictions: dict[str, Eviction] = {}
        self._claims_by_ns: defaultdict[str, dict[str, Obj]] = defaultdict(dict)
        self._claims_by_owner: defaultdict[str, set[str]] = defaultdict(set)
        self.pods: dict[str, Obj] = {}
        #: Pods that must go: key -> (uid, eviction). Upstream's `deletePodAt`.
        self.pending: dict[str, tuple[str, Eviction]] = {}

    # --- inputs ----------------------------------------------------------------------------

    def slice_taints(self) -> Mapping[DeviceId, Sequence[TrackedTaint]]:
        return _ChainedTaints(self._tainted)

    def on_slice(self, obj: Mapping[str, Any], *, deleted: bool) -> set[str]:
        pool_id, name, parsed = _slice_of(obj)
        pool = self.pools.setdefault(pool_id, _Pool())
        before = self._tainted.get(pool_id, {})
        if deleted:
            pool.slices.pop(name, None)
        else:
            # A slice may move between pools (rare): drop it from any other pool first.
            for other_id, other in self.pools.items():
                if other_id != pool_id and name in other.slices:
                    del other.slices[name]
                    self._retaint(other_id)
            pool.slices[name] = parsed
        after = self._retaint(pool_id)
        changed = {device for device in set(before) | set(after) if before.get(device) != after.get(device)}
        if not changed:
            return set()
        return self._recompute_claims(
            lambda claim: any(device_id(r) in changed for r in allocation_results(claim))
        )

    def _retaint(self, pool_id: tuple[str, str]) -> dict[DeviceId, tuple[TrackedTaint, ...]]:
        pool = self.pools.get(pool_id)
        if pool is None or not pool.slices:
            self.pools.pop(pool_id, None)
            self._tainted.pop(pool_id, None)
            return {}
        tainted = pool.tainted(*pool_id)
        if tainted:
            self._tainted[pool_id] = tainted
        else:
            self._tainted.pop(pool_id, None)
        return tainted

    def on_rule(self, obj: Mapping[str, Any], *, deleted: bool) -> set[str]:
        rule = Rule.from_object(obj)
        previous = self.rules.get(rule.name)
        if deleted:
            if previous is None:
                return set()
            del self.rules[rule.name]
            return self._recompute_claims(None) if previous.evicts else set()
        self.rules[rule.name] = rule
        if previous is not None and previous.same_spec(rule):
            return set()
        if not rule.evicts and (previous is None or not previous.evicts):
            return set()
        # Rule changes are rare: re-evaluate every allocated claim (as upstream).
        return self._recompute_claims(None)

    def on_claim(self, obj: Mapping[str, Any], *, deleted: bool) -> set[str]:
        key = _key(obj)
        old = self.claims.get(key)
        old_eviction = self.claim_evictions.get(key)
        affected = self._reserved_pods(old) if old is not None else set()
        self._drop_claim(key)
        if deleted or not (obj.get("status") or {}).get("allocation"):
            return affected
        claim = _trim_claim(obj)
        self.claims[key] = claim
        meta = claim["metadata"]
        self._claims_by_ns[meta.get("namespace", "")][meta.get("name", "")] = claim
        owner = controller_pod_uid(claim)
        if owner:
            self._claims_by_owner[owner].add(key)
        if old is not None and old["status"].get("allocation") == claim["status"]["allocation"]:
            eviction = old_eviction  # the allocation is immutable: nothing to recompute
        else:
            eviction = claim_eviction(claim, slice_taints=self.slice_taints(), rules=self.rules.values())
        if eviction is not None:
            self.claim_evictions[key] = eviction
        return affected | self._reserved_pods(claim)

    def _drop_claim(self, key: str) -> None:
        old = self.claims.pop(key, None)
        self.claim_evictions.pop(key, None)
        if old is None:
            return
        meta = old["metadata"]
        self._claims_by_ns[meta.get("namespace", "")].pop(meta.get("name", ""), None)
        if not self._claims_by_ns[meta.get("namespace", "")]:
            del self._claims_by_ns[meta.get("namespace", "")]
        owner = controller_pod_uid(old)
        if owner:
            self._claims_by_owner[owner].discard(key)
            if not self._claims_by_owner[owner]:
                del self._claims_by_owner[owner]

    def on_pod(self, obj: Mapping[str, Any], *, deleted: bool) -> set[str]:
        key = _key(obj)
        if deleted:
            self.pods.pop(key, None)
            return {key}
        trimmed = _trim_pod(obj)
        if self.pods.get(key) == trimmed:
            return set()
        self.pods[key] = trimmed
        return {key}

    def _reserved_pods(self, claim: Mapping[str, Any]) -> set[str]:
        namespace = (claim.get("metadata") or {}).get("namespace", "")
        return {
            f"{namespace}/{ref.get('name', '')}"
            for ref in (claim.get("status") or {}).get("reservedFor") or []
            if ref.get("resource") == "pods" and not ref.get("apiGroup")
        }

    def _recompute_claims(self, only: Callable[[Obj], bool] | None) -> set[str]:
        affected: set[str] = set()
        taints = self.slice_taints()
        evicting = evicting_taints(self.rules.values())
        for key, claim in self.claims.items():
            if only is not None and not only(claim):
                continue
            eviction = _claim_eviction(claim, taints, evicting)
            if eviction == self.claim_evictions.get(key):
                continue
            if eviction is None:
                self.claim_evictions.pop(key, None)
            else:
                self.claim_evictions[key] = eviction
            affected |= self._reserved_pods(claim)
        return affected

    # --- answers ---------------------------------------------------------------------------

    def claims_in_namespace(self, namespace: str) -> Mapping[str, Obj]:
        """Allocated claims of `namespace` by name."""
        return self._claims_by_ns.get(namespace, {})

    def pod_claims(self, key: str) -> list[str]:
        """Keys of the allocated claims pod `key` uses and is reserved in (for logs)."""
        pod = self.pods.get(key)
        if pod is None:
            return []
        namespace = pod["metadata"]["namespace"]
        owned = [self.claims[k] for k in self._claims_by_owner.get(pod["metadata"]["uid"], ())]
        in_namespace = self._claims_by_ns.get(namespace, {})
        return [f"{namespace}/{name}" for name in claims_in_use(pod, claims=in_namespace, extended=owned)]

    def pod_eviction(self, key: str, *, evictions: Mapping[str, Eviction] | None = None) -> Eviction | None:
        """When pod `key` must be evicted, or None (upstream `podEvictionTime`)."""
        pod = self.pods.get(key)
        if pod is None or not is_pod_scheduled(pod):
            return None
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        namespace = pod["metadata"]["namespace"]
        in_namespace = self._claims_by_ns.get(namespace, {})
        owned = [self.claims[k] for k in self._claims_by_owner.get(pod["metadata"]["uid"], ())]
        claim_evictions = self.claim_evictions if evictions is None else evictions
        result: Eviction | None = None
        for name in claims_in_use(pod, claims=in_namespace, extended=owned):
            eviction = claim_evictions.get(f"{namespace}/{name}")
            if eviction is not None:
                result = eviction.join(result)
        return result

    def reconcile(self, keys: Iterable[str]) -> list[Update]:
        """Recompute the pods `keys`; the pending evictions that changed, in key order.

        A pod that is gone, being deleted or replaced by a namesake leaves `pending` without
        an announcement (upstream emits no cancellation for it); any other pod whose eviction
        became None is cancelled.
        """
        updates: list[Update] = []
        for key in sorted(set(keys)):
            pod = self.pods.get(key)
            current = self.pending.get(key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                if current is not None:
                    del self.pending[key]
                    updates.append(Update(key, current[0], None, previous=current[1], announce=False))
                continue
            uid = pod["metadata"]["uid"]
            if current is not None and current[0] != uid:
                del self.pending[key]  # a namesake replaced the pod we meant
                updates.append(Update(key, current[0], None, previous=current[1], announce=False))
                current = None
            eviction = self.pod_eviction(key)
            previous = current[1] if current is not None else None
            if eviction is None:
                if current is not None:
                    del self.pending[key]
                    updates.append(Update(key, uid, None, previous=previous))
                continue
            if current is None or current[1] != eviction:
                self.pending[key] = (uid, eviction)
                updates.append(Update(key, uid, eviction, previous=previous))
        return updates

    def evicted(self, key: str, uid: str) -> None:
        """The pod was deleted (or found gone): forget its pending eviction."""
        current = self.pending.get(key)
        if current is not None and current[0] == uid:
            del self.pending[key]

    def pending_for_rule(self, rule: Rule) -> dict[str, list[str]]:
        """Pods pending eviction because of `rule`: namespace -> pod names."""
        found: defaultdict[str, list[str]] = defaultdict(list)
        for key, (_, eviction) in sorted(self.pending.items()):
            pod = self.pods.get(key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                continue
            if rule.uid in eviction.rule_uids:
                found[pod["metadata"]["namespace"]].append(pod["metadata"]["name"])
        return dict(found)

    def claims_matching(self, rule: Rule) -> list[str]:
        """Keys of allocated claims holding a device that `rule` selects."""
        return [
            key
            for key, claim in self.claims.items()
            if any(rule.matches(device_id(r)) for r in allocation_results(claim))
        ]

    def simulate(self, rule: Rule) -> Simulation:
        """What `rule` would evict with the NoExecute effect, given everything else as it is
        (the `None` effect's condition). Nothing here changes."""
        # Taints add up, so the rule's own NoExecute taint joins each claim's eviction as it
        # is (the rule, not being NoExecute, is not part of it yet).
        only_rule = evicting_taints([rule.as_no_execute()])
        no_slice_taints: Mapping[DeviceId, Sequence[TrackedTaint]] = {}
        evictions = dict(self.claim_evictions)
        pods: set[str] = set()
        allocated = 0
        for key, claim in self.claims.items():
            selected = sum(1 for r in allocation_results(claim) if rule.matches(device_id(r)))
            if not selected:
                continue
            allocated += selected
            added = _claim_eviction(claim, no_slice_taints, only_rule)
            if added is not None:
                evictions[key] = added.join(evictions.get(key))
            pods |= self._reserved_pods(claim)
        would: defaultdict[str, list[str]] = defaultdict(list)
        for key in sorted(pods):
            pod = self.pods.get(key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                continue
            eviction = self.pod_eviction(key, evictions=evictions)
            if eviction is not None and rule.uid in eviction.rule_uids:
                would[pod["metadata"]["namespace"]].append(pod["metadata"]["name"])
        published = sum(
            1
            for pool_id, pool in self.pools.items()
            for device in pool.devices(*pool_id)
            if rule.matches(device)
        )
        return Simulation(
            published_devices=published,
            allocated_devices=allocated,
            pods={ns: tuple(names) for ns, names in sorted(would.items())},
        )


class _ChainedTaints(Mapping[DeviceId, Sequence[TrackedTaint]]):
    """The per-pool taint maps seen as one mapping by device (no copy)."""

    def __init__(self, by_pool: Mapping[tuple[str, str], Mapping[DeviceId, Sequence[TrackedTaint]]]) -> None:
        self._by_pool = by_pool

    def __getitem__(self, device: DeviceId) -> Sequence[TrackedTaint]:
        return self._by_pool[(device[0], device[1])][device]

    def get(self, device: DeviceId, default: Any = None) -> Any:
        pool = self._by_pool.get((device[0], device[1]))
        return default if pool is None else pool.get(device, default)

    def __iter__(self) -> Iterator[DeviceId]:
        for pool in self._by_pool.values():
            yield from pool

    def __len__(self) -> int:
        return sum(len(pool) for pool in self._by_pool.values())


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
