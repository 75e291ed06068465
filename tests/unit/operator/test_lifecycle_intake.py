"""What the lifecycle queues for each change its informers report through its Kopf handlers
(upstream §2.3), and the informers' indexes it decides by.

These decisions need no API: they read only the informers' caches, so a `Lifecycle` over
informers fed by hand (``Informer.apply``, as their watches do) without a client is
enough here. Syncing against the API is covered by tests/e2e/test_lifecycle.py.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from draco.api.constants import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION, POD_CLAIM_NAME_ANNOTATION
from draco.kube.client import Kube, Obj, Resource, WatchEvent
from draco.kube.informer import Informer
from draco.operator.informers import CLAIM_GENERATED, CLAIM_PODS, POD_REFERENCES, POD_UID, Informers
from draco.operator.resourceclaim.handlers import LifecycleHandlers
from draco.operator.resourceclaim.lifecycle import Lifecycle
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


class Nothing:
    """A source never asked: these informers are fed by hand."""

    async def list_with_version(
        self, resource: Resource, *, namespace: str | None = None, each: Callable[[Obj], Obj] | None = None
    ) -> tuple[list[Obj], str]:
        raise AssertionError("not listed here")

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        timeout_seconds: int = 0,
    ) -> AsyncIterator[WatchEvent]:
        raise AssertionError("not watched here")


_VERSIONS = itertools.count(1)


def feed(informer: Informer, obj: Obj, type_: str = "MODIFIED") -> None:
    """``obj`` as the informer's watch would report it (each a newer resourceVersion)."""
    obj["metadata"]["resourceVersion"] = str(next(_VERSIONS))
    informer.apply(type_, obj)


def lifecycle() -> Lifecycle:
    """A lifecycle whose Kopf handlers are fed by its informers, as the operator feeds them."""
    informers = Informers.over(Nothing())
    lc = Lifecycle(cast(Kube, None), informers=informers, queue=WorkQueue("t-intake"))
    LifecycleHandlers(lc).follow(informers)
    return lc


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
    feed(lc.pods, make_pod(claims=[TEMPLATE_ENTRY]))
    assert queued(lc) == {"pod:ns/p"}


def test_a_pod_without_claims_or_only_missing_named_claims_is_left_alone() -> None:
    lc = lifecycle()
    feed(lc.pods, make_pod())
    feed(lc.pods, make_pod("q", uid="u2", claims=[SHARED_ENTRY]))
    assert queued(lc) == set(), "a claim referenced by name must be created by the user"


def test_a_recorded_and_owned_claim_needs_no_work_until_the_pod_is_bound() -> None:
    lc = lifecycle()
    feed(lc.claims, make_claim("gen", owner_uid="u1", allocated=True))
    lc.queue = WorkQueue("t-intake-6")  # (the claim queued itself)
    feed(lc.pods, make_pod(claims=[TEMPLATE_ENTRY], statuses={"gpu": "gen"}))
    assert queued(lc) == set()
    feed(lc.pods, make_pod(claims=[TEMPLATE_ENTRY], statuses={"gpu": "gen"}, spec__nodeName="n1"))
    assert queued(lc) == {"pod:ns/p"}, "bound, allocated, not reserved: reserve it"


def test_a_foreign_recorded_claim_needs_a_new_claim_until_one_is_made() -> None:
    """As upstream's handleClaim: a recorded claim the pod does not control is replaced by
    a new one from the template (it once waited for the user, silently)."""
    lc = lifecycle()
    feed(lc.claims, make_claim("other", owner_uid="someone-else", pod_claim="gpu"))
    lc.queue = WorkQueue("t-intake-7")
    feed(lc.pods, make_pod(claims=[TEMPLATE_ENTRY], statuses={"gpu": "other"}))
    assert queued(lc) == {"pod:ns/p"}
    lc.queue = WorkQueue("t-intake-8")
    feed(lc.claims, make_claim("gen", owner_uid="u1", pod_claim="gpu"))
    lc.queue = WorkQueue("t-intake-9")
    feed(lc.pods, make_pod(claims=[TEMPLATE_ENTRY], statuses={"gpu": "other"}))
    assert queued(lc) == set(), "made: the allocation service records it"


def test_done_or_deleted_pods_queue_their_claims_not_themselves() -> None:
    lc = lifecycle()
    feed(lc.claims, make_claim("gen", owner_uid="u1", reserved=["u1"]))
    feed(lc.claims, make_claim("shared", reserved=["u1"]))
    feed(lc.claims, make_claim("other", reserved=["u9"]))
    lc.queue = WorkQueue("t-intake-2")
    done = make_pod(claims=[TEMPLATE_ENTRY, SHARED_ENTRY], statuses={"gpu": "gen"}, status__phase="Succeeded")
    feed(lc.pods, done)
    assert queued(lc) == {"claim:ns/gen", "claim:ns/shared"}
    lc.queue = WorkQueue("t-intake-3")
    feed(lc.pods, make_pod(claims=[TEMPLATE_ENTRY, SHARED_ENTRY], statuses={"gpu": "gen"}), "DELETED")
    assert queued(lc) == {"claim:ns/gen", "claim:ns/shared"}
    assert lc.pods.was_deleted("u1")
    assert lc.pods.get("ns/p") is None


def test_a_claim_event_queues_the_claim_and_rechecks_pods_that_wait_for_it() -> None:
    lc = lifecycle()
    feed(lc.pods, make_pod(claims=[SHARED_ENTRY], spec__nodeName="n1"))
    assert queued(lc) == set()
    feed(lc.claims, make_claim("shared", allocated=True))
    assert queued(lc) == {"claim:ns/shared", "pod:ns/p"}


def test_a_template_event_requeues_pods_using_it() -> None:
    lc = lifecycle()
    feed(lc.pods, make_pod(claims=[TEMPLATE_ENTRY]))
    lc.queue = WorkQueue("t-intake-4")
    lc.on_template_event({"metadata": {"name": "t", "namespace": "ns"}})
    assert queued(lc) == {"pod:ns/p"}
    lc.queue = WorkQueue("t-intake-5")
    lc.on_template_event({"metadata": {"name": "unrelated", "namespace": "ns"}})
    assert queued(lc) == set()


def test_the_claim_indexes_find_owners_reservations_and_generated_entries() -> None:
    claims = Informers.over(Nothing()).claims
    feed(claims, make_claim("a", owner_uid="u1", pod_claim="gpu"))
    feed(claims, make_claim("b", reserved=("u1", "u2")))
    assert claims.keys_by(CLAIM_PODS, "u1") == {"ns/a", "ns/b"}
    assert claims.keys_by(CLAIM_PODS, "u2") == {"ns/b"}
    feed(claims, make_claim("b", reserved=("u2",)))
    assert claims.keys_by(CLAIM_PODS, "u1") == {"ns/a"}, "an update re-indexes"
    assert claims.assume(
        {
            **make_claim("c", owner_uid="u3", pod_claim="gpu"),
            "metadata": {
                **make_claim("c", owner_uid="u3", pod_claim="gpu")["metadata"],
                "resourceVersion": "999999",
            },
        }
    )
    assert [c["metadata"]["name"] for c in claims.by_index(CLAIM_GENERATED, "u3/gpu")] == ["c"], (
        "a claim just created is found before its watch event"
    )
    assert claims.by_index(CLAIM_GENERATED, "u3/other") == []
    feed(claims, make_claim("a", owner_uid="u1", pod_claim="gpu"), "DELETED")
    assert claims.keys_by(CLAIM_PODS, "u1") == set() and claims.keys_by(CLAIM_GENERATED, "u1/gpu") == set()


def test_the_pod_indexes_find_referenced_claims_and_templates() -> None:
    pods = Informers.over(Nothing()).pods
    feed(pods, make_pod(claims=[TEMPLATE_ENTRY, SHARED_ENTRY], statuses={"gpu": "gen"}))
    assert pods.keys_by(POD_REFERENCES, "claim:ns/shared") == {"ns/p"}
    assert pods.keys_by(POD_REFERENCES, "claim:ns/gen") == {"ns/p"}
    assert pods.keys_by(POD_REFERENCES, "template:ns/t") == {"ns/p"}
    assert pods.keys_by(POD_UID, "u1") == {"ns/p"}
    feed(pods, make_pod(claims=[{"name": "broken"}]))  # unreadable: it names nothing
    assert pods.keys_by(POD_REFERENCES, "claim:ns/shared") == set()
    feed(pods, make_pod(), "DELETED")
    assert pods.keys_by(POD_UID, "u1") == set() and pods.was_deleted("u1")


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
