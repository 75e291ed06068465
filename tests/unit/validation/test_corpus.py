"""draco alone gives every corpus manifest the verdict kube-apiserver gave it (the e2e test
re-checks the verdicts against a live server), except those Kubernetes 1.38 refuses and
1.37 accepts: draco refuses them as 1.38 does."""

from __future__ import annotations

import pytest

from draco.validation import render_all, validate_object
from tests.unit.validation.corpus import ADMIN_LABELS, Manifest, corpus

MANIFESTS = corpus()


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[m.name for m in MANIFESTS])
def test_verdict_matches_the_corpus(manifest: Manifest) -> None:
    labels = ADMIN_LABELS if manifest.admin_namespace else {}
    errs = validate_object(manifest.obj, namespace_labels=labels if manifest.namespaced else None)
    assert (not errs) == manifest.draco_accepts, render_all(errs)


def test_draco_apiversion_gets_the_same_verdicts() -> None:
    for manifest in MANIFESTS:
        obj = {**manifest.obj, "apiVersion": "resource.draco.dev/v1"}
        labels = ADMIN_LABELS if manifest.admin_namespace else {}
        errs = validate_object(obj, namespace_labels=labels if manifest.namespaced else None)
        assert (not errs) == manifest.draco_accepts, (manifest.name, render_all(errs))


def test_what_1_38_refuses_is_refused_for_the_reason_marked() -> None:
    """Each manifest marked as refused from 1.38 is refused for that rule, not another."""
    marked = [m for m in MANIFESTS if m.refused_from_138]
    assert len(marked) >= 5
    for manifest in marked:
        labels = ADMIN_LABELS if manifest.namespaced else None
        errs = validate_object(manifest.obj, namespace_labels=labels)
        reason = str(manifest.refused_from_138)
        if "141213" in reason:
            assert {e.detail for e in errs} == {"must have exactly one node selector term"}, manifest.name
        elif "capacity.requests" in reason:
            assert errs and all(".capacity.requests" in e.path for e in errs), (
                manifest.name,
                render_all(errs),
            )
        else:
            assert {e.detail for e in errs} == {"must not contain more than one slash"}, manifest.name
