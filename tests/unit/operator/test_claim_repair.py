"""What the lifecycle puts back into a claim status another writer damaged (`repair.py`).

Pure decisions over a claim and the pods the cache knows; writing the repair and its Event
against the API is covered by tests/e2e/test_chart.py (the agent policy's test).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from draco.api import summarize_claim_status
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    PLACED_UID_ANNOTATION,
    SCHEDULING_GATE,
)
from draco.operator.informers import without_managed_fields
from draco.operator.resourceclaim.repair import REASON_STATUS_REPAIRED, pod_node, repair_claim_status
from draco.operator.scheduler.writes import pin_affinity


def make_pod(
    name: str = "trainer",
    *,
    uid: str = "pod-1",
    claims: list[dict[str, Any]] | None = None,
    statuses: dict[str, str] | None = None,
    node: str | None = None,
    pinned: str | None = "node-1",
    gated: bool = False,
    phase: str = "Pending",
    placed_uid: str | None = "same",
) -> dict[str, Any]:
    annotations = {CLAIMS_ANNOTATION: json.dumps(claims or [{"name": "gpu", "resourceClaimName": "c"}])}
    if placed_uid is not None and not gated:
        # What draco writes when it removes the gate: the UID of the pod it placed.
        annotations[PLACED_UID_ANNOTATION] = uid if placed_uid == "same" else placed_uid
    if statuses is not None:
        annotations[CLAIM_STATUSES_ANNOTATION] = json.dumps(statuses)
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    if pinned:
        spec["affinity"] = pin_affinity(None, pinned)
    if gated:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations},
        "spec": spec,
        "status": {"phase": phase},
    }
    return without_managed_fields(pod)  # what the pod informer holds


def make_claim(
    name: str = "c",
    *,
    reserved: tuple[str, ...] = ("pod-1",),
    node: str = "node-1",
    owner_uid: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"claim-{name}", "resourceVersion": "7"}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "trainer", "uid": owner_uid, "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.draco.dev", "pool": node, "device": "gpu-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
    }
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "trainer", "uid": uid} for uid in reserved]
    summarize_claim_status(status, deleting=deleting)
    return {"metadata": meta, "status": status}


def damaged(claim: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """`claim` after another writer's merge patch of `changes` into its status."""
    out = copy.deepcopy(claim)
    for key, value in changes.items():
        if value is None:
            out["status"].pop(key, None)
        else:
            out["status"][key] = value
    return out


def test_a_consistent_claim_needs_no_repair() -> None:
    assert repair_claim_status(make_claim(), pods=[make_pod()]) is None
    # ... nor one whose pods are unknown to the cache.
    assert repair_claim_status(damaged(make_claim(), reservedFor=None), pods=[]) is not None  # state only
    assert repair_claim_status(make_claim(reserved=()), pods=[]) is None


def test_an_emptied_reservation_of_a_pod_that_uses_the_claim_comes_back() -> None:
    claim = damaged(make_claim(), reservedFor=None)
    assert claim["status"]["state"] == "allocated,reserved"
    repair = repair_claim_status(claim, pods=[make_pod()])
    assert repair is not None
    assert repair.restored == ("trainer",)
    assert repair.status["reservedFor"] == [
        {"apiGroup": "", "resource": "pods", "name": "trainer", "uid": "pod-1"}
    ]
    assert repair.status["state"] == "allocated,reserved"
    assert repair.status["allocation"] == claim["status"]["allocation"]
    assert repair.corrected == ()
    assert repair.message == (
        "Repaired the status another writer changed: reservedFor lacked pod trainer that uses the claim"
    )
    assert REASON_STATUS_REPAIRED == "ResourceClaimStatusRepaired"


def test_derived_fields_are_recomputed_and_named() -> None:
    claim = damaged(make_claim(reserved=()), state="pending", nodeName="node-9", allocatedDevices=None)
    repair = repair_claim_status(claim, pods=[])
    assert repair is not None
    assert repair.restored == ()
    assert repair.status["state"] == "allocated"
    assert repair.status["nodeName"] == "node-1"
    assert repair.status["allocatedDevices"] == "node-1/gpu-0"
    assert repair.corrected == (
        ("state", "pending", "allocated"),
        ("allocatedDevices", None, "node-1/gpu-0"),
        ("nodeName", "node-9", "node-1"),
    )
    assert 'state was "pending", is "allocated"' in repair.message
    assert "allocatedDevices was absent" in repair.message


def test_a_state_without_the_deleted_mark_is_not_damage() -> None:
    claim = make_claim(deleting=False)
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert repair_claim_status(claim, pods=[make_pod()]) is None


def test_no_reservation_comes_back_on_a_claim_being_deleted() -> None:
    claim = damaged(make_claim(deleting=True), reservedFor=None)
    repair = repair_claim_status(claim, pods=[make_pod()])
    assert repair is not None
    assert repair.restored == ()
    assert repair.status["state"] == "deleted,allocated"


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (make_pod(gated=True), "still gated: the allocation decides"),
        (make_pod(phase="Succeeded"), "done"),
        (make_pod(pinned=None), "neither bound nor pinned: not placed by draco"),
        (make_pod(pinned="node-2"), "pinned to another node"),
        (make_pod(pinned=None, node="node-2"), "bound to another node"),
        (make_pod(claims=[{"name": "gpu", "resourceClaimName": "other"}]), "another claim"),
        (
            make_pod(claims=[{"name": "gpu", "resourceClaimTemplateName": "t"}], statuses={"gpu": "c"}),
            "not owner",
        ),
    ],
)
def test_pods_that_do_not_use_the_claim_get_nothing(pod: dict[str, Any], why: str) -> None:
    claim = damaged(make_claim(reserved=()), state="allocated")
    assert repair_claim_status(claim, pods=[pod]) is None, why


def test_bound_pods_generated_claims_and_many_pods() -> None:
    claim = damaged(make_claim(reserved=("pod-1",), owner_uid="pod-2"), reservedFor=None)
    pods = [
        make_pod("a", uid="pod-1", pinned=None, node="node-1"),
        make_pod(
            "b",
            uid="pod-2",
            claims=[{"name": "gpu", "resourceClaimTemplateName": "t"}],
            statuses={"gpu": "c"},
        ),
        make_pod("c", uid="pod-3", gated=True),
    ]
    repair = repair_claim_status(claim, pods=reversed(pods))
    assert repair is not None
    assert repair.restored == ("a", "b")
    assert [r["uid"] for r in repair.status["reservedFor"]] == ["pod-1", "pod-2"]
    # Reservations kept by the damage are kept, not duplicated.
    kept = damaged(claim, reservedFor=[{"resource": "pods", "name": "a", "uid": "pod-1"}])
    again = repair_claim_status(kept, pods=pods)
    assert again is not None
    assert [r["uid"] for r in again.status["reservedFor"]] == ["pod-1", "pod-2"]


def test_an_unallocated_claim_gets_no_reservation() -> None:
    claim = damaged(make_claim(reserved=()), allocation=None)
    repair = repair_claim_status(claim, pods=[make_pod()])
    assert repair is not None  # its derived fields were stale
    assert "reservedFor" not in repair.status
    assert repair.status["state"] == "pending"
    assert "nodeName" not in repair.status


def test_the_pinned_node() -> None:
    assert pod_node(make_pod(pinned="n")) == "n"
    assert pod_node(make_pod(pinned="n", node="m")) == "m"
    assert pod_node(make_pod(pinned=None)) is None
    two_terms = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
                        ]
                    }
                }
            }
        }
    }
    assert pod_node(two_terms) is None


def test_a_pod_recreated_under_the_same_name_is_a_new_consumer_not_a_repair() -> None:
    """`kubectl replace --force` (or any copy of a placed pod) brings the old pod's pin
    and annotations back under a new UID: the reservation was taken from the old pod,
    so nothing is restored for the new one (the lifecycle prunes the stale entry)."""
    claim = make_claim(reserved=())
    replaced = make_pod(uid="pod-2", placed_uid="pod-1")
    assert repair_claim_status(claim, pods=[replaced]) is None
    never_placed = make_pod(uid="pod-3", placed_uid=None, node="node-1", pinned=None)
    assert repair_claim_status(claim, pods=[never_placed]) is None
    placed = make_pod(uid="pod-4")
    repair = repair_claim_status(claim, pods=[placed])
    assert repair is not None and repair.restored == ("trainer",)
