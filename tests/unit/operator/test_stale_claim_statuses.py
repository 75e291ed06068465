"""A claim-statuses annotation that names a claim that is not the entry's any more.

What a restored backup, an exported pod applied again, or an operator killed between its
writes leaves behind: the annotation names a claim that is gone, another pod's (a pod of
the same name deleted before), a user's, or the pod's own claim of another entry. As
upstream's resourceclaim controller (handleClaim; its TestSyncHandler "recreate" and
foreign-claim cases), the lifecycle makes a new claim from the template, and the
allocation service resolves the entry to it and records it in the pod's next write.
Found by a new user: the pod got its new claim and then waited for ever, with no Event,
because the allocation kept resolving the entry to the stale name.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    POD_CLAIM_NAME_ANNOTATION,
    SCHEDULING_GATE,
)
from draco.kube import client as k
from draco.operator.informers import Informers
from draco.operator.resourceclaim.lifecycle import Lifecycle
from draco.operator.scheduler.allocation import AllocationService
from draco.operator.scheduler.messages import claim_problem
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.podclaims import is_claim_for_entry
from draco.scheduling.view import ClusterView
from tests.unit.fakekube import FakeKube
from tests.unit.operator.test_lifecycle_intake import Nothing

ENTRIES = [
    {"name": "gpu", "resourceClaimTemplateName": "single-gpu"},
    {"name": "nic", "resourceClaimTemplateName": "single-gpu"},
]


def claim(name: str, *, owner_uid: str | None, pod_claim: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
        ]
    if pod_claim is not None:
        meta["annotations"] = {POD_CLAIM_NAME_ANNOTATION: pod_claim}
    return {"apiVersion": "resource.draco.dev/v1", "kind": "ResourceClaim", "metadata": meta, "spec": {}}


def template() -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "single-gpu", "namespace": "ns"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}},
    }


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {},
    }


def gated_pod(statuses: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {
                CLAIMS_ANNOTATION: json.dumps(ENTRIES),
                CLAIM_STATUSES_ANNOTATION: json.dumps(statuses),
            },
        },
        "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}], "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Pending"},
    }


#: Each shape of a stale record for the entry "gpu" (the entry "nic" is recorded rightly).
SHAPES = {
    "missing claim": None,
    "foreign claim": {"owner_uid": None, "pod_claim": None},
    "claim of a deleted pod with the same name": {"owner_uid": "uid-of-the-pod-before", "pod_claim": "gpu"},
    "the pod's claim of another entry": {"owner_uid": "POD", "pod_claim": "nic"},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_stale_record_gets_a_new_claim_which_the_allocation_resolves_and_records(shape: str) -> None:
    kube = FakeKube()
    informers = Informers.over(Nothing())
    lifecycle = Lifecycle(kube, informers=informers, queue=WorkQueue(f"t-stale-{shape}"))
    for resource, body in ((k.RESOURCE_CLAIM_TEMPLATES, template()), (k.DEVICE_CLASSES, device_class())):
        stored = kube.fake.put(resource, body)
        (informers.templates if resource is k.RESOURCE_CLAIM_TEMPLATES else informers.classes).apply(
            "ADDED", stored
        )
    pod = kube.fake.put(k.PODS, gated_pod({"gpu": "stale", "nic": "p-nic-ok"}))
    uid = pod["metadata"]["uid"]
    nic = kube.fake.put(k.RESOURCE_CLAIMS, claim("p-nic-ok", owner_uid=uid, pod_claim="nic"))
    informers.claims.apply("ADDED", nic)
    spec = SHAPES[shape]
    if spec is not None:
        owner = uid if spec["owner_uid"] == "POD" else spec["owner_uid"]
        stale = kube.fake.put(k.RESOURCE_CLAIMS, claim("stale", owner_uid=owner, pod_claim=spec["pod_claim"]))
        informers.claims.apply("ADDED", stale)
        assert not is_claim_for_entry(stale, pod, "gpu")
    informers.pods.apply("ADDED", pod)
    assert lifecycle._pod_needs_work(pod), "the stale record must bring the pod to the lifecycle"

    asyncio.run(lifecycle.sync_pod("ns", "p"))

    made = [
        c
        for c in kube.fake.all(k.RESOURCE_CLAIMS)
        if (c["metadata"].get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION) == "gpu"
        and c["metadata"]["name"] != "stale"
    ]
    assert len(made) == 1, "one new claim for the entry, from its template"
    new = made[0]["metadata"]["name"]
    assert new.startswith("p-gpu-")
    assert not lifecycle._pod_needs_work(pod), "made: nothing more for the lifecycle"
    asyncio.run(lifecycle.sync_pod("ns", "p"))
    assert len(kube.fake.all(k.RESOURCE_CLAIMS)) == len(made) + 1 + (spec is not None), "no second claim"

    service = AllocationService(
        kube=kube,
        view=ClusterView(claim_cache=informers.claims),
        claim_informer=informers.claims,
        pods=informers.pods,
        pod_groups=informers.pod_groups,
        enqueue=lambda _key: None,
    )
    resolved, unrecorded = service.reader.resolve(pod)
    assert {r.pod_claim.name: r.claim_name for r in resolved} == {"gpu": new, "nic": "p-nic-ok"}
    assert unrecorded == {"gpu": new, "nic": "p-nic-ok"}, "the pod's next write records the new claim"


def test_a_recorded_claim_not_in_the_cache_stays_until_the_entry_has_another() -> None:
    """A recorded claim the informer has not seen (gone, or not delivered yet) is read live
    by the attempt, which says why the pod waits; it is stale only once the lifecycle has
    made the entry a claim of its own."""
    informers = Informers.over(Nothing())
    service = AllocationService(
        kube=FakeKube(),
        view=ClusterView(claim_cache=informers.claims),
        claim_informer=informers.claims,
        pods=informers.pods,
        pod_groups=informers.pod_groups,
        enqueue=lambda _key: None,
    )
    pod = gated_pod({"gpu": "unseen", "nic": "p-nic-ok"})
    pod["metadata"]["uid"] = "u1"
    informers.claims.apply("ADDED", claim("p-nic-ok", owner_uid="u1", pod_claim="nic"))
    resolved, unrecorded = service.reader.resolve(pod)
    assert [r.claim_name for r in resolved] == ["unseen", "p-nic-ok"] and unrecorded is None
    informers.claims.apply("ADDED", claim("p-gpu-abcde", owner_uid="u1", pod_claim="gpu"))
    resolved, unrecorded = service.reader.resolve(pod)
    assert [r.claim_name for r in resolved] == ["p-gpu-abcde", "p-nic-ok"]
    assert unrecorded == {"gpu": "p-gpu-abcde", "nic": "p-nic-ok"}


def test_the_waiting_pod_is_told_what_is_wrong_with_its_recorded_claim() -> None:
    pod = gated_pod({})
    pod["metadata"]["uid"] = "u1"
    missing = claim_problem("ns/stale", None, pod, entry="gpu")
    assert missing is not None and "recorded for the pod's claim 'gpu', does not exist" in missing
    assert "new one generated from its template" in missing
    other = claim_problem("ns/stale", claim("stale", owner_uid="u1", pod_claim="nic"), pod, entry="gpu")
    assert other is not None and "was not generated for it" in other
    assert claim_problem("ns/ok", claim("ok", owner_uid="u1", pod_claim="gpu"), pod, entry="gpu") is None
    named = claim_problem("ns/shared", None, pod, entry=None)
    assert named == "ResourceClaim ns/shared does not exist yet; the pod waits for it"
