"""What the allocation reads of pending claims from the claim informer (`pendingclaims.py`):
bodies that are current, never one that lost a race or that the view knows a newer state
of; the claim generated for a pod's entry, and the pod that waited for it when it appears."""

from __future__ import annotations

from draco.kube.client import Obj
from draco.operator.informers import Informers
from draco.operator.scheduler.pendingclaims import PendingClaims
from draco.scheduling.view import ClusterView

from .test_lifecycle_intake import Nothing, feed, make_claim


def pending() -> PendingClaims:
    return PendingClaims(ClusterView(), Informers.over(Nothing()).claims)


def test_a_pending_body_is_read_until_it_loses_a_race_and_again_once_reported() -> None:
    claims = pending()
    feed(claims.informer, make_claim("a", owner_uid="u1"))
    assert claims.known("ns/a") is not None
    claims.stale("ns/a")
    assert claims.known("ns/a") is None, "after a conflict the body is read from the API"
    claims.note("MODIFIED", make_claim("a", owner_uid="u1"))
    assert claims.known("ns/a") is not None


def test_allocated_or_deleting_claims_and_newer_view_records_are_not_known() -> None:
    claims = pending()
    feed(claims.informer, make_claim("a", allocated=True))
    assert claims.known("ns/a") is None
    deleting: Obj = make_claim("b")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    feed(claims.informer, deleting)
    assert claims.known("ns/b") is None
    feed(claims.informer, make_claim("c"))
    newer = make_claim("c", allocated=True)
    newer["metadata"]["resourceVersion"] = str(10**9)
    claims.view.upsert_claim(newer)  # our own write, its event not seen yet
    assert claims.known("ns/c") is None


def test_the_claim_generated_for_an_entry_is_found_and_wakes_its_pod_when_it_appears() -> None:
    claims = pending()
    created = make_claim("p-gpu-b", owner_uid="u1", pod_claim="gpu")
    assert claims.generated("u1", "gpu") is None
    feed(claims.informer, created, "ADDED")
    assert claims.note("ADDED", created) == "ns/p", "the owner pod may wait for it"
    assert claims.note("MODIFIED", created) is None
    feed(claims.informer, make_claim("p-gpu-a", owner_uid="u1", pod_claim="gpu"), "ADDED")
    assert claims.generated("u1", "gpu") == "p-gpu-a", "the first by name, as the lifecycle adopts"
    assert [c["metadata"]["name"] for c in claims.unallocated_of("u1")] == ["p-gpu-a", "p-gpu-b"]
