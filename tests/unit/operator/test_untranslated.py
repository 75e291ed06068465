"""Which pods get the "untranslated spec.resourceClaims" Warning."""

from __future__ import annotations

from typing import Any

from draco.api.constants import CLAIMS_ANNOTATION
from draco.operator.scheduler.untranslated import is_untranslated, untranslated_message


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [], **spec}}


def test_only_unbound_pods_with_native_claims_and_no_annotation() -> None:
    native = [{"name": "gpu", "resourceClaimName": "c"}]
    assert is_untranslated(_pod(resourceClaims=native))
    assert not is_untranslated(_pod())
    assert not is_untranslated(_pod(resourceClaims=native, nodeName="n0"))  # native DRA placed it
    annotated = _pod(resourceClaims=native)
    annotated["metadata"]["annotations"] = {CLAIMS_ANNOTATION: "[]"}
    assert not is_untranslated(annotated)
    deleting = _pod(resourceClaims=native)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not is_untranslated(deleting)


def _namespace(label: str | None) -> dict[str, Any]:
    labels = {"kubernetes.io/metadata.name": "ns"}
    if label is not None:
        labels["resource.draco.dev/pod-webhook"] = label
    return {"metadata": {"name": "ns", "labels": labels}}


def test_the_message_says_why_the_pod_was_not_translated() -> None:
    opted_in = untranslated_message(_namespace("enabled"))
    assert "the namespace is labelled resource.draco.dev/pod-webhook=enabled, but" in opted_in
    # A down webhook refuses such a pod there (failurePolicy Fail): not a reason any more.
    assert "created before the namespace was labelled" in opted_in and "not reachable" not in opted_in
    assert "label it" not in opted_in and "label the namespace" not in opted_in
    assert "delete and recreate the pod" in opted_in

    plain = untranslated_message(_namespace(None))
    assert "the namespace is not labelled resource.draco.dev/pod-webhook=enabled" in plain
    assert "label it resource.draco.dev/pod-webhook=enabled" in plain
    assert "not reachable" not in plain

    out = untranslated_message(_namespace("disabled"))
    assert "labelled resource.draco.dev/pod-webhook=disabled" in out
    assert "not reachable" not in out

    unknown = untranslated_message(None)
    assert "not labelled" in unknown and "or was not when the pod was created" in unknown
    for message in (opted_in, plain, out, unknown):
        assert message.startswith("pod uses spec.resourceClaims, which draco does not read: ")
        assert message.endswith("nothing to do if native DRA serves this pod")
        assert "resource.draco.dev/claims annotation" in message
