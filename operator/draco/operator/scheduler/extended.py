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
    """
    meta = meta_of(pod)
    namespace = meta.get("namespace", "")
    recorded = extended_resource_status(pod)
    if recorded is not None:
        claim = cached(f"{namespace}/{recorded.resource_claim_name}")
        if claim is None:
            claim = cast(
                ResourceClaimBody | None,
                await kube.get_or_none(RESOURCE_CLAIMS, recorded.resource_claim_name, namespace=namespace),
            )
        if claim is not None and is_controlled_by_pod(claim, pod) and is_extended_resource_claim(claim):
            return pod, claim
    if not requests.asks_for_extended_resources:
        return None  # cpu and memory only (most pods): no class can map them
    built = build_extended_resource_claim(
        pod.get("spec") or {}, resource_class_map(classes), requests=requests
    )
    if built is None:
        return None
    claim = next(
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
