"""draco alone gives every corpus manifest the verdict kube-apiserver gave it (the e2e test
re-checks the verdicts against a live server)."""

from __future__ import annotations

import pytest

from draco.validation import render_all, validate_object
from tests.unit.validation.corpus import ADMIN_LABELS, Manifest, corpus

MANIFESTS = corpus()


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[m.name for m in MANIFESTS])
def test_verdict_matches_the_corpus(manifest: Manifest) -> None:
    labels = ADMIN_LABELS if manifest.admin_namespace else {}
    errs = validate_object(manifest.obj, namespace_labels=labels if manifest.namespaced else None)
    assert (not errs) == manifest.expect_valid, render_all(errs)


def test_draco_apiversion_gets_the_same_verdicts() -> None:
    for manifest in MANIFESTS:
        obj = {**manifest.obj, "apiVersion": "resource.draco.dev/v1"}
        labels = ADMIN_LABELS if manifest.admin_namespace else {}
        errs = validate_object(obj, namespace_labels=labels if manifest.namespaced else None)
        assert (not errs) == manifest.expect_valid, (manifest.name, render_all(errs))
