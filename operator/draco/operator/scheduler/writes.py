"""The allocation's writes: a claim's finalizer, allocation and reservation; a claim
cleared; the pod pinned to its node and un-gated (or bound there, when it names draco as
its scheduler); binding conditions checked; Events.

Every write carries the resourceVersion it was decided on; a conflict re-reads and tries
again a few times (``WRITE_ATTEMPTS``) while what was decided still holds, else raises
the client's ``ConflictError`` and the pod starts over. What a write answers goes into
the view at once (``ClusterView.commit``), before its watch event.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from draco.api import summarize_claim_status
from draco.api.bodies import (
    AllocationResultBody,
    ObjectMetaBody,
    ReferenceBody,
    ResourceClaimBody,
    ResourceClaimStatusBody,
    key_of,
    meta_of,
)
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    DEFAULT_SCHEDULER_NAME,
    FINALIZER,
    NODE_LABEL,
    PLACED_UID_ANNOTATION,
    SCHEDULING_GATE,
)
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube.client import PODS, RESOURCE_CLAIMS, ConflictError, Kube, NotFoundError, Obj
from draco.logs import get_logger
from draco.operator.informers import without_managed_fields
from draco.operator.metrics import BINDING_CONDITIONS_ALLOCATIONS, BINDING_CONDITIONS_WAIT_DURATION
from draco.scheduling.demand import UNSCHEDULABLE_REASON
from draco.scheduling.podclaims import (
    bound_by_draco,
    claim_statuses_annotation,
    controller_pod_uid,
    is_reserved_for,
    pod_reference,
    waits_for_draco,
)
from draco.scheduling.view import ClusterView

__all__ = ["REASON_BINDING_FAILED", "REASON_BINDING_PENDING", "WRITE_ATTEMPTS", "ClaimWrites", "pin_affinity"]

log = get_logger(__name__)

#: Event reasons of upstream's scheduler while devices are being bound.
REASON_BINDING_PENDING: Final = "BindingConditionsPending"
REASON_BINDING_FAILED: Final = "BindingConditionsFailed"
#: A claim's ``status.allocation``.
_Allocation = AllocationResultBody
#: How many times one write is retried on conflicts before the whole pod starts over.
WRITE_ATTEMPTS: Final = 5


@dataclass
class ClaimWrites:
    """The writes of one allocation service (see the module docstring)."""

    kube: Kube
    view: ClusterView
    #: How long devices may take to meet their binding conditions (``--binding-timeout``).
    binding_timeout_s: float
    #: Label allocated claims with their node (``resource.draco.dev/node``): node agents
    #: select on it where the API server does not serve the field ``status.nodeName``.
    node_label: bool = False
    #: The ``PodScheduled=False`` reason of a pod draco binds and cannot place: upstream's
    #: ``Unschedulable``, or, while autoscaling is on, ``WaitingForCapacity`` (its demand pod
    #: speaks for it to the autoscalers: docs/autoscaling.md).
    unschedulable_reason: str = UNSCHEDULABLE_REASON

    async def write_claim(
        self,
        claim: ResourceClaimBody,
        pod: PodBody,
        allocation: _Allocation | None,
        *,
        node: str | None,
        reference: ReferenceBody | None = None,
    ) -> ResourceClaimBody:
        """Finalizer (unless the claim has it: generated claims are created with it), then
        allocation (if new, with the node the node agent selects on) and the pod's
        reservation in one status update. ``reference``: the consumer to reserve it for
        instead of the pod (a PodGroup, for a claim of the group).

        Conflicts re-read the claim and try again; if meanwhile the claim got an
        allocation we did not choose (or lost the one it had), the pod starts over.
        """
        key = key_of(claim)
        current = claim
        for _attempt in range(WRITE_ATTEMPTS):
            meta = meta_of(current)
            status: ResourceClaimStatusBody = {**(current.get("status") or {})}
            if allocation is not None and status.get("allocation"):
                raise ConflictError(f"claim {key} was allocated meanwhile", status=409)
            if allocation is None and not status.get("allocation"):
                raise ConflictError(f"claim {key} was deallocated meanwhile", status=409)
            if meta.get("deletionTimestamp"):
                raise ConflictError(f"claim {key} is being deleted", status=409)
            try:
                patch = self._metadata_patch(meta, allocation, node)
                if patch:
                    patch["resourceVersion"] = meta["resourceVersion"]
                    current = await self._patch_claim(meta, {"metadata": patch})
                    meta = meta_of(current)
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
            except ConflictError:
                current = await self._get_claim(meta_of(claim))
                continue
            self.view.commit(written)
            log.debug(
                "Wrote claim allocation" if allocation is not None else "Reserved claim",
                claim=key,
                pod=key_of(pod),
            )
            return written
        raise ConflictError(f"claim {key}: still conflicting after {WRITE_ATTEMPTS} attempts", status=409)

    def _metadata_patch(self, meta: ObjectMetaBody, allocation: _Allocation | None, node: str | None) -> Obj:
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
        current = pod
        for _attempt in range(WRITE_ATTEMPTS):
            spec = current.get("spec") or {}
            gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != SCHEDULING_GATE]
            patch_spec: Obj = {"schedulingGates": gates or None}
            if node is not None:
                patch_spec["affinity"] = pin_affinity(spec.get("affinity"), node)
            patch_meta: Obj = {"resourceVersion": current["metadata"]["resourceVersion"]}
            annotations = {PLACED_UID_ANNOTATION: str(current["metadata"].get("uid", ""))}
            if statuses is not None:
                annotations[CLAIM_STATUSES_ANNOTATION] = claim_statuses_annotation(statuses)
            patch_meta["annotations"] = annotations
            patch = {"metadata": patch_meta, "spec": patch_spec}
            try:
                return cast(
                    PodBody,
                    await self.kube.patch(
                        PODS, current["metadata"]["name"], patch, namespace=current["metadata"]["namespace"]
                    ),
                )
            except ConflictError:
                current = cast(
                    PodBody,
                    await self.kube.get(
                        PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"]
                    ),
                )
                if current["metadata"].get("uid") != pod["metadata"].get("uid") or not waits_for_draco(
                    current
                ):
                    raise
        raise ConflictError(
            f"pod {key_of(pod)}: still conflicting after {WRITE_ATTEMPTS} attempts", status=409
        )

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

    async def mark_unschedulable(self, pod: PodBody, message: str) -> None:
        """``PodScheduled`` False with reason ``Unschedulable`` on a pod draco binds, as
        kube-scheduler marks the pods it cannot place (what `kubectl get`, cluster
        autoscalers and dashboards read; while autoscaling is on, `unschedulable_reason`);
        nothing is written while the condition says so already. Best effort, as the Event
        beside it."""
        reason = self.unschedulable_reason
        transitioned = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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

    async def drop_idle_finalizer(self, claim: ResourceClaimBody) -> None:
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

    async def check_binding(
        self, pod: PodBody, claims: Sequence[ResourceClaimBody]
    ) -> tuple[str, float | None] | None:
        """None when every binding condition of every claim is True; otherwise the outcome
        (waiting, with when to look again, or a cleared allocation to start over)."""
        pending: list[str] = []
        deadline_in: float | None = None
        waited = 0.0
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
                elapsed = _age_s(allocation.get("allocationTimestamp"))
                waited = max(waited, elapsed)
                if failed or elapsed >= self.binding_timeout_s:
                    why = (
                        f"binding failure condition {', '.join(failed)} is True"
                        + _failure_detail(status, device, failed)
                        if failed
                        else f"binding conditions were not met within {self.binding_timeout_s:g}s"
                    )
                    try:
                        await self.deallocate(claim)
                    except BaseException:
                        _binding_ended(pod, claims, "error", elapsed)
                        raise
                    _binding_ended(pod, claims, "failure" if failed else "timeout", elapsed)
                    await self.event(
                        pod,
                        REASON_BINDING_FAILED,
                        f"ResourceClaim {key_of(claim)} device {'/'.join(device)}: {why}; "
                        "the allocation was cleared and the pod is retried after its backoff",
                    )
                    return ("binding_failed", 0.0)
                missing = [c for c in wanted if have.get(c) != "True"]
                if missing:
                    pending.append(
                        f"{key_of(claim)} device {'/'.join(device)} waits for {', '.join(missing)}"
                    )
                    left = max(self.binding_timeout_s - elapsed, 0.0)
                    deadline_in = left if deadline_in is None else min(deadline_in, left)
        if not pending:
            if waited:
                _binding_ended(pod, claims, "success", waited)
            return None
        await self.event(
            pod,
            REASON_BINDING_PENDING,
            "waiting for binding conditions: " + "; ".join(pending),
            type_="Normal",
        )
        return ("waiting", (deadline_in or 0.0) + 0.1)

    async def event(self, pod: PodBody, reason: str, message: str, *, type_: str = "Warning") -> None:
        try:
            await self.kube.emit_event(
                {"apiVersion": "v1", "kind": "Pod", "metadata": meta_of(pod)},
                reason=reason,
                message=message,
                type="Normal" if type_ == "Normal" else "Warning",
            )
        except Exception as exc:  # an Event is best effort; the state is in the objects
            log.warning("Could not record event", pod=key_of(pod), reason=reason, error=str(exc))


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


def _binding_ended(pod: PodBody, claims: Sequence[ResourceClaimBody], status: str, waited_s: float) -> None:
    """kube-scheduler's binding-condition metrics for a pod's wait that ended with `status`:
    per allocated device result, the wait (since the allocation was written), and the
    count of those with binding conditions."""
    profile = str((pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER_NAME)
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            driver = str(result.get("driver", ""))
            BINDING_CONDITIONS_WAIT_DURATION.labels(profile=profile, driver=driver, status=status).observe(
                max(waited_s, 0.0)
            )
            if result.get("bindingConditions"):
                BINDING_CONDITIONS_ALLOCATIONS.labels(profile=profile, driver=driver, status=status).inc()


def _age_s(stamp: object) -> float:
    if not isinstance(stamp, str) or not stamp:
        return 0.0
    try:
        then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds()


def _device_conditions(status: ResourceClaimStatusBody) -> dict[tuple[str, str, str], dict[str, str]]:
    found: dict[tuple[str, str, str], dict[str, str]] = {}
    for entry in status.get("devices") or []:
        device = (entry.get("driver", ""), entry.get("pool", ""), entry.get("device", ""))
        found[device] = {str(c.get("type")): str(c.get("status")) for c in entry.get("conditions") or []}
    return found


def _failure_detail(
    status: ResourceClaimStatusBody, device: tuple[str, str, str], failed: Sequence[str]
) -> str:
    """The cause the node gave with the failure condition (its reason and message), so the
    pod's Event says why, not only that a condition turned True."""
    for entry in status.get("devices") or []:
        if (entry.get("driver", ""), entry.get("pool", ""), entry.get("device", "")) != device:
            continue
        for condition in entry.get("conditions") or []:
            if condition.get("type") in failed and condition.get("message"):
                return f" ({condition.get('reason') or 'no reason'}: {condition['message']})"
    return ""


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
