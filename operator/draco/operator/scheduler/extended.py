"""The special claim of a gated pod that asks for extended resources backed by DeviceClasses.

Upstream's scheduler builds this claim in memory per node and creates it at PreBind already
allocated. Draco builds the same requests (:mod:`draco.scheduling.extendedresources`; in
draco they do not depend on the node, because every node that has devices of a mapped class
advertises the resource, see :mod:`nodecapacity`), creates the claim before allocating, and
from then on it is one more claim of the pod: the allocation service allocates it together
with the pod's other claims on one node, the lifecycle deletes it when the pod is done or
gone (it is controlled by the pod), and the eviction controller finds it through its owner.

Crash safety: the claim is created first (``generateName``, owned by the pod as controller,
annotated ``resource.draco.dev/extended-resource-claim: "true"``), then the pod's
``resource.draco.dev/extended-resource-claim-status`` annotation records its name and the
request-to-container mappings, with the pod's resourceVersion as precondition. A crash in
between leaves an unallocated claim owned by the pod, which the next sync adopts (or, if
the watch has not delivered it yet, the lifecycle deletes with the pod).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from draco.api.bodies import ResourceClaimBody, meta_of
from draco.api.constants import (
    API_VERSION,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION,
    FINALIZER,
    KIND_RESOURCE_CLAIM,
)
from draco.api.corebodies import PodBody
from draco.kube.client import PODS, RESOURCE_CLAIMS, Kube
from draco.logs import get_logger
from draco.scheduling.eviction import is_extended_resource_claim
from draco.scheduling.extendedresources import (
    ExtendedResourceClaim,
    ExtendedResourceStatus,
    build_extended_resource_claim,
    extended_resource_status,
    extended_resource_status_annotation,
    resource_class_map,
)
from draco.scheduling.podclaims import is_controlled_by_pod
from draco.scheduling.requests import PodRequests

__all__ = ["special_claim_for"]

log = get_logger(__name__)


async def special_claim_for(
    *,
    kube: Kube,
    pod: PodBody,
    classes: Iterable[Mapping[str, Any]],
    cached: Callable[[str], ResourceClaimBody | None],
    unallocated: Iterable[ResourceClaimBody],
    requests: PodRequests,
) -> tuple[PodBody, ResourceClaimBody] | None:
    """The pod (as last written) and its special claim, created and recorded if needed;
    None when the pod asks for no resource a class maps (kube-scheduler's alone then).

    ``cached(key)`` is a current watched body of a claim or None (then it is read);
    ``unallocated`` are the watched unallocated claims, where an orphan of a crash between
    the create and the record is found; ``requests`` are the pod's (read once per attempt).
    Raises the client's ``ConflictError`` when the pod
    changed meanwhile (the caller re-reads and decides again).

    An unallocated special claim whose requests the classes no longer make (made while
    other DeviceClasses mapped the pod's resources, deleted since) is deleted, and a new
    one made; upstream's scheduler finds such a claim unschedulable and deletes it in
    PostFilter. An allocated one stands.
    """
    meta = meta_of(pod)
    namespace = meta.get("namespace", "")
    claim = await _recorded(kube, pod, cached)
    if claim is not None and (claim.get("status") or {}).get("allocation"):
        return pod, claim  # allocated for the pod: it stands, whatever the classes do now
    built = (
        build_extended_resource_claim(pod.get("spec") or {}, resource_class_map(classes), requests=requests)
        if requests.asks_for_extended_resources  # cpu and memory only (most pods): no class maps them
        else None
    )
    if claim is not None and built is not None and built.built(claim.get("spec") or {}):
        return pod, claim
    if claim is None and built is not None:
        claim = _orphan(pod, unallocated)
    if claim is not None and (built is None or not built.built(claim.get("spec") or {})):
        # Made while other classes mapped the pod's resources (created and deleted since):
        # as upstream's PostFilter, the stale claim goes and the pod gets one made now.
        await _discard(kube, pod, claim, remade=built is not None)
        claim = None
    if built is None:
        return None  # no class maps what the pod asks for: kube-scheduler's alone
    if claim is None:
        claim = await _create(kube, pod, built)
    # An adopted claim was built from the same pod spec (immutable where it matters:
    # container names and resource requests); only a class change between the create and
    # this record could make them differ, and then the claim's own requests still decide.
    status = ExtendedResourceStatus(meta_of(claim).get("name", ""), built.mappings)
    written = await kube.patch(
        PODS,
        meta.get("name", ""),
        {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {
                    EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION: extended_resource_status_annotation(status)
                },
            }
        },
        namespace=namespace,
    )
    return cast(PodBody, written), claim


async def _recorded(
    kube: Kube, pod: PodBody, cached: Callable[[str], ResourceClaimBody | None]
) -> ResourceClaimBody | None:
    """The special claim the pod's record names, when it is the pod's (None: no record, or
    the claim is gone or not the pod's special claim)."""
    recorded = extended_resource_status(pod)
    if recorded is None:
        return None
    namespace = meta_of(pod).get("namespace", "")
    found = cached(f"{namespace}/{recorded.resource_claim_name}")
    if found is None:
        found = cast(
            ResourceClaimBody | None,
            await kube.get_or_none(RESOURCE_CLAIMS, recorded.resource_claim_name, namespace=namespace),
        )
    if found is not None and is_controlled_by_pod(found, pod) and is_extended_resource_claim(found):
        return found
    return None


def _orphan(pod: PodBody, unallocated: Iterable[ResourceClaimBody]) -> ResourceClaimBody | None:
    """An unallocated special claim of the pod, one a crash between the create and the
    record left unrecorded; None when there is none."""
    namespace = meta_of(pod).get("namespace", "")
    return next(
        (
            c
            for c in unallocated
            if meta_of(c).get("namespace") == namespace
            and not meta_of(c).get("deletionTimestamp")
            and is_extended_resource_claim(c)
            and is_controlled_by_pod(c, pod)
        ),
        None,
    )


async def _discard(kube: Kube, pod: PodBody, claim: ResourceClaimBody, *, remade: bool) -> None:
    """Delete the pod's unallocated special claim whose requests the DeviceClasses no longer
    make (its UID a precondition: this claim, not a namesake), and tell the pod."""
    meta, claim_meta = meta_of(pod), meta_of(claim)
    key = f"{claim_meta.get('namespace', '')}/{claim_meta.get('name', '')}"
    await kube.delete(
        RESOURCE_CLAIMS,
        str(claim_meta.get("name", "")),
        namespace=str(claim_meta.get("namespace", "")),
        uid=str(claim_meta.get("uid", "")) or None,
    )
    what = "a new one is made for the classes that map them now" if remade else "no class maps them now"
    log.info(
        "Deleted a stale extended-resource claim",
        pod=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        claim=key,
        remade=remade,
    )
    await kube.emit_event(
        {"apiVersion": "v1", "kind": "Pod", "metadata": meta},
        reason="ExtendedResourceClaimReplaced",
        message=f"ResourceClaim {key} was made for the DeviceClasses that mapped the pod's extended "
        f"resources then; it was deleted and {what}",
        type="Normal",
    )


async def _create(kube: Kube, pod: PodBody, built: ExtendedResourceClaim) -> ResourceClaimBody:
    """Create the pod's special claim: generated name, owned by the pod, with draco's
    finalizer from the start, as generated claims are."""
    meta = meta_of(pod)
    namespace = meta.get("namespace", "")
    body: ResourceClaimBody = {
        "apiVersion": API_VERSION,
        "kind": KIND_RESOURCE_CLAIM,
        "metadata": {
            "generateName": f"{meta.get('name', '')}-extended-resources-",
            "namespace": namespace,
            # As generated claims: with the finalizer from the start (one write less).
            "finalizers": [FINALIZER],
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                    "controller": True,
                }
            ],
        },
        "spec": built.claim_spec(),
    }
    claim = await kube.create(RESOURCE_CLAIMS, body, namespace=namespace)
    log.info(
        "Created extended-resource claim",
        pod=f"{namespace}/{meta.get('name', '')}",
        claim=meta_of(claim).get("name", ""),
        requests=len(built.requests),
    )
    return claim
