"""The allocation's writes, one at a time: a claim's finalizer, allocation and reservation;
a claim cleared or given back; the pod pinned to its node and un-gated (or bound there,
when it names draco as its scheduler), marked unschedulable, its generated claims
recorded; Events. The executor (`executor.py`) puts them in a plan's order.

Every write carries the resourceVersion (or the UID) it was decided on. A conflict re-reads
the object and tries again a few times while what was decided still holds (one helper,
:func:`retrying`), else raises the client's ``ConflictError`` and the pod starts over.
What a claim write answers goes into the view at once (``ClusterView.commit``), before its
watch event.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from draco.api import summarize_claim_status
from draco.api.bodies import (
    AllocationResultBody,
    Obj,
    ObjectMetaBody,
    ReferenceBody,
    ResourceClaimBody,
    ResourceClaimStatusBody,
    key_of,
    meta_of,
)
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    FINALIZER,
    NODE_LABEL,
    PLACED_UID_ANNOTATION,
    SCHEDULING_GATE,
)
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube.client import PODS, RESOURCE_CLAIMS, ConflictError, Kube, NotFoundError
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.informers import without_managed_fields
from draco.scheduling.demand import UNSCHEDULABLE_REASON
from draco.scheduling.podclaims import (
    bound_by_draco,
    claim_statuses_annotation,
    controller_pod_uid,
    is_group_reference,
    is_reserved_for,
    pod_reference,
    waits_for_draco,
)
from draco.scheduling.view import ClusterView

__all__ = ["WRITE_ATTEMPTS", "ClaimWrites", "Decided", "emit", "pin_affinity", "retrying"]

log = get_logger(__name__)

#: How many times one write is tried on conflicts before the whole pod starts over.
WRITE_ATTEMPTS: Final = 5

T = TypeVar("T")
R = TypeVar("R")


class Decided(ConflictError):
    """What a write was decided on no longer holds (a claim allocated or deleted
    meanwhile, a pod replaced): it is not tried again, the pod is decided again."""


async def retrying(
    write: Callable[[T], Awaitable[R]],
    current: T,
    *,
    reread: Callable[[], Awaitable[T]],
    what: str,
    attempts: int = WRITE_ATTEMPTS,
) -> R:
    """``write(current)``; on a conflict ``current`` is read again (``reread``, which
    raises when what was decided no longer holds) and the write tried again, up to
    ``attempts`` times. :class:`Decided` is never tried again."""
    for _attempt in range(attempts):
        try:
            return await write(current)
        except Decided:
            raise
        except ConflictError:
            current = await reread()
    raise ConflictError(f"{what}: still conflicting after {attempts} attempts", status=409)


@dataclass
class ClaimWrites:
    """The writes of one allocation service (see the module docstring)."""

    kube: Kube
    view: ClusterView
    #: The claims as watched (a claim given back starts from its newest body there).
    claims: Informer[ResourceClaimBody]
    #: Label allocated claims with their node (``resource.draco.dev/node``): node agents
    #: select on it where the API server does not serve the field ``status.nodeName``.
    node_label: bool = False
    #: The ``PodScheduled=False`` reason of a pod draco binds and cannot place: upstream's
    #: ``Unschedulable``, or, while autoscaling is on, ``WaitingForCapacity`` (its demand pod
    #: speaks for it to the autoscalers: docs/autoscaling.md).
    unschedulable_reason: str = UNSCHEDULABLE_REASON

    # --- claims -----------------------------------------------------------------------------------

    async def write_claim(
        self,
        claim: ResourceClaimBody,
        pod: PodBody,
        allocation: AllocationResultBody | None,
        *,
        node: str | None,
        reference: ReferenceBody | None = None,
    ) -> ResourceClaimBody:
        """Finalizer (unless the claim has it: generated claims are created with it), then
        allocation (if new, with the node the node agent selects on) and the pod's
        reservation in one status update. ``reference``: the consumer to reserve it for
        instead of the pod (a PodGroup, for a claim of the group). If meanwhile the claim
        got an allocation we did not choose (or lost the one it had), the pod starts over."""
        key = key_of(claim)

        async def write(current: ResourceClaimBody) -> ResourceClaimBody:
            meta = meta_of(current)
            status: ResourceClaimStatusBody = {**(current.get("status") or {})}
            if allocation is not None and status.get("allocation"):
                raise Decided(f"claim {key} was allocated meanwhile", status=409)
            if allocation is None and not status.get("allocation"):
                raise Decided(f"claim {key} was deallocated meanwhile", status=409)
            if meta.get("deletionTimestamp"):
                raise Decided(f"claim {key} is being deleted", status=409)
            patch = self._metadata_patch(meta, allocation, node)
            if patch:
                patch["resourceVersion"] = meta["resourceVersion"]
                current = await self._patch_claim(meta, {"metadata": patch})
                status = {**(current.get("status") or {})}
            reserved = _reserved_with(current, pod, reference)
            if allocation is None and reserved is None:
                self.view.commit(current)
                return current
            if allocation is not None:
                status["allocation"] = allocation
                if node:
                    status["nodeName"] = node
            if reserved is not None:
                status["reservedFor"] = reserved
            # Without managedFields: the API server keeps the stored ones when a write
            # brings none, and they are most of a claim's bytes to encode and decode.
            body: ResourceClaimBody = {
                **current,
                "metadata": without_managed_fields(current)["metadata"],
                "status": summarize_claim_status(status, deleting=False),
            }
            written = await self.kube.replace_status(RESOURCE_CLAIMS, body)
            self.view.commit(written)
            log.debug(
                "Wrote claim allocation" if allocation is not None else "Reserved claim",
                claim=key,
                pod=key_of(pod),
            )
            return written

        return await retrying(
            write, claim, reread=lambda: self._get_claim(meta_of(claim)), what=f"claim {key}"
        )

    def _metadata_patch(
        self, meta: ObjectMetaBody, allocation: AllocationResultBody | None, node: str | None
    ) -> Obj:
        """The finalizer, and the node label where agents select on it, when missing."""
        patch: Obj = {}
        if FINALIZER not in (meta.get("finalizers") or []):
            patch["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
        if (
            allocation is not None
            and node
            and self.node_label
            and (meta.get("labels") or {}).get(NODE_LABEL) != node
        ):
            # Before the allocation: an agent never sees an allocation it cannot select.
            patch["labels"] = {NODE_LABEL: node}
        return patch

    async def _get_claim(self, meta: ObjectMetaBody) -> ResourceClaimBody:
        answer = await self.kube.get(RESOURCE_CLAIMS, meta["name"], namespace=meta["namespace"])
        return cast(ResourceClaimBody, answer)

    async def _patch_claim(self, meta: ObjectMetaBody, patch: Obj) -> ResourceClaimBody:
        answer = await self.kube.patch(RESOURCE_CLAIMS, meta["name"], patch, namespace=meta["namespace"])
        return cast(ResourceClaimBody, answer)

    async def deallocate(self, claim: ResourceClaimBody) -> ResourceClaimBody:
        status: ResourceClaimStatusBody = {**(claim.get("status") or {})}
        status.pop("allocation", None)
        status.pop("reservedFor", None)
        status.pop("devices", None)
        deleting = bool(meta_of(claim).get("deletionTimestamp"))
        body: ResourceClaimBody = {**claim, "status": summarize_claim_status(status, deleting=deleting)}
        written = await self.kube.replace_status(RESOURCE_CLAIMS, body)
        self.view.commit(written)
        log.info("Deallocated claim", claim=key_of(claim))
        return written

    async def give_back(self, claim: ResourceClaimBody, *, uids: set[str], group_uid: str) -> bool:
        """Take the reservations of the pods ``uids`` (and of the PodGroup ``group_uid``)
        off the claim, deallocating it when nobody else holds it; whether it held any."""
        key = key_of(claim)

        async def write(current: ResourceClaimBody) -> bool:
            status: ResourceClaimStatusBody = {**(current.get("status") or {})}
            reserved = list(status.get("reservedFor") or [])
            ours = [r for r in reserved if _ours(r, uids, group_uid)]
            if not status.get("allocation") or not ours:
                return False
            others = [r for r in reserved if not _ours(r, uids, group_uid)]
            if not others:
                await self.deallocate(current)
                return True
            status["reservedFor"] = others
            deleting = bool(meta_of(current).get("deletionTimestamp"))
            body: ResourceClaimBody = {**current, "status": summarize_claim_status(status, deleting=deleting)}
            self.view.commit(await self.kube.replace_status(RESOURCE_CLAIMS, body))
            return True

        async def reread() -> ResourceClaimBody:
            meta = meta_of(claim)
            fresh = await self.kube.get_or_none(
                RESOURCE_CLAIMS, str(meta.get("name")), namespace=meta.get("namespace")
            )
            if fresh is None:
                raise NotFoundError(f"claim {key} is gone", status=404)
            self.claims.assume(cast(ResourceClaimBody, fresh))
            return self.claims.get(key) or cast(ResourceClaimBody, fresh)

        try:
            return await retrying(
                write, self.claims.get(key) or claim, reread=reread, what=f"claim {key}", attempts=3
            )
        except (ConflictError, NotFoundError):
            return False

    async def drop_idle_finalizer(self, claim: ResourceClaimBody) -> None:
        """A pending user claim's finalizer, left by an attempt that stopped between the
        finalizer and the allocation: while the pod waits it protects nothing."""
        meta = meta_of(claim)
        finalizers = meta.get("finalizers") or []
        if (
            FINALIZER not in finalizers
            or meta.get("deletionTimestamp")
            or key_of(claim) in self.view.in_flight()
            # A pod's generated claim is created with the finalizer and keeps it until it
            # is deallocated or deleted: taking it off would only cost two writes.
            or controller_pod_uid(claim) is not None
        ):
            return
        try:
            await self.kube.patch(
                RESOURCE_CLAIMS,
                meta["name"],
                {
                    "metadata": {
                        "finalizers": [f for f in finalizers if f != FINALIZER] or None,
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
                namespace=meta["namespace"],
            )
        except (ConflictError, NotFoundError):
            return  # it changed meanwhile: whoever changed it decides
        log.info("Removed the finalizer of a claim that waits unallocated", claim=key_of(claim))

    # --- pods ---------------------------------------------------------------------------------

    async def pin(
        self, pod: PodBody, node: str | None, *, statuses: Mapping[str, str | None] | None
    ) -> PodBody:
        """Required affinity to ``node`` and the gate removed, in one update (only the
        gate when ``node`` is None: a pod without claims is kube-scheduler's to place),
        with the pod's UID in the placed-uid annotation, and the claim-statuses annotation
        when ``statuses`` says what to record.

        A pod that names draco as its scheduler is bound to ``node`` instead (`bind`)."""
        if node is not None and bound_by_draco(pod):
            return await self.bind(pod, node, statuses=statuses)
        meta = pod["metadata"]

        async def write(current: PodBody) -> PodBody:
            spec = current.get("spec") or {}
            gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != SCHEDULING_GATE]
            patch_spec: Obj = {"schedulingGates": gates or None}
            if node is not None:
                patch_spec["affinity"] = pin_affinity(spec.get("affinity"), node)
            annotations = {PLACED_UID_ANNOTATION: str(current["metadata"].get("uid", ""))}
            if statuses is not None:
                annotations[CLAIM_STATUSES_ANNOTATION] = claim_statuses_annotation(statuses)
            patch_meta: Obj = {
                "resourceVersion": current["metadata"]["resourceVersion"],
                "annotations": annotations,
            }
            answer = await self.kube.patch(
                PODS, meta["name"], {"metadata": patch_meta, "spec": patch_spec}, namespace=meta["namespace"]
            )
            return cast(PodBody, answer)

        async def reread() -> PodBody:
            current = cast(PodBody, await self.kube.get(PODS, meta["name"], namespace=meta["namespace"]))
            if current["metadata"].get("uid") != meta.get("uid") or not waits_for_draco(current):
                raise Decided(f"pod {key_of(pod)} was replaced or placed meanwhile", status=409)
            return current

        return await retrying(write, pod, reread=reread, what=f"pod {key_of(pod)}")

    async def bind(self, pod: PodBody, node: str, *, statuses: Mapping[str, str | None] | None) -> PodBody:
        """Bind the pod to ``node`` (the pod's UID the precondition), the placed-uid and
        claim-statuses annotations carried by the binding: one write, where a pinned pod
        takes two (the pin, then kube-scheduler's binding). Answers the pod as bound (the
        binding answers a Status, not the pod; the watch brings the rest)."""
        meta = pod["metadata"]
        annotations = {PLACED_UID_ANNOTATION: str(meta.get("uid", ""))}
        if statuses is not None:
            annotations[CLAIM_STATUSES_ANNOTATION] = claim_statuses_annotation(statuses)
        # The UID is the precondition: a pod replaced under the same name is not bound. The
        # API server refuses (409) a pod bound already, gated or being deleted.
        binding: Obj = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "annotations": annotations,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.kube.create(PODS, binding, subresource="binding")
        return cast(
            PodBody,
            {
                **pod,
                "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), **annotations}},
                "spec": {**(pod.get("spec") or {}), "nodeName": node},
            },
        )

    async def record_statuses(self, pod: PodBody, statuses: Mapping[str, str | None]) -> PodBody | None:
        """Merge-patch the claim-statuses annotation (the UID a precondition); the pod as
        written, or None when it was gone or replaced (the next sync decides again)."""
        meta = meta_of(pod)
        try:
            written = await self.kube.patch(
                PODS,
                str(meta.get("name", "")),
                {
                    "metadata": {
                        "uid": meta.get("uid"),
                        "annotations": {CLAIM_STATUSES_ANNOTATION: claim_statuses_annotation(statuses)},
                    }
                },
                namespace=str(meta.get("namespace", "")),
            )
        except (ConflictError, NotFoundError):
            return None
        return cast(PodBody, written)

    async def mark_unschedulable(self, pod: PodBody, message: str) -> None:
        """``PodScheduled`` False with reason ``Unschedulable`` on a pod draco binds, as
        kube-scheduler marks the pods it cannot place (what `kubectl get`, cluster
        autoscalers and dashboards read; while autoscaling is on, `unschedulable_reason`);
        nothing is written while the condition says so already. Best effort, as the Event
        beside it."""
        reason = self.unschedulable_reason
        transitioned = _now()
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled":
                if (condition.get("status"), condition.get("reason"), condition.get("message")) == (
                    "False",
                    reason,
                    message,
                ):
                    return
                if condition.get("status") == "False":  # the transition was earlier
                    transitioned = str(condition.get("lastTransitionTime") or transitioned)
                break
        patch = {
            "metadata": {"uid": pod["metadata"].get("uid")},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": transitioned,
                    }
                ]
            },
        }
        try:
            await self.kube.patch(
                PODS,
                pod["metadata"]["name"],
                patch,
                namespace=pod["metadata"]["namespace"],
                patch_type="strategic",
                subresource="status",
            )
        except KubeError as exc:
            log.warning("Could not mark the pod unschedulable", pod=key_of(pod), error=str(exc))

    async def event(self, pod: PodBody, reason: str, message: str, *, type_: str = "Warning") -> None:
        """An Event on the pod; best effort: the state is in the objects."""
        await emit(
            self.kube,
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta_of(pod)},
            reason,
            message,
            type_=type_,
        )


async def emit(
    kube: Kube, regarding: Mapping[str, Any], reason: str, message: str, *, type_: str = "Warning"
) -> None:
    """An Event on ``regarding``; a failure is logged (an Event is best effort)."""
    try:
        await kube.emit_event(
            regarding, reason=reason, message=message, type="Normal" if type_ == "Normal" else "Warning"
        )
    except Exception as exc:
        kind = "pod" if regarding.get("kind") == "Pod" else "group"
        log.warning("Could not record event", **{kind: key_of(regarding)}, reason=reason, error=str(exc))


def _reserved_with(
    claim: ResourceClaimBody, pod: PodBody, reference: ReferenceBody | None
) -> list[ReferenceBody] | None:
    """The claim's reservations with the pod's (or ``reference``, its group's) added;
    None when it is there already."""
    entry = reference or pod_reference(pod)
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    if any(r.get("uid") == entry["uid"] for r in reserved) or (
        reference is None and is_reserved_for(claim, pod)
    ):
        return None
    return [*reserved, entry]


def _ours(ref: ReferenceBody, uids: set[str], group_uid: str) -> bool:
    if is_group_reference(ref):
        return bool(group_uid) and ref.get("uid") == group_uid
    return ref.get("resource") == "pods" and str(ref.get("uid", "")) in uids


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pin_affinity(affinity: Mapping[str, Any] | None, node: str) -> dict[str, Any]:
    """``affinity`` with the required node affinity narrowed to ``node``.

    A gated pod may only narrow its required terms (add requirements to each existing
    term); without terms it gets one term naming the node by ``metadata.name``.
    """
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    result = dict(affinity or {})
    node_affinity = dict(result.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []]
    if not terms:
        terms = [{"matchFields": [pin]}]
    else:
        for term in terms:
            term["matchFields"] = [*(term.get("matchFields") or []), pin]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    result["nodeAffinity"] = node_affinity
    return result
