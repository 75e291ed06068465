"""The device-taint-eviction controller: deletes pods whose allocated devices carry a
NoExecute taint they do not tolerate, and keeps each DeviceTaintRule's
`EvictionInProgress` condition (upstream's `device-taint-eviction-controller`).

Watch events of ResourceSlices, DeviceTaintRules, ResourceClaims and Pods feed
`draco.scheduling.eviction.EvictionState`, which says which pods must go and when. A pod
that must go is put on the work queue at its eviction time; then a worker re-checks that
it is still due, emits the Normal Event `DeviceTaintManagerEviction` "Marking for
deletion", sets the pod condition `DisruptionTarget` (reason `DeletionByDeviceTaintManager`)
through the status subresource and deletes the pod with a UID precondition (no Eviction
API, as upstream: PodDisruptionBudgets are not consulted). A pending eviction that is no
longer needed (taint or rule gone, tolerated, claim deallocated) is cancelled with a
"Cancelling deletion" Event. The lifecycle controller then prunes the reservation,
deallocates and deletes generated claims, as for any pod that is gone.

Nothing lives only here: at start everything is listed from the API before a worker runs
(so a half-seen pool never looks tainted), and deadlines are `timeAdded`-based, so a
pending eviction keeps its time across a restart. Only the per-rule eviction counts
(the "K pods evicted" of the condition) start again from zero, as upstream.

Rule status: written by server-side apply to `/status` with the rule's UID as
precondition, at most every `RULE_STATUS_PERIOD_S` unless the generation changed. Rules
with the `None` effect show what NoExecute would evict, naming the pods, and are kept
current: any change to a claim, pod or slice they select brings their status up to date.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

from draco.api.bodies import ResourceClaimBody, key_of, meta_of
from draco.api.constants import (
    DELETION_BY_DEVICE_TAINT_MANAGER_REASON,
    DISRUPTION_TARGET_CONDITION,
    TAINT_EFFECT_NO_EXECUTE,
    TAINT_EFFECT_NONE,
)
from draco.api.corebodies import PodBody
from draco.kube.client import DEVICE_TAINT_RULES, PODS, ConflictError, Kube, NotFoundError, Obj
from draco.logs import get_logger
from draco.operator.metrics import DEVICE_TAINT_POD_DELETION_DURATION, DEVICE_TAINT_POD_DELETIONS
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.eviction import (
    RULE_STATUS_PERIOD_S,
    EvictionState,
    Rule,
    Update,
    allocation_results,
    device_id,
    rule_condition,
    rule_status_due,
)

__all__ = ["COMPONENT", "EVICTION_REASON", "FIELD_MANAGER", "EvictionService", "Item"]

log = get_logger(__name__)

#: Upstream's controller name: the Events' reporting controller and the status field manager.
COMPONENT: Final = "device-taint-eviction-controller"
FIELD_MANAGER: Final = "draco-device-taint-eviction"
QUEUE_NAME: Final = "device_taint_eviction"
EVICTION_REASON: Final = "DeviceTaintManagerEviction"
DISRUPTION_MESSAGE: Final = "Device Taint manager: deleting due to NoExecute taint"
#: Inputs of a `None` rule's simulation must be quiet this long before it is recounted.
SIMULATION_QUIET_S: Final = 1.0
#: Pods known to be evicted (upstream keeps 500 UIDs), so a late event does not retry them.
EVICTED_UIDS: Final = 500

#: Work items: ("pod", "ns/name", ""), ("rule", name, ""), ("cancel", "ns/name", uid).
Item = tuple[str, str, str]


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class EvictionService:
    """The state, the queue and the API writes; see the module docstring."""

    kube: Kube
    queue: WorkQueue[Item]
    state: EvictionState = field(default_factory=EvictionState)
    clock: Callable[[], datetime.datetime] = _utcnow
    #: Rule UID -> pods this process evicted because of it.
    evicted_by_rule: Counter[str] = field(default_factory=Counter)
    evicted_uids: OrderedDict[str, None] = field(default_factory=OrderedDict)
    runner: asyncio.Task[None] | None = None

    # --- inputs ------------------------------------------------------------------------------

    def prime(
        self,
        *,
        slices: Iterable[Obj],
        rules: Iterable[Obj],
        claims: Iterable[ResourceClaimBody],
        pods: Iterable[PodBody],
    ) -> None:
        """Fill the state from a LIST (at start, before any worker runs) and queue what is due."""
        for obj in slices:
            self.state.on_slice(obj, deleted=False)
        for obj in rules:
            self.state.on_rule(obj, deleted=False)
        for claim in claims:
            self.state.on_claim(claim, deleted=False)
        keys: set[str] = set()
        for pod in pods:
            keys |= self.state.on_pod(pod, deleted=False)
        self._act(self.state.reconcile(keys))
        for name in self.state.rules:
            self.queue.add(("rule", name, ""))

    def on_slice(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        self._act(self.state.reconcile(self.state.on_slice(obj, deleted=deleted)))
        spec = obj.get("spec") or {}
        pool = (str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", "")))
        self._touch_simulations(
            lambda rule: (
                rule.selector is not None
                and all(
                    want is None or want == have for want, have in zip(rule.selector[:2], pool, strict=True)
                )
            )
        )

    def on_rule(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        previous = self.state.rules.get(name)
        keys = self.state.on_rule(obj, deleted=deleted)
        self._act(self.state.reconcile(keys))
        if deleted:
            if previous is not None:
                self.evicted_by_rule.pop(previous.uid, None)
            return
        rule = self.state.rules[name]
        if previous is None or not previous.same_spec(rule) or previous.generation != rule.generation:
            # A new or changed rule: its status at once (the sync itself keeps the pace).
            self.queue.add(("rule", name, ""))

    def on_claim(self, obj: ResourceClaimBody, *, deleted: bool) -> None:
        key = key_of(obj)
        devices = [device_id(r) for r in allocation_results(self.state.claims.get(key) or {})]
        devices += [device_id(r) for r in allocation_results(obj)]
        self._act(self.state.reconcile(self.state.on_claim(obj, deleted=deleted)))
        self._touch_simulations(lambda rule: any(rule.matches(device) for device in devices))

    def on_pod(self, obj: PodBody, *, deleted: bool) -> None:
        key = key_of(obj)
        previews = any(rule.taint.effect == TAINT_EFFECT_NONE for rule in self.state.rules.values())
        used = self.state.pod_claims(key) if previews else []
        keys = self.state.on_pod(obj, deleted=deleted)
        if not keys:
            return
        self._act(self.state.reconcile(keys))
        if not previews:
            return
        used += self.state.pod_claims(key)
        devices = [
            device_id(result)
            for claim_key in used
            if claim_key in self.state.claims
            for result in allocation_results(self.state.claims[claim_key])
        ]
        self._touch_simulations(lambda rule: any(rule.matches(device) for device in devices))

    def _touch_simulations(self, affected: Callable[[Rule], bool]) -> None:
        """Bring the status of `None` rules that `affected` selects up to date soon."""
        for rule in self.state.rules.values():
            if rule.taint.effect == TAINT_EFFECT_NONE and affected(rule):
                self.queue.add_after(("rule", rule.name, ""), SIMULATION_QUIET_S)

    def _act(self, updates: Iterable[Update]) -> None:
        now = self.clock()
        for update in updates:
            if update.previous is not None:
                # Rules that counted this pod as pending: their condition changes.
                for rule in self._rules_of(update.previous.rule_uids):
                    self.queue.add_after(("rule", rule.name, ""), SIMULATION_QUIET_S)
            if update.eviction is None:
                if update.announce:
                    log.info("Cancelling pod eviction", pod=update.pod)
                    self.queue.add(("cancel", update.pod, update.uid))
                continue
            delay = (update.eviction.when - now).total_seconds()
            log.info(
                "Pod eviction scheduled",
                pod=update.pod,
                claims=self.state.pod_claims(update.pod),
                at=_stamp(update.eviction.when),
                delay_s=round(max(delay, 0.0), 3),
                reasons=update.eviction.describe(),
            )
            self.queue.add_after(("pod", update.pod, ""), delay)
            for rule in self._rules_of(update.eviction.rule_uids):
                # Eviction is in progress: the rule's condition says so (not at once:
                # more pods are probably coming).
                self.queue.add_after(("rule", rule.name, ""), RULE_STATUS_PERIOD_S)

    def _rules_of(self, uids: Iterable[str]) -> list[Rule]:
        wanted = set(uids)
        return [rule for rule in self.state.rules.values() if rule.uid in wanted]

    # --- work ----------------------------------------------------------------------------------

    async def sync(self, item: Item) -> float | None:
        kind, key, uid = item
        if kind == "pod":
            return await self._sync_pod(key)
        if kind == "rule":
            return await self._sync_rule(key)
        await self._cancelled(key, uid)
        return None

    async def _sync_pod(self, key: str) -> float | None:
        entry = self.state.pending.get(key)
        if entry is None:
            return None
        uid, eviction = entry
        if uid in self.evicted_uids:
            self.state.evicted(key, uid)
            return None
        now = self.clock()
        delay = (eviction.when - now).total_seconds()
        if delay > 0:
            return delay  # not yet: the time moved since this item was queued
        namespace, _, name = key.partition("/")
        try:
            deleted = await self._delete_pod(namespace, name, uid)
        except NotFoundError:
            deleted = False
        self._remember_evicted(uid)
        self.state.evicted(key, uid)
        if not deleted:
            log.info("Pod to evict is already gone or going", pod=key)
            return None
        latency = max(0.0, (self.clock() - eviction.when).total_seconds())
        DEVICE_TAINT_POD_DELETIONS.inc()
        DEVICE_TAINT_POD_DELETION_DURATION.observe(latency)
        rules = self._rules_of(eviction.rule_uids)
        for rule in rules:
            self.evicted_by_rule[rule.uid] += 1
            self.queue.add_after(("rule", rule.name, ""), RULE_STATUS_PERIOD_S)
        log.info(
            "Evicted pod by deleting it",
            pod=key,
            uid=uid,
            latency_s=round(latency, 3),
            reasons=eviction.describe(),
            rules=[rule.name for rule in rules],
        )
        return None

    async def _delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Event, DisruptionTarget condition, delete with a UID precondition; False when the
        pod is gone, replaced by a namesake, or already being deleted."""
        pod = cast(PodBody, await self.kube.get(PODS, name, namespace=namespace))
        meta = meta_of(pod)
        if meta.get("uid") != uid or meta.get("deletionTimestamp"):
            return False
        await self.kube.emit_event(
            pod, reason=EVICTION_REASON, message="Marking for deletion", type="Normal", component=COMPONENT
        )
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not any(
            c.get("type") == DISRUPTION_TARGET_CONDITION
            and c.get("status") == "True"
            and c.get("reason") == DELETION_BY_DEVICE_TAINT_MANAGER_REASON
            for c in conditions
        ):
            condition = {
                "type": DISRUPTION_TARGET_CONDITION,
                "status": "True",
                "reason": DELETION_BY_DEVICE_TAINT_MANAGER_REASON,
                "message": DISRUPTION_MESSAGE,
                "lastTransitionTime": _stamp(self.clock()),
            }
            try:
                # The UID in the patch is a precondition: a namesake pod is left alone.
                await self.kube.patch(
                    PODS,
                    name,
                    {"metadata": {"uid": uid}, "status": {"conditions": [condition]}},
                    namespace=namespace,
                    patch_type="strategic",
                    subresource="status",
                )
            except ConflictError:
                return False
        try:
            return await self.kube.delete(PODS, name, namespace=namespace, uid=uid)
        except ConflictError:
            return False  # the UID precondition failed: a namesake replaced our pod

    def _remember_evicted(self, uid: str) -> None:
        self.evicted_uids[uid] = None
        self.evicted_uids.move_to_end(uid)
        while len(self.evicted_uids) > EVICTED_UIDS:
            self.evicted_uids.popitem(last=False)

    async def _cancelled(self, key: str, uid: str) -> None:
        pod = self.state.pods.get(key)
        meta = meta_of(pod) if pod is not None else {}
        if pod is None or meta.get("uid") != uid or key in self.state.pending:
            return  # gone, replaced, or due again after all: nothing to tell
        ref: PodBody = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", ""), "uid": uid},
        }
        await self.kube.emit_event(
            ref, reason=EVICTION_REASON, message="Cancelling deletion", type="Normal", component=COMPONENT
        )

    async def _sync_rule(self, name: str) -> float | None:
        rule = self.state.rules.get(name)
        if rule is None:
            return None
        simulation = self.state.simulate(rule) if rule.taint.effect == TAINT_EFFECT_NONE else None
        pending = self.state.pending_for_rule(rule) if rule.taint.effect == TAINT_EFFECT_NO_EXECUTE else {}
        desired = rule_condition(
            rule, pending=pending, evicted=self.evicted_by_rule.get(rule.uid, 0), simulation=simulation
        )
        now = self.clock()
        write, delay = rule_status_due(rule, desired, now=now)
        if not write:
            return delay
        condition = {**desired, "lastTransitionTime": _stamp(now)}
        try:
            written = await self.kube.apply(
                DEVICE_TAINT_RULES,
                {"metadata": {"name": name, "uid": rule.uid}, "status": {"conditions": [condition]}},
                field_manager=FIELD_MANAGER,
                subresource="status",
            )
        except (NotFoundError, ConflictError):
            return None  # deleted or replaced meanwhile; its events tell the rest
        self.state.on_rule(written, deleted=False)
        log.info(
            "DeviceTaintRule status written",
            rule=name,
            effect=rule.taint.effect,
            status=condition["status"],
            reason=condition["reason"],
            message=condition["message"],
        )
        return None
