"""The claim half of the lifecycle: upstream's syncClaim, for the lifecycle's
``claim:<ns>/<name>`` keys.

Drop `reservedFor` entries of pods that are gone, replaced (another UID) or done; when that empties `reservedFor` of a claim carrying the finalizer,
clear the allocation (and `status.devices`) in the same UpdateStatus, then remove the
finalizer; unblock deletion of a claim being deleted; and delete a generated claim whose
pod is done or gone. Draco deletes claims of *gone* pods itself (upstream leaves that to
the garbage collector, which a cluster without kube-controller-manager does not run). A
claim created by a user is deallocated when unused but never deleted. Before that, a status
another writer damaged (a reservation of a pod that uses the claim removed, a stale
`state`) is repaired and said so in an Event (`repair.py` decides what).

Every write carries the resourceVersion it was decided on; a conflict re-queues the key.
The claim comes from the claim informer and the pods that use it from the pod informer's
indexes (`operator.informers`); what a write answers goes back into the claim informer.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Final, cast

from draco.api import summarize_claim_status
from draco.api.bodies import ReferenceBody, ResourceClaimBody, ResourceClaimStatusBody, meta_of
from draco.api.constants import FINALIZER, NODE_LABEL
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube import client as k
from draco.kube.client import Kube, NotFoundError, Obj, key_of
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.informers import POD_GROUPS, POD_REFERENCES, POD_UID
from draco.operator.resourceclaim.repair import REASON_STATUS_REPAIRED, StatusRepair, repair_claim_status
from draco.scheduling.podclaims import (
    controller_group_uid,
    controller_pod_uid,
    is_group_reference,
    is_pod_done,
)

__all__ = ["EVENT_COMPONENT", "ClaimSync"]

log = get_logger(__name__)

#: Event source, upstream's component name for this controller.
EVENT_COMPONENT: Final = "resource_claim"


class ClaimSync:
    """Upstream's syncClaim over a `Kube` and the informers of pods and claims."""

    def __init__(
        self,
        kube: Kube,
        *,
        pods: Informer[PodBody],
        claims: Informer[ResourceClaimBody],
        groups: Informer[Obj] | None = None,
    ) -> None:
        self.kube = kube
        self.pods = pods
        self.claims = claims
        #: draco's PodGroups: a claim reserved for one, or made for one, lives as long as it.
        self.groups = groups

    async def sync(self, namespace: str, name: str) -> None:
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
        claim = cast(
            ResourceClaimBody | None,
            await self.kube.get_or_none(k.RESOURCE_CLAIMS, name, namespace=namespace),
        )
        if claim is not None:
            await self._sync_claim(claim)

    async def _sync_claim(self, claim: ResourceClaimBody) -> None:
        namespace = claim["metadata"]["namespace"]
        ckey = key_of(claim)
        users = self.pods.keys_by(POD_REFERENCES, f"claim:{ckey}")
        if owner := controller_pod_uid(claim):
            users |= self.pods.keys_by(POD_UID, owner)
        repair = repair_claim_status(claim, pods=[p for key in users if (p := self.pods.get(key))])
        if repair is not None:
            claim = await self._repair_status(claim, repair)
        status = claim.get("status") or {}
        reserved = list(status.get("reservedFor") or [])
        valid = [ref for ref in reserved if await self._reservation_is_valid(namespace, ref)]
        finalizers = list(meta_of(claim).get("finalizers") or [])
        if len(valid) != len(reserved):
            new_status: ResourceClaimStatusBody = {**status}
            if valid:
                new_status["reservedFor"] = valid
            else:
                new_status.pop("reservedFor", None)
                if FINALIZER in finalizers:
                    # The transition from used to unused deallocates (upstream's syncClaim);
                    # device statuses must go with the devices they describe.
                    new_status.pop("allocation", None)
                    new_status.pop("devices", None)
            deleting = bool(meta_of(claim).get("deletionTimestamp"))
            claim["status"] = summarize_claim_status(new_status, deleting=deleting)
            claim = await self.kube.replace_status(k.RESOURCE_CLAIMS, claim)
            self.claims.assume(claim)
            log.info(
                "Pruned claim reservations",
                claim=ckey,
                dropped=len(reserved) - len(valid),
                deallocated=not valid and FINALIZER in finalizers,
            )
            if not (claim.get("status") or {}).get("allocation") and FINALIZER in finalizers:
                claim = await self._remove_finalizer(claim)
        elif FINALIZER in finalizers and meta_of(claim).get("deletionTimestamp") and not valid:
            if status.get("allocation") or status.get("devices"):
                new_status = {**status}
                new_status.pop("allocation", None)
                new_status.pop("devices", None)
                claim["status"] = summarize_claim_status(new_status, deleting=True)
                claim = await self.kube.replace_status(k.RESOURCE_CLAIMS, claim)
                log.info("Deallocated claim being deleted", claim=ckey)
            claim = await self._remove_finalizer(claim)
        if not valid:
            await self._delete_if_pod_finished(claim)

    async def _repair_status(self, claim: ResourceClaimBody, repair: StatusRepair) -> ResourceClaimBody:
        """Write the repaired status (with the resourceVersion it was decided on) and say so."""
        claim = await self.kube.replace_status(k.RESOURCE_CLAIMS, {**claim, "status": repair.status})
        self.claims.assume(claim)
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

    async def _reservation_is_valid(self, namespace: str, ref: ReferenceBody) -> bool:
        if is_group_reference(ref):
            # A PodGroup's reservation (a claim of the group) holds until the group is gone.
            group = await self._group(namespace, str(ref.get("name", "")))
            return group is not None and meta_of(group).get("uid") == ref.get("uid")
        if ref.get("apiGroup") or ref.get("resource") != "pods":
            log.warning("Unsupported reservedFor entry kept", namespace=namespace, entry=ref)
            return True
        uid = ref.get("uid")
        if self.pods.was_deleted(str(uid or "")):
            return False
        pod = await self._pod(namespace, str(ref.get("name", "")), uid=uid)
        if pod is None or meta_of(pod).get("uid") != uid:
            return False
        return not is_pod_done(pod)

    async def _group(self, namespace: str, name: str) -> Obj | None:
        """The PodGroup from the informer, else a live GET (one not seen yet is not gone)."""
        group = self.groups.get(f"{namespace}/{name}") if self.groups is not None else None
        if group is not None:
            return group
        return await self.kube.get_or_none(POD_GROUPS, name, namespace=namespace)

    async def _pod(self, namespace: str, name: str, *, uid: str | None = None) -> PodBody | None:
        """The pod from the informer; when it doesn't know it (or knows another pod of that
        name than the one with `uid`), a live GET makes sure the pod is really gone or
        replaced rather than not yet seen: a stale cache must never delete a live claim."""
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is not None and (uid is None or meta_of(pod).get("uid") == uid):
            return pod
        return cast(PodBody | None, await self.kube.get_or_none(k.PODS, name, namespace=namespace))

    async def _remove_finalizer(self, claim: ResourceClaimBody) -> ResourceClaimBody:
        """Drop the finalizer of a deallocated claim, and with it the node label an older
        operator may have put there."""
        meta = claim["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        if NODE_LABEL in (meta.get("labels") or {}):
            meta["labels"] = {key: v for key, v in meta["labels"].items() if key != NODE_LABEL}
        updated = await self.kube.replace(k.RESOURCE_CLAIMS, claim)
        log.info("Removed claim finalizer", claim=key_of(claim))
        # Being deleted, it is gone now; its DELETED event follows this last state.
        self.claims.assume(updated)
        return updated

    async def _delete_if_pod_finished(self, claim: ResourceClaimBody) -> None:
        """Delete a generated claim whose controlling pod is done, replaced or gone."""
        meta = meta_of(claim)
        if meta.get("deletionTimestamp"):
            return
        if (group_uid := controller_group_uid(claim)) is not None:
            await self._delete_if_group_gone(claim, group_uid)
            return
        owner_uid = controller_pod_uid(claim)
        if owner_uid is None:
            return  # a user's claim: deallocated, never deleted
        owner_name = next(
            ref["name"] for ref in meta.get("ownerReferences") or [] if ref.get("uid") == owner_uid
        )
        if self.pods.was_deleted(owner_uid):
            pod: PodBody | None = None
        else:
            pod = await self._pod(meta["namespace"], owner_name, uid=owner_uid)
        if pod is not None and meta_of(pod).get("uid") == owner_uid and not is_pod_done(pod):
            return
        if await self._delete_unchanged(claim):
            log.info(
                "Deleted claim of finished pod",
                claim=key_of(claim),
                pod=f"{meta['namespace']}/{owner_name}",
                reason="gone"
                if pod is None
                else ("replaced" if meta_of(pod).get("uid") != owner_uid else "done"),
            )

    async def _delete_if_group_gone(self, claim: ResourceClaimBody, group_uid: str) -> None:
        """Delete a claim made for a PodGroup that is gone (its owner's garbage collection,
        which a cluster without kube-controller-manager does not run)."""
        meta = meta_of(claim)
        name = next(ref["name"] for ref in meta.get("ownerReferences") or [] if ref.get("uid") == group_uid)
        group = await self._group(meta["namespace"], name)
        if group is not None and meta_of(group).get("uid") == group_uid:
            return
        if await self._delete_unchanged(claim):
            log.info(
                "Deleted claim of a PodGroup that is gone",
                claim=key_of(claim),
                group=f"{meta['namespace']}/{name}",
            )

    async def _delete_unchanged(self, claim: ResourceClaimBody) -> bool:
        """Delete `claim` with preconditions (this very claim, unchanged since the decision
        was made); whether this call deleted it."""
        meta = meta_of(claim)
        try:
            return await self.kube.delete(
                k.RESOURCE_CLAIMS,
                meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            )
        except NotFoundError:
            return False
