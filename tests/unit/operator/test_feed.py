"""The operator's Kopf event handlers fed by its informers (`draco.operator.feed`): which
handlers an informer reaches, what they are called with and in which order, a deletion a
re-list found reaching them, and what the feed refuses. It reads Kopf's registry where
Kopf's decorators put handlers: these tests fail first if a Kopf release moves them."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest

from draco.api.constants import CLAIMS_ANNOTATION, GROUP, PLURAL_RESOURCE_CLAIMS
from draco.kube.client import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from draco.kube.informer import Informer
from draco.operator.feed import FeedError, handlers_of, on_event, subscribe
from draco.scheduling.generatedclaims import generated_claim
from draco.scheduling.podclaims import PodClaim

from .test_lifecycle_intake import Nothing, feed, make_pod


def registry_with_pod_and_claim_handlers(seen: list[tuple[Any, ...]]) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.event("v1", "pods", id="pods", registry=registry)
    def pods(type: str | None, name: str, namespace: str, **_: Any) -> None:
        seen.append(("pod", type, f"{namespace}/{name}"))

    @kopf.on.event(GROUP, PLURAL_RESOURCE_CLAIMS, id="claims", param="p", registry=registry)
    def claims(type: str | None, name: str, param: str, **_: Any) -> None:
        seen.append(("claim", type, name, param))

    return registry


def test_an_informer_reaches_the_handlers_of_its_kind_only() -> None:
    registry = registry_with_pod_and_claim_handlers([])
    assert [h.id for h in handlers_of(registry, PODS)] == ["pods"]
    assert [h.id for h in handlers_of(registry, RESOURCE_CLAIMS)] == ["claims"]
    assert handlers_of(registry, RESOURCE_SLICES) == []


def test_the_cache_first_as_listed_then_every_change_in_order() -> None:
    seen: list[tuple[Any, ...]] = []
    pods: Informer[Any] = Informer(Nothing(), PODS)
    feed(pods, make_pod("early", uid="u1"), "ADDED")
    subscribe(pods, registry_with_pod_and_claim_handlers(seen), listing=True)
    feed(pods, make_pod("late", uid="u2"), "ADDED")
    feed(pods, make_pod("early", uid="u1"))
    # A re-list (after a 410) that no longer has "late": reported deleted.
    pods.replace(None, [make_pod("early", uid="u1")], "999")
    assert seen == [
        ("pod", None, "ns/early"),
        ("pod", "ADDED", "ns/late"),
        ("pod", "MODIFIED", "ns/early"),
        ("pod", "DELETED", "ns/late"),
    ]


def test_without_listing_only_changes_are_handed_over_and_param_comes_along() -> None:
    seen: list[tuple[Any, ...]] = []
    claims: Informer[Any] = Informer(Nothing(), RESOURCE_CLAIMS)
    feed(claims, {"metadata": {"name": "old", "namespace": "ns", "uid": "c0"}}, "ADDED")
    subscribe(claims, registry_with_pod_and_claim_handlers(seen))
    feed(claims, {"metadata": {"name": "new", "namespace": "ns", "uid": "c1"}}, "ADDED")
    assert seen == [("claim", "ADDED", "new", "p")]


def test_bound_methods_are_handlers_and_get_no_memo() -> None:
    """A controller's handlers are methods of the object that holds what they need,
    registered bound (`feed.on_event`): no lookup on Kopf's memo."""

    class Watcher:
        def __init__(self) -> None:
            self.seen: list[tuple[str | None, str, set[str]]] = []
            self.registry = kopf.OperatorRegistry()
            on_event(self.registry)("v1", "pods", id="watcher/pod")(self.pod_changed)

        def pod_changed(self, type: str | None, name: str, **kwargs: Any) -> None:
            self.seen.append((type, name, set(kwargs) & {"memo", "body", "logger"}))

    watcher = Watcher()
    pods: Informer[Any] = Informer(Nothing(), PODS)
    assert [h.id for h in handlers_of(watcher.registry, PODS)] == ["watcher/pod"]
    subscribe(pods, watcher.registry)
    feed(pods, make_pod("p", uid="u1"), "ADDED")
    assert watcher.seen == [("ADDED", "p", {"body", "logger"})]


def test_a_failing_handler_is_logged_and_the_others_still_run() -> None:
    registry = kopf.OperatorRegistry()
    seen: list[str] = []

    @kopf.on.event("v1", "pods", id="broken", registry=registry)
    def broken(**_: Any) -> None:
        raise RuntimeError("bug")

    @kopf.on.event(
        "v1",
        "pods",
        id="filtered",
        when=lambda annotations, **_: CLAIMS_ANNOTATION in annotations,
        registry=registry,
    )
    def filtered(name: str, **_: Any) -> None:
        seen.append(name)

    pods: Informer[Any] = Informer(Nothing(), PODS)
    subscribe(pods, registry)
    feed(pods, make_pod("plain", uid="u1"), "ADDED")
    feed(pods, make_pod("claims", uid="u2", claims=[{"name": "g", "resourceClaimName": "c"}]), "ADDED")
    assert seen == ["claims"]


def test_what_the_feed_cannot_honour_is_refused_at_subscription() -> None:
    asynchronous = kopf.OperatorRegistry()

    @kopf.on.event("v1", "pods", registry=asynchronous)
    async def later(**_: Any) -> None:
        pass

    labelled = kopf.OperatorRegistry()

    @kopf.on.event("v1", "pods", labels={"app": "x"}, registry=labelled)
    def by_label(**_: Any) -> None:
        pass

    for registry in (asynchronous, labelled):
        with pytest.raises(FeedError):
            handlers_of(registry, PODS)


def test_a_generated_claim_is_owned_by_its_pod_as_kopf_adopt_would_own_it() -> None:
    pod = make_pod("p", uid="u1")
    pod["metadata"]["annotations"] = {
        CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": "t"}])
    }
    claim = generated_claim(
        pod, PodClaim(name="gpu", resource_claim_template_name="t"), {"spec": {"spec": {}}}
    )
    assert claim["metadata"]["ownerReferences"] == [kopf.build_owner_reference(pod)]
