"""The safety net: a pod kube-scheduler refused on the node draco chose is placed again
(and so is a pod draco bound itself that the kubelet rejected at admission).

The decisions are pure (`draco.scheduling.refusal`); this is their execution. Every pod
watch event passes :meth:`Refusals.observe`; a pod refused where draco pinned it (its
``PodScheduled`` condition False for ``Unschedulable``) is looked at again after
``grace_s`` (kube-scheduler retries on its own, and a refusal that was a moment's
disagreement, such as a pod on its way out, clears by itself). If it is still refused:

1. a Warning Event ``PlacementRefused`` on the pod names the node and kube-scheduler's
   reason;
2. the pod's reservations come off its claims, and a claim left with no consumer is
   deallocated: its devices are free at once, whatever happens to the pod;
3. after the line's backoff (the first refusal at once, then 1 s doubling up to 60 s) the
   pod is deleted (with a ``DisruptionTarget`` condition, so a Job's pod failure policy can
   ignore it) and a bare pod is created again under its name, pinless and gated, with the
   nodes that refused its line in an annotation that keeps the next placement off them.
   A pod with a controller is made again by it; its refused nodes are kept here, per
   controller, for :data:`REMEMBER_S` (lost on a restart, which costs one more refusal).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from draco.api import summarize_claim_status
from draco.api.bodies import ResourceClaimBody, ResourceClaimStatusBody, key_of, meta_of
from draco.api.constants import DISRUPTION_TARGET_CONDITION, FINALIZER
from draco.api.corebodies import PodBody
from draco.errors import AlreadyExistsError, ConflictError, KubeError, NotFoundError
from draco.kube.client import PODS, RESOURCE_CLAIMS, Kube
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.informers import CLAIM_PODS
from draco.scheduling.podclaims import bound_by_draco
from draco.scheduling.refusal import (
    backoff_s,
    has_controller,
    refusal_message,
    refusals,
    refused_by,
    refused_node,
    refused_nodes,
    replacement,
)
from draco.scheduling.view import ClusterView

__all__ = ["DEFAULT_GRACE_S", "REASON_PLACEMENT_REFUSED", "REMEMBER_S", "Refusals"]

log = get_logger(__name__)

#: Warning on a pod kube-scheduler refused where draco pinned it.
REASON_PLACEMENT_REFUSED: Final = "PlacementRefused"
#: The DisruptionTarget condition's reason on a refused pod before it is deleted.
DISRUPTION_REASON: Final = "PlacementRefused"
#: How long a refusal must last before draco acts.
DEFAULT_GRACE_S: Final = 5.0
#: How long the refused nodes of a controller's pods are kept.
REMEMBER_S: Final = 600.0
#: How long the deleted pod of a bare pod may take to go before the copy is created.
GONE_TIMEOUT_S: Final = 30.0


@dataclass
class _Line:
    """What is remembered of a controller's refused pods."""

    nodes: list[str] = field(default_factory=list)
    count: int = 0
    until: float = 0.0


@dataclass
class Refusals:
    """See the module docstring."""

    kube: Kube
    view: ClusterView
    pods: Informer[PodBody]
    claims: Informer[ResourceClaimBody]
    #: Puts a pod key on the work queue after a delay (the controller's queue).
    enqueue_after: Callable[[str, float], None]
    grace_s: float = DEFAULT_GRACE_S
    clock: Callable[[], float] = time.monotonic
    #: Refused pods seen: key -> (uid, when first seen).
    _seen: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: Controllers' refused lines: owner UID -> what is remembered.
    _lines: dict[str, _Line] = field(default_factory=dict)

    # --- watching ----------------------------------------------------------------------

    def observe(self, pod: PodBody) -> None:
        """A pod watch event: note a refusal (the sync comes after the grace)."""
        key, uid = key_of(pod), str(meta_of(pod).get("uid", ""))
        if refused_node(pod) is None:
            self._seen.pop(key, None)
            return
        seen = self._seen.get(key)
        if seen is not None and seen[0] == uid:
            return
        self._seen[key] = (uid, self.clock())
        log.info(
            "Pod refused where draco placed it", pod=key, node=refused_node(pod), message=refusal_message(pod)
        )
        self.enqueue_after(key, self.grace_s)

    def forget(self, key: str) -> None:
        self._seen.pop(key, None)

    def avoided_nodes(self, pod: PodBody) -> frozenset[str]:
        """Nodes that refused the pod's line before: its annotation (bare pods) and what is
        remembered of its controller's pods."""
        nodes = set(refused_nodes(pod))
        line = self._line_of(pod)
        if line is not None:
            nodes.update(line.nodes)
        return frozenset(nodes)

    def _line_of(self, pod: PodBody) -> _Line | None:
        for ref in meta_of(pod).get("ownerReferences") or []:
            if ref.get("controller") is True:
                line = self._lines.get(str(ref.get("uid", "")))
                if line is not None and line.until < self.clock():
                    del self._lines[str(ref.get("uid", ""))]
                    return None
                return line
        return None

    # --- acting ----------------------------------------------------------------------

    async def sync(self, key: str) -> float | None:
        """Act on a refusal that outlasted the grace (the work queue's sync)."""
        pod = self.pods.get(key)
        seen = self._seen.get(key)
        if pod is None or seen is None or seen[0] != meta_of(pod).get("uid"):
            self._seen.pop(key, None)
            return None
        node = refused_node(pod)
        if node is None:
            self._seen.pop(key, None)
            return None
        left = seen[1] + self.grace_s - self.clock()
        if left > 0:
            return left
        count = self._count(pod)
        released = await self._release(pod)
        if released is not None or bound_by_draco(pod):
            # A Failed pod's claims may be released by the lifecycle first: told all the same.
            await self._event(pod, node, count, released or [])
        wait = seen[1] + self.grace_s + backoff_s(count) - self.clock()
        if wait > 0:
            return wait
        await self._place_again(pod, node, count)
        self._seen.pop(key, None)
        return None

    def _count(self, pod: PodBody) -> int:
        """Which refusal of its line this is (1 for the first)."""
        line = self._line_of(pod)
        return max(refusals(pod), line.count if line is not None else 0) + 1

    async def _event(self, pod: PodBody, node: str, count: int, released: list[str]) -> None:
        how = (
            "its controller makes a new one"
            if has_controller(pod) and bound_by_draco(pod)  # Failed: its controller replaces it
            else "the pod is deleted and its controller makes a new one"
            if has_controller(pod)
            else "the pod is created again under its name and placed like a new pod"
        )
        wait = backoff_s(count)
        message = (
            f"{refused_by(pod)} refused node {node}, where draco had placed the pod: {refusal_message(pod)}. "
            f"draco released its devices ({', '.join(released) or 'none held'}); {how}"
            + (f" in {wait:g}s (refusal {count} of this pod's line)" if wait else "")
            + f"; node {node} is avoided next time"
        )
        try:
            await self.kube.emit_event(
                {"apiVersion": "v1", "kind": "Pod", "metadata": meta_of(pod)},
                reason=REASON_PLACEMENT_REFUSED,
                message=message[:1024],
                type="Warning",
            )
        except KubeError as exc:  # best effort: the state is in the objects
            log.warning("Could not record event", pod=key_of(pod), error=str(exc))

    async def _release(self, pod: PodBody) -> list[str] | None:
        """Take the pod off its claims' reservations, deallocating a claim left unused;
        the claims released, or None when none was reserved for it any more."""
        uid = str(meta_of(pod).get("uid", ""))
        released: list[str] = []
        for key in sorted(self.claims.keys_by(CLAIM_PODS, uid)):
            claim = self.claims.get(key)
            if claim is None:
                continue
            reserved = list((claim.get("status") or {}).get("reservedFor") or [])
            kept = [r for r in reserved if r.get("uid") != uid]
            if len(kept) == len(reserved):
                continue
            status: ResourceClaimStatusBody = {**(claim.get("status") or {})}
            if kept:
                status["reservedFor"] = kept
            else:
                status.pop("reservedFor", None)
                if FINALIZER in (meta_of(claim).get("finalizers") or []):
                    status.pop("allocation", None)
                    status.pop("devices", None)
            deleting = bool(meta_of(claim).get("deletionTimestamp"))
            body: ResourceClaimBody = {**claim, "status": summarize_claim_status(status, deleting=deleting)}
            try:
                written = await self.kube.replace_status(RESOURCE_CLAIMS, body)
            except (ConflictError, NotFoundError):
                raise ConflictError(
                    f"claim {key} changed while its reservation was released", status=409
                ) from None
            self.view.commit(written)
            released.append(key)
            log.info("Released a refused pod's claim", pod=key_of(pod), claim=key, deallocated=not kept)
        return released or None

    async def _place_again(self, pod: PodBody, node: str, count: int) -> None:
        meta = meta_of(pod)
        name, namespace, uid = str(meta["name"]), str(meta["namespace"]), str(meta.get("uid", ""))
        if has_controller(pod):
            for ref in meta.get("ownerReferences") or []:
                if ref.get("controller") is True:
                    line = self._lines.setdefault(str(ref.get("uid", "")), _Line())
                    line.nodes = list(dict.fromkeys([*line.nodes, node]))[-16:]
                    line.count = max(line.count, count)
                    line.until = self.clock() + REMEMBER_S
            if bound_by_draco(pod):
                return  # Failed at the kubelet's admission: its controller makes a new one already
            await self._delete(pod)
            log.info(
                "Deleted a refused pod for its controller to make again", pod=f"{namespace}/{name}", node=node
            )
            return
        body = replacement(pod, node=node)
        if not await self._delete(pod):
            return
        deadline = self.clock() + GONE_TIMEOUT_S
        while self.clock() < deadline:
            current = await self.kube.get_or_none(PODS, name, namespace=namespace)
            if current is None:
                break
            if meta_of(current).get("uid") != uid:
                return  # someone else made a pod of that name meanwhile: theirs stands
            await asyncio.sleep(0.2)
        else:
            log.warning("A refused pod did not go in time; not made again", pod=f"{namespace}/{name}")
            return
        try:
            await self.kube.create(PODS, body, namespace=namespace)
        except AlreadyExistsError:
            return
        log.info("Made a refused pod again", pod=f"{namespace}/{name}", refused_on=node, refusals=count)

    async def _delete(self, pod: PodBody) -> bool:
        """DisruptionTarget, then delete with a UID precondition; False when the pod is
        gone or replaced meanwhile."""
        meta = meta_of(pod)
        name, namespace, uid = str(meta["name"]), str(meta["namespace"]), str(meta.get("uid", ""))
        condition = {
            "type": DISRUPTION_TARGET_CONDITION,
            "status": "True",
            "reason": DISRUPTION_REASON,
            "message": f"draco: {refused_by(pod)} refused the node draco placed the pod on; placed again",
        }
        try:
            await self.kube.patch(
                PODS,
                name,
                {"metadata": {"uid": uid}, "status": {"conditions": [condition]}},
                namespace=namespace,
                patch_type="strategic",
                subresource="status",
            )
            return await self.kube.delete(PODS, name, namespace=namespace, uid=uid)
        except (ConflictError, NotFoundError):
            return False
