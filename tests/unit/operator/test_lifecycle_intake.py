"""What the lifecycle queues for each watch event (upstream §2.3), and its caches' indexes.

These decisions need no API: they read only the stores, so a `Lifecycle` without a client
is enough here. Syncing against the API is covered by tests/e2e/test_lifecycle.py.
"""

from __future__ import annotations

import json
from typing import Any, cast

from draco.api.constants import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION, POD_CLAIM_NAME_ANNOTATION
from draco.kube.client import Kube
from draco.operator.resourceclaim.lifecycle import Lifecycle
from draco.operator.stores import ClaimStore, DeletedPods, PodStore
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.podclaims import device_class_names


def make_pod(
    name: str = "p", *, uid: str = "u1", claims: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    annotations = {}
    if claims is not None:
        annotations[CLAIMS_ANNOTATION] = json.dumps(claims)
    if "statuses" in extra:
        annotations[CLAIM_STATUSES_ANNOTATION] = json.dumps(extra.pop("statuses"))
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Pending"},
    }
    for key, value in extra.items():
        section, _, field = key.partition("__")
        pod[section][field] = value
    return pod


def make_claim(
    name: str,
    *,
    owner_uid: str | None = None,
    reserved: tuple[str, ...] = (),
    allocated: bool = False,
    pod_claim: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"claim-{name}"}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
        ]
    if pod_claim:
        meta["annotations"] = {POD_CLAIM_NAME_ANNOTATION: pod_claim}
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {"devices": {"results": []}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": uid, "uid": uid} for uid in reserved]
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {},
        "status": status,
    }


def lifecycle() -> Lifecycle:
    return Lifecycle(cast(Kube, None), queue=WorkQueue("t-intake"))


def queued(lc: Lifecycle) -> set[str]:
    return {
        key
        for key in ("pod:ns/p", "pod:ns/q", "claim:ns/shared", "claim:ns/gen", "claim:ns/other")
        if key in lc.queue
    }


TEMPLATE_ENTRY = {"name": "gpu", "resourceClaimTemplateName": "t"}
SHARED_ENTRY = {"name": "s", "resourceClaimName": "shared"}


def test_a_pod_whose_template_claim_is_not_recorded_needs_work() -> None:
    lc = lifecycle()
    lc.on_pod_event(make_pod(claims=[TEMPLATE_ENTRY]), deleted=False)
    assert queued(lc) == {"pod:ns/p"}


def test_a_pod_without_claims_or_only_missing_named_claims_is_left_alone() -> None:
    lc = lifecycle()
    lc.on_pod_event(make_pod(), deleted=False)
    lc.on_pod_event(make_pod("q", uid="u2", claims=[SHARED_ENTRY]), deleted=False)
    assert queued(lc) == set(), "a claim referenced by name must be created by the user"


def test_a_recorded_and_owned_claim_needs_no_work_until_the_pod_is_bound() -> None:
    lc = lifecycle()
    lc.claims.upsert(make_claim("gen", owner_uid="u1", allocated=True))
    lc.on_pod_event(make_pod(claims=[TEMPLATE_ENTRY], statuses={"gpu": "gen"}), deleted=False)
    assert queued(lc) == set()
    lc.on_pod_event(
        make_pod(claims=[TEMPLATE_ENTRY], statuses={"gpu": "gen"}, spec__nodeName="n1"), deleted=False
    )
    assert queued(lc) == {"pod:ns/p"}, "bound, allocated, not reserved: reserve it"


def test_a_foreign_recorded_claim_is_the_users_problem() -> None:
    lc = lifecycle()
    lc.claims.upsert(make_claim("gen", owner_uid="someone-else"))
    lc.on_pod_event(make_pod(claims=[TEMPLATE_ENTRY], statuses={"gpu": "gen"}), deleted=False)
    assert queued(lc) == set()


def test_done_or_deleted_pods_queue_their_claims_not_themselves() -> None:
    lc = lifecycle()
    lc.claims.upsert(make_claim("gen", owner_uid="u1", reserved=["u1"]))
    lc.claims.upsert(make_claim("shared", reserved=["u1"]))
    lc.claims.upsert(make_claim("other", reserved=["u9"]))
    lc.queue = WorkQueue("t-intake-2")
    done = make_pod(claims=[TEMPLATE_ENTRY, SHARED_ENTRY], statuses={"gpu": "gen"}, status__phase="Succeeded")
    lc.on_pod_event(done, deleted=False)
    assert queued(lc) == {"claim:ns/gen", "claim:ns/shared"}
    lc.queue = WorkQueue("t-intake-3")
    lc.on_pod_event(make_pod(claims=[TEMPLATE_ENTRY, SHARED_ENTRY], statuses={"gpu": "gen"}), deleted=True)
    assert queued(lc) == {"claim:ns/gen", "claim:ns/shared"}
    assert "u1" in lc.deleted_pods
    assert lc.pods.get("ns/p") is None


def test_a_claim_event_queues_the_claim_and_rechecks_pods_that_wait_for_it() -> None:
    lc = lifecycle()
    lc.on_pod_event(make_pod(claims=[SHARED_ENTRY], spec__nodeName="n1"), deleted=False)
    assert queued(lc) == set()
    lc.on_claim_event(make_claim("shared", allocated=True), deleted=False)
    assert queued(lc) == {"claim:ns/shared", "pod:ns/p"}


def test_a_template_event_requeues_pods_using_it() -> None:
    lc = lifecycle()
    lc.on_pod_event(make_pod(claims=[TEMPLATE_ENTRY]), deleted=False)
    lc.queue = WorkQueue("t-intake-4")
    lc.on_template_event({"metadata": {"name": "t", "namespace": "ns"}})
    assert queued(lc) == {"pod:ns/p"}
    lc.queue = WorkQueue("t-intake-5")
    lc.on_template_event({"metadata": {"name": "unrelated", "namespace": "ns"}})
    assert queued(lc) == set()


def test_claim_store_indexes_owners_reservations_and_just_created_claims() -> None:
    store = ClaimStore()
    store.upsert(make_claim("a", owner_uid="u1", pod_claim="gpu"))
    store.upsert(make_claim("b", reserved=["u1", "u2"]))
    assert store.for_pod_uid("u1") == {"ns/a", "ns/b"}
    assert store.for_pod_uid("u2") == {"ns/b"}
    store.upsert(make_claim("b", reserved=["u2"]))
    assert store.for_pod_uid("u1") == {"ns/a"}, "an update re-indexes"
    store.created(make_claim("c", owner_uid="u3", pod_claim="gpu"))
    assert store.get("ns/c") is not None, "the mutation cache answers before the watch does"
    owned = store.owned_by("u3", pod_claim_name="gpu")
    assert owned is not None and owned["metadata"]["name"] == "c"
    assert store.owned_by("u3", pod_claim_name="other") is None
    assert store.owned_by("u1", pod_claim_name="gpu") is not None
    store.remove("ns/a")
    assert store.for_pod_uid("u1") == set()
    assert {c["metadata"]["name"] for c in store.values()} == {"b", "c"}


def test_pod_store_indexes_referenced_claims_and_templates() -> None:
    store = PodStore()
    store.upsert(make_pod(claims=[TEMPLATE_ENTRY, SHARED_ENTRY], statuses={"gpu": "gen"}))
    assert store.referencing("claim", "ns/shared") == {"ns/p"}
    assert store.referencing("claim", "ns/gen") == {"ns/p"}
    assert store.referencing("template", "ns/t") == {"ns/p"}
    assert store.key_for_uid("u1") == "ns/p"
    trimmed = store.get("ns/p")
    assert trimmed is not None and "containers" not in trimmed["spec"], (
        "only what the lifecycle reads is kept"
    )
    store.remove("ns/p")
    assert store.referencing("claim", "ns/shared") == set()
    assert store.key_for_uid("u1") is None


def test_deleted_pods_forget_the_oldest_first() -> None:
    deleted = DeletedPods(size=2)
    for uid in ("a", "b", "c"):
        deleted.add(uid)
    assert "a" not in deleted and "b" in deleted and "c" in deleted


def test_device_class_names_cover_exactly_and_first_available_once() -> None:
    spec = {
        "devices": {
            "requests": [
                {"name": "a", "exactly": {"deviceClassName": "x"}},
                {
                    "name": "b",
                    "firstAvailable": [
                        {"name": "1", "deviceClassName": "y"},
                        {"name": "2", "deviceClassName": "x"},
                    ],
                },
            ]
        }
    }
    assert device_class_names(spec) == ["x", "y"]


def test_namespace_patterns_follow_kopfs_syntax() -> None:
    from draco.operator.options import plain_namespaces, serves_namespace

    assert plain_namespaces(["a", "b"]) == ("a", "b")
    assert plain_namespaces([]) == ()
    assert plain_namespaces(["team-*"]) is None
    assert serves_namespace("anything", [])
    assert serves_namespace("team-a", ["team-*"]) and not serves_namespace("other", ["team-*"])
    assert serves_namespace("other", ["!team-*"]) and not serves_namespace("team-a", ["!team-*"])
    assert serves_namespace("myapp-pr-123", ["myapp-*, !*-pr-*, *pr-123"])
    assert not serves_namespace("myapp-pr-456", ["myapp-*, !*-pr-*, *pr-123"])
    assert not serves_namespace("otherapp-pr-123", ["myapp-*, !*-pr-*, *pr-123"])
    assert serves_namespace("b", ["a", "b"])
