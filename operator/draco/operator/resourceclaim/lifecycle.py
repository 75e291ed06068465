"""The claim lifecycle: upstream's resourceclaim controller, for pods that name their claims
in draco's annotation.

One work queue holds `pod:<ns>/<name>` and `claim:<ns>/<name>` keys, fed by the lifecycle's
Kopf handlers (`handlers.py`: the informers of pods and claims, their caches at start and
every change since), so claims whose pods vanished while the operator was down are
cleaned up too; templates, DeviceClasses and quotas wake the pods that wait for them. Like upstream's
controller it decides from the informers' caches and indexes (pods by the claims they
name, claims by the pods that own them or are reserved in them: `operator.informers`) and
keeps no copy of its own: a stale cache only ever costs an extra sync, a live GET or a
conflict, never a wrong write.

`sync_pod` (upstream's syncPod/handleClaim): for each template entry of the claims annotation, adopt a
claim this pod already owns for that entry or create one from the template (named with
`generateName`, owned by the pod as controller with blockOwnerDeletion, annotated with the
pod claim name, labels/annotations/spec from the template, and with draco's finalizer from
the start: upstream's scheduler adds it with the allocation, which for draco would be one
more claim write per pod). The names are recorded in the pod's `claim-statuses` annotation
by the allocation service, its one writer (in the write that pins and un-gates a gated
pod; see `operator.scheduler.allocation`): this half finds a claim it created through the
claims' index of generated claims until then.
A missing template, or a template whose DeviceClass is missing, is a Warning Event
`FailedResourceClaimCreation` on the pod and a retry with backoff; the pod is re-queued at
once when that template or class appears. So is a claim the webhook refuses for device
quota (`draco.api.quota`): the pod is re-queued when a ResourceQuota of its namespace
changes (a limit raised, or usage given back by a claim that went away). For a pod already bound by something other than
draco, allocated claims get the pod in `reservedFor`.

`sync_claim` (upstream's syncClaim, `claimsync.py`): prune reservations, deallocate,
remove the finalizer, delete generated claims of finished pods.

Every write carries the resourceVersion it was decided on; a conflict re-queues the key.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, cast

from draco.api import summarize_claim_status
from draco.api.bodies import (
    ResourceClaimBody,
    ResourceClaimSpecBody,
    ResourceClaimTemplateBody,
    meta_of,
)
from draco.api.constants import (
    GROUP,
)
from draco.api.corebodies import PodBody
from draco.api.quota import is_quota_refusal
from draco.errors import ClaimCreationError
from draco.kube import client as k
from draco.kube.client import Kube, Obj, key_of
from draco.logs import get_logger
from draco.operator.informers import (
    CLAIM_GENERATED,
    CLAIM_GROUPS,
    CLAIM_PODS,
    POD_REFERENCES,
    POD_UID,
    Informers,
    generated_for,
)
from draco.operator.metrics import CLAIM_CREATES, claim_uses_admin_access
from draco.operator.options import serves_namespace
from draco.operator.resourceclaim.claimsync import EVENT_COMPONENT, ClaimSync
from draco.operator.resourceclaim.groupclaims import GroupClaims
from draco.operator.resourceclaim.nodenames import label_allocated_nodes, record_allocated_nodes
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.devicetaints import parse_time
from draco.scheduling.generatedclaims import generated_claim, without_generated_names
from draco.scheduling.groups import GroupRef, group_of, policy_of
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaim,
    PodClaimsError,
    claim_statuses,
    controller_pod_uid,
    device_class_names,
    is_claim_for_entry,
    is_pod_bound,
    is_pod_done,
    is_reserved_for,
    parse_pod_claims,
    pod_reference,
    resolve_claim,
)

__all__ = [
    "FAILED_CLAIM_CREATION",
    "INVALID_CLAIMS_ANNOTATION",
    "LIFECYCLE_FIELD_MANAGER",
    "MISSING_GRACE_SECONDS",
    "ClaimCreationError",
    "Lifecycle",
]

log = get_logger(__name__)

#: Upstream's only Event of this controller (reason, on the pod).
FAILED_CLAIM_CREATION = "FailedResourceClaimCreation"
#: draco's Event when the claims annotation itself cannot be read.
INVALID_CLAIMS_ANNOTATION = "InvalidResourceClaims"
#: How long a new pod waits for a missing template or class before that is a Warning.
MISSING_GRACE_SECONDS: Final = 5.0
#: The field manager that owns the claim-statuses annotation on pods.
LIFECYCLE_FIELD_MANAGER = "draco-lifecycle"

POD_PREFIX = "pod:"
CLAIM_PREFIX = "claim:"
GROUP_PREFIX = "podgroup:"


def _grace_left(pod: PodBody, exc: ClaimCreationError, *, now: datetime) -> float:
    """Seconds a pod created a moment ago may still wait, without a Warning, for the
    template or DeviceClass it names that does not exist yet: one `kubectl apply` of a pod
    and its template (the pod first, as a manifest may list them) finds it missing for
    that moment. Never more than the grace, whatever the clocks say."""
    if exc.waits_for is None or exc.waits_for[0] not in ("template", "class"):
        return 0.0
    created = parse_time(meta_of(pod).get("creationTimestamp"))
    if created is None:
        return 0.0
    return min(MISSING_GRACE_SECONDS, MISSING_GRACE_SECONDS - (now - created).total_seconds())


def _ref(group: Obj) -> GroupRef:
    meta = meta_of(group)
    return GroupRef(str(meta.get("namespace", "")), str(meta.get("name", "")))


class Lifecycle:
    """The resourceclaim controller's logic over a `Kube` (see the module docstring)."""

    def __init__(
        self,
        kube: Kube,
        *,
        informers: Informers,
        queue: WorkQueue[str],
        namespaces: tuple[str, ...] = (),
        node_label: bool = False,
    ) -> None:
        self.kube = kube
        self.queue = queue
        #: The namespaces the operator serves; empty means all of them.
        self.namespaces = namespaces
        # What it reads, all from the operator's informers: a claim created or written here
        # enters the claim informer at once (every subscriber, allocation included, sees it
        # before its watch event; upstream's mutation cache), and a template or class
        # missing there is confirmed with a live GET (one created a moment ago is never
        # reported missing).
        self.informers = informers
        self.pods = informers.pods
        self.claims = informers.claims
        self.claim_sync = ClaimSync(
            kube, pods=informers.pods, claims=informers.claims, groups=informers.pod_groups
        )
        self.group_claims = GroupClaims(
            kube, informers=informers, template=self._template, check_classes=self._check_classes
        )
        # Pods whose claim creation waits for a template or class to appear, by what they wait for.
        self._waiting: dict[tuple[str, str], set[str]] = {}
        #: True where the API server does not serve the claims' selectable field
        #: ``status.nodeName`` (`draco.kube.capabilities`): node agents then select their
        #: claims by the node label, which allocated claims must carry.
        self.node_label = node_label

    # --- intake: what the handlers hand over ------------------------------------------------------

    async def prime(self) -> None:
        """Give allocated claims without ``status.nodeName`` their node (what the writes
        answer goes through the claim informer, to every subscriber). Run once at start,
        once the handlers are subscribed (`handlers.follow`)."""
        claims, pods = self.claims, self.pods
        served = [c for c in claims.values() if self._serves(c)]
        for old, new in zip(served, await record_allocated_nodes(self.kube, served), strict=True):
            if new is not old:
                claims.assume(new)
        if self.node_label:
            served = [c for c in claims.values() if self._serves(c)]
            for old, new in zip(served, await label_allocated_nodes(self.kube, served), strict=True):
                if new is not old:
                    claims.assume(new)
        log.info("Lifecycle primed", pods=len(pods), claims=len(claims), queued=len(self.queue))

    def _serves(self, obj: Mapping[str, Any]) -> bool:
        return serves_namespace(meta_of(obj).get("namespace") or "", self.namespaces)

    def on_pod_event(self, pod: PodBody, *, deleted: bool) -> None:
        """Upstream's pod add/update/delete handling (enqueuePod)."""
        key = key_of(pod)
        if deleted:
            for waiting in self._waiting.values():
                waiting.discard(key)
        if deleted or is_pod_done(pod):
            for claim in self._claims_of(pod):
                self.queue.add(CLAIM_PREFIX + claim)
            return
        if self._pod_needs_work(pod):
            self.queue.add(POD_PREFIX + key)

    def on_claim_event(self, claim: ResourceClaimBody, *, deleted: bool) -> None:
        """Upstream's claim add/update/delete handling: queue the claim, re-check its pods."""
        key = key_of(claim)
        if not deleted:
            self.queue.add(CLAIM_PREFIX + key)
        self._requeue_pods(self.pods.keys_by(POD_REFERENCES, f"claim:{key}"))
        owner = controller_pod_uid(claim)
        if owner:
            self._requeue_pods(self.pods.keys_by(POD_UID, owner))

    def on_group_event(self, group: Obj, *, deleted: bool) -> None:
        """A draco PodGroup changed: its claims are made; gone: the claims it owns or is
        reserved in are synced (deallocated, deleted)."""
        meta = meta_of(group)
        if deleted:
            for claim in self.claims.keys_by(CLAIM_GROUPS, str(meta.get("uid", ""))):
                self.queue.add(CLAIM_PREFIX + claim)
            return
        if any(c.resource_claim_template_name for c in policy_of(_ref(group), group).claims):
            self.queue.add(GROUP_PREFIX + key_of(group))

    def _group_entries(self, pod: PodBody, entries: Iterable[PodClaim]) -> set[str]:
        """The pod's entries that are its draco PodGroup's claims (made by the group's
        sync, not for the pod); a group whose claim is not made yet is queued."""
        ref = group_of(pod)
        if ref is None or ref.convention != "draco":
            return set()
        group = self.informers.pod_groups.get(ref.key)
        if group is None:
            return set()
        policy = policy_of(ref, group)
        matching = policy.claims_of(entries)
        if any(
            c.resource_claim_template_name and not policy.claim_statuses.get(n) for n, c in matching.items()
        ):
            self.queue.add(GROUP_PREFIX + ref.key)
        return set(matching)

    def on_template_event(self, template: ResourceClaimTemplateBody, *, deleted: bool = False) -> None:
        """A template appeared or changed: pods waiting for it try again now."""
        if deleted:
            return
        key = key_of(template)
        waiting = self._waiting.pop(("template", key), set())
        self._requeue_pods(waiting | self.pods.keys_by(POD_REFERENCES, f"template:{key}"))

    def on_class_event(self, device_class: Obj, *, deleted: bool = False) -> None:
        """A DeviceClass appeared: pods whose template waited for it try again now."""
        if deleted:
            return
        name = meta_of(device_class).get("name", "")
        for pod in self._waiting.pop(("class", name), set()):
            self.queue.add(POD_PREFIX + pod)

    def on_quota_event(self, quota: Obj) -> None:
        """A ResourceQuota changed: pods whose claim its namespace refused try again now."""
        namespace = meta_of(quota).get("namespace", "")
        for pod in self._waiting.pop(("quota", namespace), set()):
            self.queue.add(POD_PREFIX + pod)

    def _requeue_pods(self, keys: Iterable[str]) -> None:
        for key in keys:
            pod = self.pods.get(key)
            if pod is not None and self._pod_needs_work(pod):
                self.queue.add(POD_PREFIX + key)

    def _claims_of(self, pod: PodBody) -> set[str]:
        """Keys of every claim the pod references, owns or is reserved on."""
        namespace = meta_of(pod).get("namespace", "")
        keys = {f"{namespace}/{name}" for name in claim_statuses(pod).values() if name}
        with contextlib.suppress(PodClaimsError):
            keys.update(
                f"{namespace}/{entry.resource_claim_name}"
                for entry in parse_pod_claims(pod)
                if entry.resource_claim_name
            )
        uid = meta_of(pod).get("uid")
        if uid:
            keys.update(self.claims.keys_by(CLAIM_PODS, uid))
        return keys

    def _generated(self, pod_uid: str, pod_claim: str) -> ResourceClaimBody | None:
        """The first claim (by name) generated for the pod's entry ``pod_claim``, just
        created ones included (upstream's orphan adoption)."""
        found = self.claims.by_index(CLAIM_GENERATED, generated_for(pod_uid, pod_claim))
        return found[0] if found else None

    def _pod_needs_work(self, pod: PodBody) -> bool:
        """Upstream's "needs work" test (podNeedsWork), against the informers' caches."""
        meta = meta_of(pod)
        if meta.get("deletionTimestamp") or is_pod_done(pod):
            return False
        try:
            entries = parse_pod_claims(pod)
        except PodClaimsError:
            return True  # sync_pod reports it as an Event
        statuses = claim_statuses(pod)
        group_entries = self._group_entries(pod, entries)
        for entry in entries:
            if entry.name in group_entries:
                continue  # the group's claim: made and reserved for the group
            try:
                resolved = resolve_claim(pod, entry, statuses=statuses)
            except ClaimNotCreatedError:
                if self._generated(str(meta.get("uid", "")), entry.name):
                    continue  # created; the allocation service records it
                return True
            if resolved.claim_name is None:
                continue
            claim = self.claims.get(f"{meta.get('namespace', '')}/{resolved.claim_name}")
            if claim is None:
                if entry.resource_claim_template_name is None:
                    continue  # referenced by name: the user must create it
                if self._generated(str(meta.get("uid", "")), entry.name):
                    continue  # a new one is made; the allocation service records it
                return True  # the recorded claim is gone: make a new one
            if resolved.check_owner and not is_claim_for_entry(claim, pod, entry.name):
                # A stale record (another pod's claim, a user's, another entry's): as
                # upstream's handleClaim, a new claim is made for the entry.
                if self._generated(str(meta.get("uid", "")), entry.name):
                    continue
                return True
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
            return await self.sync_pod(namespace, name)
        elif kind == "claim":
            await self.sync_claim(namespace, name)
        elif kind == "podgroup":
            await self.group_claims.sync(namespace, name)
        else:
            log.error("Unknown work-queue key dropped", key=key)
        return None

    async def sync_pod(self, namespace: str, name: str) -> float | None:
        """Create or adopt the pod's generated claims; reserve claims for pods bound elsewhere.
        Returns when to try again while a young pod waits for its template or class
        (`MISSING_GRACE_SECONDS`).

        The pod comes from the pod informer (upstream's lister), not a GET: a body older
        than the last claim created for it is harmless, because the claim informer knows
        every claim created here at once (`_generated` adopts it instead of creating a
        second one). Only a pod the informer has not seen yet is read from the API."""
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is None:
            pod = cast(PodBody | None, await self.kube.get_or_none(k.PODS, name, namespace=namespace))
        if pod is None or meta_of(pod).get("deletionTimestamp") or is_pod_done(pod):
            return None
        try:
            entries = parse_pod_claims(pod)
        except PodClaimsError as exc:
            log.warning("Pod claims annotation is invalid", pod=key_of(pod), error=str(exc))
            await self.kube.emit_event(
                pod, reason=INVALID_CLAIMS_ANNOTATION, message=str(exc), component=EVENT_COMPONENT
            )
            return None  # nothing to retry until the pod changes
        statuses = claim_statuses(pod)
        recorded = dict(statuses)
        failure: ClaimCreationError | None = None
        group_entries = self._group_entries(pod, entries)
        entries = [entry for entry in entries if entry.name not in group_entries]
        for entry in entries:
            try:
                claim_name = await self._handle_claim(pod, entry, statuses=recorded)
            except ClaimCreationError as exc:
                if exc.waits_for is not None:
                    self._waiting.setdefault(exc.waits_for, set()).add(key_of(pod))
                wait = _grace_left(pod, exc, now=datetime.now(UTC))
                if wait > 0:  # applied with its template, say: no Warning for that moment
                    log.info("Claim waits for what the pod names", pod=key_of(pod), pod_claim=entry.name,
                             missing=":".join(exc.waits_for or ()), seconds=round(wait, 1))  # fmt: skip
                    return wait
                failure = exc
                message = f"PodResourceClaim {entry.name}: {exc}"
                await self.kube.emit_event(
                    pod, reason=FAILED_CLAIM_CREATION, message=message, component=EVENT_COMPONENT
                )
                break
            if claim_name is not None:
                recorded[entry.name] = claim_name
        if failure is not None:
            raise failure
        if is_pod_bound(pod):
            await self._reserve_for_bound_pod(pod, entries, recorded)
        return None

    async def _handle_claim(
        self, pod: PodBody, entry: PodClaim, *, statuses: dict[str, str | None]
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
                claim = cast(
                    ResourceClaimBody | None,
                    await self.kube.get_or_none(k.RESOURCE_CLAIMS, recorded, namespace=namespace),
                )
            if claim is not None and is_claim_for_entry(claim, pod, entry.name):
                return None
            log.info(
                "Claim recorded for the pod does not exist, creating a new one"
                if claim is None
                else "Claim that was created for the pod is no longer owned by the pod, creating a new one",
                pod=key_of(pod),
                claim=f"{namespace}/{recorded}",
                pod_claim=entry.name,
            )
        orphan = self._generated(meta["uid"], entry.name)
        if orphan is not None:
            name = str(orphan["metadata"]["name"])
            log.debug(
                "Adopted claim created earlier for the pod", pod=key_of(pod), claim=f"{namespace}/{name}"
            )
            return name
        created = await self._create_claim(pod, entry)
        return str(created["metadata"]["name"])

    async def _create_claim(self, pod: PodBody, entry: PodClaim) -> ResourceClaimBody:
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
            waits = ("quota", namespace) if exc.status == 403 and is_quota_refusal(str(exc)) else None
            # Named as before it exists: each try's generated name is new (one Event series).
            message = without_generated_names(str(exc), str(body["metadata"].get("generateName") or ""))
            raise ClaimCreationError(message, waits_for=waits) from exc
        CLAIM_CREATES.labels(status="success", admin_access=admin).inc()
        self.claims.assume(created)
        log.info(
            "Created claim for pod",
            pod=key_of(pod),
            claim=key_of(created),
            pod_claim=entry.name,
            template=template_name,
        )
        return created

    async def _template(self, namespace: str, name: str) -> ResourceClaimTemplateBody:
        """The template (the watched one, else a live GET: one created a moment ago is
        never reported missing); raises ``ClaimCreationError`` when there is none."""
        template = self.informers.templates.get(f"{namespace}/{name}")
        if template is None:
            template = cast(
                ResourceClaimTemplateBody | None,
                await self.kube.get_or_none(k.RESOURCE_CLAIM_TEMPLATES, name, namespace=namespace),
            )
        if template is None:
            raise ClaimCreationError(
                f'resourceclaimtemplates.{GROUP} "{name}" not found in namespace {namespace}: '
                "create the template or fix resourceClaimTemplateName",
                waits_for=("template", f"{namespace}/{name}"),
            )
        return template

    async def _check_classes(self, template_name: str, claim_spec: ResourceClaimSpecBody) -> None:
        """Raises ``ClaimCreationError`` when a DeviceClass the claim requests is missing."""
        for class_name in device_class_names(claim_spec):
            if class_name in self.informers.classes:
                continue
            if await self.kube.get_or_none(k.DEVICE_CLASSES, class_name) is None:
                raise ClaimCreationError(
                    f'template {template_name} requests deviceclasses.{GROUP} "{class_name}", which does not exist: '
                    "create the DeviceClass or fix the template",
                    waits_for=("class", class_name),
                )

    async def _reserve_for_bound_pod(
        self, pod: PodBody, entries: list[PodClaim], statuses: dict[str, str | None]
    ) -> None:
        """Upstream syncPod step 5: a pod bound without draco still gets its reservations.

        A claim that already holds reservations is synced first (the stale ones pruned, the
        claim deallocated when none is left): a pod recreated under the same name with the
        old pod's node (a `kubectl replace --force` while the operator was down) is a new
        consumer, so the old pod's allocation is released rather than handed on to it,
        whichever of the pod and the claim the work queue happened to hold first."""
        namespace = pod["metadata"]["namespace"]
        for entry in entries:
            try:
                resolved = resolve_claim(pod, entry, statuses=statuses)
            except ClaimNotCreatedError:
                continue
            if resolved.claim_name is None:
                continue
            claim = await self._reservable(namespace, resolved.claim_name, pod)
            if claim is not None and (claim.get("status") or {}).get("reservedFor"):
                await self.claim_sync.sync(namespace, resolved.claim_name)
                claim = await self._reservable(namespace, resolved.claim_name, pod)
            if claim is None:
                continue
            if resolved.check_owner and not is_claim_for_entry(claim, pod, entry.name):
                continue
            if meta_of(claim).get("deletionTimestamp"):
                continue  # no new reservations on a claim being deleted
            status = claim.setdefault("status", {})
            status["reservedFor"] = [*(status.get("reservedFor") or []), pod_reference(pod)]
            summarize_claim_status(status, deleting=False)
            self.claims.assume(await self.kube.replace_status(k.RESOURCE_CLAIMS, claim))
            log.info("Reserved claim for bound pod", pod=key_of(pod), claim=key_of(claim))

    async def _reservable(self, namespace: str, name: str, pod: PodBody) -> ResourceClaimBody | None:
        """The claim (a live read) when it is allocated and not yet reserved for `pod`."""
        claim = cast(
            ResourceClaimBody | None,
            await self.kube.get_or_none(k.RESOURCE_CLAIMS, name, namespace=namespace),
        )
        if claim is None or not (claim.get("status") or {}).get("allocation") or is_reserved_for(claim, pod):
            return None
        return claim

    async def sync_claim(self, namespace: str, name: str) -> None:
        """Upstream's syncClaim (`claimsync.py`)."""
        await self.claim_sync.sync(namespace, name)
