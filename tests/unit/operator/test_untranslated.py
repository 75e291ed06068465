"""Which pods get the "untranslated spec.resourceClaims" Warning."""

from __future__ import annotations

from typing import Any

from draco.api.constants import CLAIMS_ANNOTATION
from draco.operator.scheduler.untranslated import is_untranslated


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
