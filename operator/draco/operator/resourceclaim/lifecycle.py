"""The claim lifecycle: upstream's resourceclaim controller, for pods that name their claims
in draco's annotation.

One work queue holds `pod:<ns>/<name>` and `claim:<ns>/<name>` keys, fed by the informers
of pods and claims (their LIST at start and their watches; see `prime`), so claims whose
pods vanished while the operator was down are cleaned up too; templates and DeviceClasses
come from the operator's informers too (`controller.py` wires them).

`sync_pod` (upstream's syncPod/handleClaim): for each template entry of the claims annotation, adopt a
claim this pod already owns for that entry or create one from the template (named with
`generateName`, owned by the pod as controller with blockOwnerDeletion, annotated with the
pod claim name, labels/annotations/spec from the template, and with draco's finalizer from
the start: upstream's scheduler adds it with the allocation, which for draco would be one
more claim write per pod), and record the names in the pod's `claim-statuses` annotation.
A missing template, or a template whose DeviceClass is missing, is a Warning Event
`FailedResourceClaimCreation` on the pod and a retry with backoff; the pod is re-queued at
once when that template or class appears. For a pod already bound by something other than
draco, allocated claims get the pod in `reservedFor`.

`sync_claim` (upstream's syncClaim): drop `reservedFor` entries of pods that are gone, replaced
(another UID) or done; when that empties `reservedFor` of a claim carrying the finalizer,
clear the allocation (and `status.devices`) in the same UpdateStatus, then remove the
finalizer; unblock deletion of a claim being deleted; and delete a generated claim whose
pod is done or gone. Draco deletes claims of *gone* pods itself (upstream leaves that to
the garbage collector, which a cluster without kube-controller-manager does not run). A
claim created by a user is deallocated when unused but never deleted. Before that, a status
another writer damaged (a reservation of a pod that uses the claim removed, a stale
`state`) is repaired and said so in an Event (`repair.py` decides what).

Every write carries the resourceVersion it was decided on; a conflict re-queues the key.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable
from typing import Any

from draco.api import summarize_claim_status
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    FINALIZER,
    GROUP,
    NODE_LABEL,
)
from draco.errors import ClaimCreationError, KubeError
from draco.kube import client as k
from draco.kube.client import Kube, NotFoundError, Obj, key_of
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.metrics import CLAIM_CREATES, claim_uses_admin_access
from draco.operator.options import serves_namespace
from draco.operator.resourceclaim.nodenames import label_allocated_nodes, record_allocated_nodes
from draco.operator.resourceclaim.repair import REASON_STATUS_REPAIRED, StatusRepair, repair_claim_status
from draco.operator.stores import ClaimStore, DeletedPods, PodStore
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaim,
    PodClaimsError,
    claim_statuses,
    claim_statuses_annotation,
    controller_pod_uid,
    device_class_names,
    generated_claim,
    has_scheduling_gate,
    is_controlled_by_pod,
    is_pod_bound,
    is_pod_done,
    is_reserved_for,
    parse_pod_claims,
    pod_key,
    pod_reference,
    resolve_claim,
)

__all__ = [
    "FAILED_CLAIM_CREATION",
    "INVALID_CLAIMS_ANNOTATION",
    "LIFECYCLE_FIELD_MANAGER",
    "ClaimCreationError",
    "Lifecycle",
]

log = get_logger(__name__)

#: Upstream's only Event of this controller (reason, on the pod).
FAILED_CLAIM_CREATION = "FailedResourceClaimCreation"
#: draco's Event when the claims annotation itself cannot be read.
INVALID_CLAIMS_ANNOTATION = "InvalidResourceClaims"
#: Event source, upstream's component name for this controller.
EVENT_COMPONENT = "resource_claim"
#: The field manager that owns the claim-statuses annotation on pods.
LIFECYCLE_FIELD_MANAGER = "draco-lifecycle"

POD_PREFIX = "pod:"
CLAIM_PREFIX = "claim:"


class Lifecycle:
    """The resourceclaim controller's logic over a `Kube` (see the module docstring)."""

    def __init__(self, kube: Kube, *, queue: WorkQueue[str], namespaces: tuple[str, ...] = ()) -> None:
        self.kube = kube
        self.queue = queue
        #: The namespaces the operator serves; empty means all of them.
        self.namespaces = namespaces
        self.pods = PodStore()
        self.claims = ClaimStore()
        self.deleted_pods = DeletedPods()
        # Templates and class names seen in watch events: a miss is confirmed with a live GET,
        # so a template created a moment ago is never reported missing.
        self._templates: dict[str, Obj] = {}
        self._classes: set[str] = set()
        # Pods whose claim creation waits for a template or class to appear, by what they wait for.
        self._waiting: dict[tuple[str, str], set[str]] = {}
        #: True when this operator's allocation service runs: it records the generated claims
        #: of a pod gated by draco in the write that pins and un-gates it (one pod write
        #: instead of two), and for a pod it cannot place at once, right after that attempt.
        self.allocation_records = False
        #: True where the API server does not serve the claims' selectable field
        #: ``status.nodeName`` (`draco.kube.capabilities`): node agents then select their
        #: claims by the node label, which allocated claims must carry.
        self.node_label = False
        # The claim informer: a claim created here enters it at once (every subscriber,
        # allocation included, sees it before its watch event).
        self._claim_informer: Informer | None = None

    # --- intake: watch events and the initial LIST ----------------------------------------------

    async def prime(self, *, claims: Informer, pods: Informer) -> None:
        """Subscribe to the informers of claims and pods (listed already: the operator's
        sync barrier): their caches fill the stores and queue everything that may need
        work, then every change follows.

        Run once at start: the result is the same as if every object had just been added,
        so state left by a previous run (claims of pods deleted while no operator ran) is
        reconciled. Claims come before pods, so that each pod is judged with every claim
        known; and as each watch started where its LIST ended, nothing that changes
        meanwhile (a pod deleted while we start) is missed. The informers cover every
        namespace (allocation needs the whole cluster); objects outside ``--namespace``
        are ignored here. Allocated claims without ``status.nodeName`` get it (what the
        write answers goes through the claim informer, to every subscriber).
        """
        self._claim_informer = claims
        claims.subscribe(self._on_claim_change)
        pods.subscribe(self._on_pod_change)
        served = [c for c in claims.values() if self._serves(c)]
        for old, new in zip(served, await record_allocated_nodes(self.kube, served), strict=True):
            if new is not old:
                claims.assume(new)
        if self.node_label:
            served = [c for c in claims.values() if self._serves(c)]
            for old, new in zip(served, await label_allocated_nodes(self.kube, served), strict=True):
                if new is not old:
                    claims.assume(new)
        log.info("Lifecycle primed", pods=len(self.pods), claims=len(self.claims), queued=len(self.queue))

    def _serves(self, obj: Obj) -> bool:
        return serves_namespace((obj.get("metadata") or {}).get("namespace") or "", self.namespaces)

    def _on_claim_change(self, type_: str, claim: Obj) -> None:
        if self._serves(claim):
            self.on_claim_event(claim, deleted=type_ == "DELETED")

    def _on_pod_change(self, type_: str, pod: Obj) -> None:
        if self._serves(pod):
            self.on_pod_event(pod, deleted=type_ == "DELETED")

    def on_pod_event(self, pod: Obj, *, deleted: bool) -> None:
        """Upstream's pod add/update/delete handling (enqueuePod)."""
        key = key_of(pod)
        uid = (pod.get("metadata") or {}).get("uid", "")
        if deleted:
            self.pods.remove(key)
            if uid:
                self.deleted_pods.add(uid)
            for waiting in self._waiting.values():
                waiting.discard(key)
        else:
            pod = self.pods.upsert(pod)
        if deleted or is_pod_done(pod):
            for claim in self._claims_of(pod):
                self.queue.add(CLAIM_PREFIX + claim)
            return
        if self._pod_needs_work(pod):
            self.queue.add(POD_PREFIX + key)

    def on_claim_event(self, claim: Obj, *, deleted: bool) -> None:
        """Upstream's claim add/update/delete handling: queue the claim, re-check its pods."""
        key = key_of(claim)
        if deleted:
            self.claims.remove(key)
        else:
            self.claims.upsert(claim)
            self.queue.add(CLAIM_PREFIX + key)
        self._requeue_pods(self.pods.referencing("claim", key))
        owner = controller_pod_uid(claim)
        owner_key = self.pods.key_for_uid(owner) if owner else None
        if owner_key is not None:
            self._requeue_pods([owner_key])

    def on_template_event(self, template: Obj, *, deleted: bool = False) -> None:
        """A template appeared or changed: pods waiting for it try again now."""
        key = key_of(template)
        if deleted:
            self._templates.pop(key, None)
            return
        self._templates[key] = template
        waiting = self._waiting.pop(("template", key), set())
        self._requeue_pods(waiting | self.pods.referencing("template", key))

    def on_class_event(self, device_class: Obj, *, deleted: bool = False) -> None:
        """A DeviceClass appeared: pods whose template waited for it try again now."""
        name = (device_class.get("metadata") or {}).get("name", "")
        if deleted:
            self._classes.discard(name)
            return
        self._classes.add(name)
        for pod in self._waiting.pop(("class", name), set()):
            self.queue.add(POD_PREFIX + pod)

    def _requeue_pods(self, keys: Iterable[str]) -> None:
        for key in keys:
            pod = self.pods.get(key)
            if pod is not None and self._pod_needs_work(pod):
                self.queue.add(POD_PREFIX + key)

    def _claims_of(self, pod: Obj) -> set[str]:
        """Keys of every claim the pod references, owns or is reserved on."""
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        keys = {f"{namespace}/{name}" for name in claim_statuses(pod).values() if name}
        with contextlib.suppress(PodClaimsError):
            keys.update(
                f"{namespace}/{entry.resource_claim_name}"
                for entry in parse_pod_claims(pod)
                if entry.resource_claim_name
            )
        uid = (pod.get("metadata") or {}).get("uid")
        if uid:
            keys.update(self.claims.for_pod_uid(uid))
        return keys

    def _pod_needs_work(self, pod: Obj) -> bool:
        """Upstream's "needs work" test (podNeedsWork), against the stores."""
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or is_pod_done(pod):
            return False
        try:
            entries = parse_pod_claims(pod)
        except PodClaimsError:
            return True  # sync_pod reports it as an Event
        statuses = claim_statuses(pod)
        for entry in entries:
            try:
                resolved = resolve_claim(pod, entry, statuses=statuses)
            except ClaimNotCreatedError:
                if self._defers_recording(pod) and self.claims.owned_by(
                    str(meta.get("uid", "")), pod_claim_name=entry.name
                ):
                    continue  # created; the allocation records it
                return True
            if resolved.claim_name is None:
                continue
            claim = self.claims.get(f"{meta.get('namespace', '')}/{resolved.claim_name}")
            if claim is None:
                if entry.resource_claim_template_name is not None:
                    return True
                continue  # referenced by name: the user must create it
            if resolved.check_owner and not is_controlled_by_pod(claim, pod):
                continue  # a conflicting claim the user has to remove
            if (
                is_pod_bound(pod)
                and (claim.get("status") or {}).get("allocation")
                and not is_reserved_for(claim, pod)
            ):
                return True
        return False

    # --- sync -------------------------------------------------------------------------------------

    async def sync(self, key: str) -> float | None:
        """The work-queue entry point for both kinds of keys."""
        kind, _, ref = key.partition(":")
        namespace, _, name = ref.partition("/")
        if kind == "pod":
            await self.sync_pod(namespace, name)
        elif kind == "claim":
            await self.sync_claim(namespace, name)
        else:
            log.error("Unknown work-queue key dropped", key=key)
        return None

    async def sync_pod(self, namespace: str, name: str) -> None:
        """Create or adopt the pod's generated claims; reserve claims for pods bound elsewhere.

        The pod comes from the store the watch keeps (upstream's lister), not a GET: a body
        older than the last claim created for it is harmless, because the claim store
        knows every claim created (`owned_by` adopts it instead of creating a second one).
        Only a pod the store has never seen is read from the API."""
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is None:
            pod = await self.kube.get_or_none(k.PODS, name, namespace=namespace)
            if pod is not None:
                pod = self.pods.upsert(pod)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp") or is_pod_done(pod):
            return
        try:
            entries = parse_pod_claims(pod)
        except PodClaimsError as exc:
            log.warning("Pod claims annotation is invalid", pod=pod_key(pod), error=str(exc))
            await self.kube.emit_event(
                pod, reason=INVALID_CLAIMS_ANNOTATION, message=str(exc), component=EVENT_COMPONENT
            )
            return  # nothing to retry until the pod changes
        statuses = claim_statuses(pod)
        recorded = dict(statuses)
        failure: ClaimCreationError | None = None
        for entry in entries:
            try:
                claim_name = await self._handle_claim(pod, entry, statuses=recorded)
            except ClaimCreationError as exc:
                failure = exc
                message = f"PodResourceClaim {entry.name}: {exc}"
                await self.kube.emit_event(
                    pod, reason=FAILED_CLAIM_CREATION, message=message, component=EVENT_COMPONENT
                )
                if exc.waits_for is not None:
                    self._waiting.setdefault(exc.waits_for, set()).add(pod_key(pod))
                break
            if claim_name is not None:
                recorded[entry.name] = claim_name
        if recorded != statuses and not (
            self._defers_recording(pod)
            and all(recorded.get(name) == value for name, value in statuses.items())
        ):
            await self._record_statuses(pod, recorded)
        if failure is not None:
            raise failure
        if is_pod_bound(pod):
            await self._reserve_for_bound_pod(pod, entries, recorded)

    def _defers_recording(self, pod: Obj) -> bool:
        """New claim names of this pod are left for the allocation service to record."""
        return self.allocation_records and has_scheduling_gate(pod)

    async def _handle_claim(
        self, pod: Obj, entry: PodClaim, *, statuses: dict[str, str | None]
    ) -> str | None:
        """Upstream's handleClaim: the name to record for a template entry, or None when the
        entry needs nothing (a claim by name, a recorded claim the pod owns, a recorded null)."""
        if entry.resource_claim_template_name is None:
            return None
        meta = pod["metadata"]
        namespace = meta["namespace"]
        if entry.name in statuses:
            recorded = statuses[entry.name]
            if recorded is None:
                return None
            claim = self.claims.get(f"{namespace}/{recorded}")
            if claim is None:
                claim = await self.kube.get_or_none(k.RESOURCE_CLAIMS, recorded, namespace=namespace)
            if claim is not None and is_controlled_by_pod(claim, pod):
                return None
            if claim is not None:
                log.info(
                    "Claim that was created for the pod is no longer owned by the pod, creating a new one",
                    pod=pod_key(pod),
                    claim=f"{namespace}/{recorded}",
                )
        orphan = self.claims.owned_by(meta["uid"], pod_claim_name=entry.name)
        if orphan is not None:
            name = str(orphan["metadata"]["name"])
            (log.debug if self._defers_recording(pod) else log.info)(
                "Adopted claim created earlier for the pod", pod=pod_key(pod), claim=f"{namespace}/{name}"
            )
            return name
        created = await self._create_claim(pod, entry)
        return str(created["metadata"]["name"])

    async def _create_claim(self, pod: Obj, entry: PodClaim) -> Obj:
        namespace = pod["metadata"]["namespace"]
        template_name = str(entry.resource_claim_template_name)
        template = await self._template(namespace, template_name)
        body = generated_claim(pod, entry, template)
        await self._check_classes(template_name, body["spec"])
        admin = "true" if claim_uses_admin_access(body) else "false"
        try:
            created = await self.kube.create(k.RESOURCE_CLAIMS, body, namespace=namespace)
        except k.KubeError as exc:
            CLAIM_CREATES.labels(status="failure", admin_access=admin).inc()
            raise ClaimCreationError(f"create ResourceClaim: {exc}") from exc
        CLAIM_CREATES.labels(status="success", admin_access=admin).inc()
        self.claims.created(created)
        if self._claim_informer is not None:
            self._claim_informer.assume(created)
        log.info(
            "Created claim for pod",
            pod=pod_key(pod),
            claim=key_of(created),
            pod_claim=entry.name,
            template=template_name,
        )
        return created

    async def _template(self, namespace: str, name: str) -> Obj:
        """The template (the watched one, else a live GET: one created a moment ago is
        never reported missing); raises ``ClaimCreationError`` when there is none."""
        template = self._templates.get(f"{namespace}/{name}")
        if template is None:
            template = await self.kube.get_or_none(k.RESOURCE_CLAIM_TEMPLATES, name, namespace=namespace)
        if template is None:
            raise ClaimCreationError(
                f'resourceclaimtemplates.{GROUP} "{name}" not found in namespace {namespace}: '
                "create the template or fix resourceClaimTemplateName",
                waits_for=("template", f"{namespace}/{name}"),
            )
        return template

    async def _check_classes(self, template_name: str, claim_spec: Obj) -> None:
        """Raises ``ClaimCreationError`` when a DeviceClass the claim requests is missing."""
        for class_name in device_class_names(claim_spec):
            if class_name in self._classes:
                continue
            if await self.kube.get_or_none(k.DEVICE_CLASSES, class_name) is None:
                raise ClaimCreationError(
                    f'template {template_name} requests deviceclasses.{GROUP} "{class_name}", which does not exist: '
                    "create the DeviceClass or fix the template",
                    waits_for=("class", class_name),
                )

    async def _record_statuses(self, pod: Obj, statuses: dict[str, str | None]) -> None:
        """Server-side apply of the claim-statuses annotation (upstream applies pod status)."""
        meta = pod["metadata"]
        applied = await self.kube.apply(
            k.PODS,
            {
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                    "annotations": {CLAIM_STATUSES_ANNOTATION: claim_statuses_annotation(statuses)},
                }
            },
            field_manager=LIFECYCLE_FIELD_MANAGER,
        )
        self.pods.upsert(applied)

    async def _reserve_for_bound_pod(
        self, pod: Obj, entries: list[PodClaim], statuses: dict[str, str | None]
    ) -> None:
        """Upstream syncPod step 5: a pod bound without draco still gets its reservations."""
        namespace = pod["metadata"]["namespace"]
        for entry in entries:
            try:
                resolved = resolve_claim(pod, entry, statuses=statuses)
            except ClaimNotCreatedError:
                continue
            if resolved.claim_name is None:
                continue
            claim = await self.kube.get_or_none(k.RESOURCE_CLAIMS, resolved.claim_name, namespace=namespace)
            if (
                claim is None
                or not (claim.get("status") or {}).get("allocation")
                or is_reserved_for(claim, pod)
            ):
                continue
            if resolved.check_owner and not is_controlled_by_pod(claim, pod):
                continue
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                continue  # no new reservations on a claim being deleted
            status = claim.setdefault("status", {})
            status["reservedFor"] = [*(status.get("reservedFor") or []), pod_reference(pod)]
            summarize_claim_status(status, deleting=False)
            self.claims.upsert(await self.kube.replace_status(k.RESOURCE_CLAIMS, claim))
            log.info("Reserved claim for bound pod", pod=pod_key(pod), claim=key_of(claim))

    async def sync_claim(self, namespace: str, name: str) -> None:
        """Prune reservations, deallocate, drop the finalizer, delete generated claims (syncClaim).

        Decides on the claim as the watch last showed it, like upstream's lister: every
        write carries that resourceVersion, so if the cache was behind the write fails with
        a conflict (or not found) and the decision is made again on a live read.
        """
        key = f"{namespace}/{name}"
        cached = self.claims.get(key)
        if cached is not None:
            try:
                await self._sync_claim(copy.deepcopy(cached))
                return
            except (k.ConflictError, NotFoundError):
                log.debug("Claim cache was behind, deciding again on a live read", claim=key)
        claim = await self.kube.get_or_none(k.RESOURCE_CLAIMS, name, namespace=namespace)
        if claim is None:
            self.claims.remove(key)
            return
        self.claims.upsert(claim)
        # A copy, as from the cache: `_sync_claim` edits the claim before it writes it, and a
        # write that fails (the webhook down) must not leave the edit in the store, where the
        # retry would find the finalizer already gone and never remove it.
        await self._sync_claim(copy.deepcopy(claim))

    async def _sync_claim(self, claim: Obj) -> None:
        namespace = claim["metadata"]["namespace"]
        ckey = key_of(claim)
        users = self.pods.referencing("claim", ckey)
        if owner := self.pods.key_for_uid(controller_pod_uid(claim) or ""):
            users.add(owner)
        repair = repair_claim_status(claim, pods=[p for key in users if (p := self.pods.get(key))])
        if repair is not None:
            claim = await self._repair_status(claim, repair)
        status = claim.get("status") or {}
        reserved = list(status.get("reservedFor") or [])
        valid = [ref for ref in reserved if await self._reservation_is_valid(namespace, ref)]
        finalizers = list((claim.get("metadata") or {}).get("finalizers") or [])
        if len(valid) != len(reserved):
            new_status = dict(status)
            if valid:
                new_status["reservedFor"] = valid
            else:
                new_status.pop("reservedFor", None)
                if FINALIZER in finalizers:
                    # The transition from used to unused deallocates (upstream's syncClaim);
                    # device statuses must go with the devices they describe.
                    new_status.pop("allocation", None)
                    new_status.pop("devices", None)
            deleting = bool((claim.get("metadata") or {}).get("deletionTimestamp"))
            claim["status"] = summarize_claim_status(new_status, deleting=deleting)
            claim = await self.kube.replace_status(k.RESOURCE_CLAIMS, claim)
            self.claims.upsert(claim)
            log.info(
                "Pruned claim reservations",
                claim=ckey,
                dropped=len(reserved) - len(valid),
                deallocated=not valid and FINALIZER in finalizers,
            )
            if not (claim.get("status") or {}).get("allocation") and FINALIZER in finalizers:
                claim = await self._remove_finalizer(claim)
        elif FINALIZER in finalizers and (claim.get("metadata") or {}).get("deletionTimestamp") and not valid:
            if status.get("allocation") or status.get("devices"):
                new_status = dict(status)
                new_status.pop("allocation", None)
                new_status.pop("devices", None)
                claim["status"] = summarize_claim_status(new_status, deleting=True)
                claim = await self.kube.replace_status(k.RESOURCE_CLAIMS, claim)
                log.info("Deallocated claim being deleted", claim=ckey)
            claim = await self._remove_finalizer(claim)
        if not valid:
            await self._delete_if_pod_finished(claim)

    async def _repair_status(self, claim: Obj, repair: StatusRepair) -> Obj:
        """Write the repaired status (with the resourceVersion it was decided on) and say so."""
        claim = await self.kube.replace_status(k.RESOURCE_CLAIMS, {**claim, "status": repair.status})
        self.claims.upsert(claim)
        log.warning(
            "Repaired claim status",
            claim=key_of(claim),
            restored=list(repair.restored),
            corrected=repair.corrected,
        )
        with contextlib.suppress(KubeError):
            await self.kube.emit_event(
                claim, reason=REASON_STATUS_REPAIRED, message=repair.message, component=EVENT_COMPONENT
            )
        return claim

    async def _reservation_is_valid(self, namespace: str, ref: dict[str, Any]) -> bool:
        if ref.get("apiGroup") or ref.get("resource") != "pods":
            log.warning("Unsupported reservedFor entry kept", namespace=namespace, entry=ref)
            return True
        uid = ref.get("uid")
        if uid in self.deleted_pods:
            return False
        pod = await self._pod(namespace, str(ref.get("name", "")), uid=uid)
        if pod is None or pod["metadata"].get("uid") != uid:
            return False
        return not is_pod_done(pod)

    async def _pod(self, namespace: str, name: str, *, uid: str | None = None) -> Obj | None:
        """The pod from the store; when the store doesn't know it (or knows another pod of
        that name than the one with `uid`), a live GET makes sure the pod is really gone or
        replaced rather than not yet seen: a stale cache must never delete a live claim."""
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is not None and (uid is None or pod["metadata"].get("uid") == uid):
            return pod
        live = await self.kube.get_or_none(k.PODS, name, namespace=namespace)
        return self.pods.upsert(live) if live is not None else None

    async def _remove_finalizer(self, claim: Obj) -> Obj:
        """Drop the finalizer of a deallocated claim, and with it the node label an older
        operator may have put there."""
        meta = claim["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        if NODE_LABEL in (meta.get("labels") or {}):
            meta["labels"] = {key: v for key, v in meta["labels"].items() if key != NODE_LABEL}
        updated = await self.kube.replace(k.RESOURCE_CLAIMS, claim)
        log.info("Removed claim finalizer", claim=key_of(claim))
        if (updated.get("metadata") or {}).get("deletionTimestamp") and not updated["metadata"].get(
            "finalizers"
        ):
            self.claims.remove(key_of(claim))
        else:
            self.claims.upsert(updated)
        return updated

    async def _delete_if_pod_finished(self, claim: Obj) -> None:
        """Delete a generated claim whose controlling pod is done, replaced or gone."""
        meta = claim.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        owner_uid = controller_pod_uid(claim)
        if owner_uid is None:
            return  # a user's claim: deallocated, never deleted
        owner_name = next(
            ref["name"] for ref in meta.get("ownerReferences") or [] if ref.get("uid") == owner_uid
        )
        if owner_uid in self.deleted_pods:
            pod: Obj | None = None
        else:
            pod = await self._pod(meta["namespace"], owner_name, uid=owner_uid)
        if pod is not None and pod["metadata"].get("uid") == owner_uid and not is_pod_done(pod):
            return
        try:
            # Preconditions: this very claim, unchanged since the decision was made.
            deleted = await self.kube.delete(
                k.RESOURCE_CLAIMS,
                meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            )
        except NotFoundError:
            deleted = False
        if deleted:
            log.info(
                "Deleted claim of finished pod",
                claim=key_of(claim),
                pod=f"{meta['namespace']}/{owner_name}",
                reason="gone"
                if pod is None
                else ("replaced" if pod["metadata"].get("uid") != owner_uid else "done"),
            )
