"""A pod recreated under the same name (new UID, the old pod's node) is a new consumer.

Found by tests/e2e/test_placement.py failing about one run in three: the operator, started
after a `kubectl replace --force`, meets the old pod's reservation and the new, already
bound pod together. Synced in the order "claim, then pod", the stale reservation is pruned
and the claim deallocated; in the order "pod, then claim" the bound pod's step 5 reserved
the still-allocated claim for the new pod, which then kept the old pod's devices (and was
evicted with them under a NoExecute taint). Here the pod is synced first, the order that
failed; the claim must be released all the same.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from draco.api import summarize_claim_status
from draco.api.constants import CLAIMS_ANNOTATION, FINALIZER
from draco.kube import client as k
from draco.operator.informers import Informers
from draco.operator.resourceclaim.lifecycle import Lifecycle
from draco.runtime.workqueue import WorkQueue
from tests.unit.fakekube import FakeKube
from tests.unit.operator.test_lifecycle_intake import Nothing


def bound_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimName": "c"}])},
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Pending"},
    }


def claim(*, reserved_for: list[tuple[str, str]]) -> dict[str, Any]:
    status = {
        "allocation": {"devices": {"results": []}, "nodeSelector": None},
        "reservedFor": [{"resource": "pods", "name": name, "uid": uid} for name, uid in reserved_for],
    }
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "claim-c", "finalizers": [FINALIZER]},
        "spec": {},
        "status": summarize_claim_status(status, deleting=False),
    }


def run(*, other: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """Sync the new pod p first, then the claim; return the claim as stored and the pods'
    UIDs (the API gives them). The claim is reserved for p's old UID, and for a running
    pod q when `other`."""
    kube = FakeKube()
    informers = Informers.over(Nothing())
    lc = Lifecycle(kube, informers=informers, queue=WorkQueue("t-replaced"))
    uids = {}
    for name in ("p", "q") if other else ("p",):
        pod = kube.fake.put(k.PODS, bound_pod(name))
        informers.pods.apply("ADDED", pod)
        uids[name] = pod["metadata"]["uid"]
    reserved_for = [("p", "old")]
    if other:
        reserved_for.append(("q", uids["q"]))
    stored = kube.fake.put(k.RESOURCE_CLAIMS, claim(reserved_for=reserved_for))
    informers.claims.apply("ADDED", stored)

    async def syncs() -> None:
        await lc.sync_pod("ns", "p")
        await lc.sync_claim("ns", "c")

    asyncio.run(syncs())
    found = kube.fake.get(k.RESOURCE_CLAIMS, "c", "ns")
    assert found is not None
    return found, uids


def test_the_old_pods_reservation_is_pruned_and_the_claim_released_not_handed_on() -> None:
    found, _ = run(other=False)
    status = found.get("status") or {}
    assert not status.get("reservedFor"), status
    assert not status.get("allocation"), "no consumer is left: the claim is deallocated"
    assert FINALIZER not in (found["metadata"].get("finalizers") or [])


def test_a_claim_another_live_pod_holds_is_still_reserved_for_the_bound_pod() -> None:
    """Step 5 itself still holds: a shared claim in use gets the bound pod beside the other."""
    found, uids = run(other=True)
    reserved = [ref["uid"] for ref in (found.get("status") or {}).get("reservedFor") or []]
    assert reserved == [uids["q"], uids["p"]], "the old pod's entry pruned, q's kept, the bound pod reserved"
    assert (found.get("status") or {}).get("allocation") is not None
