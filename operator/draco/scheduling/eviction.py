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

`EvictionState` keeps what the controller knows (pools, rules, allocated claims and the
pending evictions, upstream's `deletePodAt`) and answers which pods an event affects; it
does no I/O and reads no clock: every time is passed in. Pods it reads where it is told
(`PodLookup`: the operator's pod informer), keeping no copy of them; without one, it
keeps the pods handed to `on_pod`. The controller
(`draco.operator.devicetainteviction`) feeds it watch events and acts on its answers.

Split by concern: the taints, rules and a claim's eviction time are `devicetaints`; a
rule's condition and when to write it are `rulestatus`; the pods and the state are here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from draco.api.bodies import (
    ObjectMetaBody,
    ResourceClaimBody,
    ResourceClaimStatusBody,
    key_of,
    meta_of,
    reserved_for,
)
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    TAINT_EFFECT_NO_EXECUTE,
)
from draco.api.corebodies import PodBody, PodStatusBody
from draco.api.pools import at_newest, pool_of
from draco.scheduling.devicetaints import (
    DeviceId,
    Eviction,
    Origin,
    Rule,
    Taint,
    TrackedTaint,
    allocation_results,
    claim_eviction,
    device_id,
    evicting_taints,
    eviction_of_claim,
    parse_time,
    tolerations_of,
)
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaimsError,
    claim_statuses,
    controller_pod_uid,
    is_reserved_for,
    parse_pod_claims,
    resolve_claim,
    waits_for_draco,
)
from draco.scheduling.rulestatus import RULE_STATUS_PERIOD_S, Simulation, rule_condition, rule_status_due

# Taints and rule status live in `devicetaints` and `rulestatus`; what the controller
# reads of them is re-exported here, its one import.
__all__ = [
    "RULE_STATUS_PERIOD_S",
    "DeviceId",
    "Eviction",
    "EvictionState",
    "Origin",
    "PodLookup",
    "Rule",
    "Simulation",
    "Taint",
    "TrackedTaint",
    "Update",
    "allocation_results",
    "claim_eviction",
    "device_id",
    "evicting_taints",
    "is_pod_scheduled",
    "parse_time",
    "rule_condition",
    "rule_status_due",
    "tolerations_of",
]


# --- one pod -----------------------------------------------------------------------------------


def is_pod_scheduled(pod: PodBody) -> bool:
    """Bound to a node and past draco's scheduling gate: only such pods are evicted."""
    return bool((pod.get("spec") or {}).get("nodeName")) and not waits_for_draco(pod)


def is_extended_resource_claim(claim: ResourceClaimBody) -> bool:
    annotations = meta_of(claim).get("annotations") or {}
    return annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"


def claims_in_use(
    pod: PodBody,
    *,
    claims: Mapping[str, ResourceClaimBody],
    extended: Iterable[ResourceClaimBody] = (),
) -> list[str]:
    """Names of the allocated claims (`claims`: this namespace's, by name) the pod uses and
    is reserved in: its annotation's claims (generated ones must be controlled by the pod)
    and `extended`, the claims the pod controls, of which extended-resource ones count."""
    uid = meta_of(pod).get("uid")
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
        name = meta_of(claim).get("name", "")
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


def _trim_claim(claim: ResourceClaimBody) -> ResourceClaimBody:
    meta: Mapping[str, Any] = meta_of(claim)
    status: Mapping[str, Any] = claim.get("status") or {}
    return {
        "metadata": cast(
            ObjectMetaBody,
            {k: meta[k] for k in ("name", "namespace", "uid", "annotations", "ownerReferences") if k in meta},
        ),
        "status": cast(
            ResourceClaimStatusBody, {k: status[k] for k in ("allocation", "reservedFor") if k in status}
        ),
    }


def _trim_pod(pod: PodBody) -> PodBody:
    meta = meta_of(pod)
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    trimmed: PodBody = {
        "metadata": {
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "annotations": {
                k: annotations[k] for k in (CLAIMS_ANNOTATION, CLAIM_STATUSES_ANNOTATION) if k in annotations
            },
        },
        "spec": {},
        # The phase as the pod has it, None included: a change of it is a change.
        "status": cast(PodStatusBody, {"phase": (pod.get("status") or {}).get("phase")}),
    }
    if meta.get("deletionTimestamp"):
        trimmed["metadata"]["deletionTimestamp"] = meta["deletionTimestamp"]
    if spec.get("nodeName"):
        trimmed["spec"]["nodeName"] = spec["nodeName"]
    if spec.get("schedulingGates"):
        trimmed["spec"]["schedulingGates"] = spec["schedulingGates"]
    return trimmed


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


class PodLookup(Protocol):
    """Where the state reads pods by ``ns/name`` (the operator's pod informer)."""

    def get(self, key: str, /) -> PodBody | None: ...


class EvictionState:
    """Pools, rules, allocated claims, pods and pending evictions (see the module docstring).

    Every `on_*` method takes one watch event and returns the keys (`ns/name`) of the pods
    whose eviction may have changed; `reconcile(keys)` then recomputes them and returns the
    pending evictions that were added, moved or cancelled.
    """

    def __init__(self, pods: PodLookup | None = None) -> None:
        self.pools: dict[tuple[str, str], _Pool] = {}
        #: The pool each slice was last seen in (by slice name), to find a slice that moved.
        self._slice_pools: dict[str, tuple[str, str]] = {}
        self._tainted: dict[tuple[str, str], dict[DeviceId, tuple[TrackedTaint, ...]]] = {}
        self.rules: dict[str, Rule] = {}
        #: Allocated claims by `ns/name` (trimmed), with their eviction.
        self.claims: dict[str, ResourceClaimBody] = {}
        self.claim_evictions: dict[str, Eviction] = {}
        self._claims_by_ns: defaultdict[str, dict[str, ResourceClaimBody]] = defaultdict(dict)
        self._claims_by_owner: defaultdict[str, set[str]] = defaultdict(set)
        #: The pods handed to ``on_pod`` (trimmed), kept only when no lookup is given.
        self._fed_pods: dict[str, PodBody] | None = None
        if pods is None:
            fed: dict[str, PodBody] = {}
            self._fed_pods = fed
            pods = fed
        self.pods: PodLookup = pods
        #: Pods that must go: key -> (uid, eviction). Upstream's `deletePodAt`.
        self.pending: dict[str, tuple[str, Eviction]] = {}

    # --- inputs ----------------------------------------------------------------------------

    def slice_taints(self) -> Mapping[DeviceId, Sequence[TrackedTaint]]:
        return _ChainedTaints(self._tainted)

    def on_slice(self, obj: Mapping[str, Any], *, deleted: bool) -> set[str]:
        pool_id, name, parsed = _slice_of(obj)
        pool = self.pools.setdefault(pool_id, _Pool())
        before = self._tainted.get(pool_id, {})
        #: Devices of the pool the slice moved out of whose taints changed with it.
        moved: set[DeviceId] = set()
        if deleted:
            pool.slices.pop(name, None)
            if self._slice_pools.get(name) == pool_id:
                del self._slice_pools[name]
        else:
            # A slice may move between pools (rare): drop it from the one it was in first
            # (looked up, not searched for: a search over every pool per slice made the
            # start-up LIST of 5,000 single-slice pools quadratic).
            other_id = self._slice_pools.get(name)
            other = self.pools.get(other_id) if other_id is not None and other_id != pool_id else None
            if other_id is not None and other is not None and name in other.slices:
                old_before = self._tainted.get(other_id, {})
                del other.slices[name]
                old_after = self._retaint(other_id)
                moved = {d for d in set(old_before) | set(old_after) if old_before.get(d) != old_after.get(d)}
            self._slice_pools[name] = pool_id
            pool.slices[name] = parsed
        after = self._retaint(pool_id)
        changed = {device for device in set(before) | set(after) if before.get(device) != after.get(device)}
        changed |= moved
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

    def on_claim(self, obj: ResourceClaimBody, *, deleted: bool) -> set[str]:
        key = key_of(obj)
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
        if old is not None and old["status"].get("allocation") == claim["status"].get("allocation"):
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

    def on_pod(self, obj: PodBody, *, deleted: bool) -> set[str]:
        """A pod changed: the keys to reconcile (the lookup, when given, already holds
        the change; else the pod is kept here, and a change it does not read is none)."""
        key = key_of(obj)
        fed = self._fed_pods
        if fed is None:
            return {key}
        if deleted:
            fed.pop(key, None)
            return {key}
        trimmed = _trim_pod(obj)
        if fed.get(key) == trimmed:
            return set()
        fed[key] = trimmed
        return {key}

    def _reserved_pods(self, claim: ResourceClaimBody) -> set[str]:
        namespace = meta_of(claim).get("namespace", "")
        return {
            f"{namespace}/{ref.get('name', '')}"
            for ref in reserved_for(claim)
            if ref.get("resource") == "pods" and not ref.get("apiGroup")
        }

    def _recompute_claims(self, only: Callable[[ResourceClaimBody], bool] | None) -> set[str]:
        affected: set[str] = set()
        taints = self.slice_taints()
        evicting = evicting_taints(self.rules.values())
        for key, claim in self.claims.items():
            if only is not None and not only(claim):
                continue
            eviction = eviction_of_claim(claim, taints, evicting)
            if eviction == self.claim_evictions.get(key):
                continue
            if eviction is None:
                self.claim_evictions.pop(key, None)
            else:
                self.claim_evictions[key] = eviction
            affected |= self._reserved_pods(claim)
        return affected

    # --- answers ---------------------------------------------------------------------------

    def claims_in_namespace(self, namespace: str) -> Mapping[str, ResourceClaimBody]:
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
            added = eviction_of_claim(claim, no_slice_taints, only_rule)
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
