"""draco's validation and a real kube-apiserver give the same verdict on every manifest.

The corpus (`tests/e2e/corpus/`, valid and invalid manifests of all five kinds) and every
DRA object in `examples/` are submitted as `resource.k8s.io/v1` with server-side dry run
(`kubectl create --dry-run=server`, strict field validation) and judged by
`draco.validation.validate_object`; both must accept, or both must reject.

Rules the native server checks where a create dry run cannot reach them are listed in
`NOT_COMPARABLE_BY_DRY_RUN` (they are covered by unit tests), not skipped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from draco.dev.controlplane import ControlPlane
from draco.validation import render_all, validate_object
from draco.validation.shapes import SHAPES_BY_NAME
from tests.unit.validation.corpus import ADMIN_LABELS, FIVE_KINDS, Manifest, corpus, example_manifests

pytestmark = pytest.mark.e2e

#: Rules kube-apiserver enforces that a create dry run cannot exercise, and why; each is
#: covered by a unit test in tests/unit/validation instead.
NOT_COMPARABLE_BY_DRY_RUN = {
    "immutable claim and template spec": "needs an existing object to update (test_updates.py)",
    "slice driver, pool name and node name immutable": "needs an existing slice (test_updates.py)",
    "ratcheting of stored CEL, parameters, capacities and taints": "needs an existing object (test_updates.py)",
    "claim status: allocation immutable, reservedFor only with allocation, devices must be allocated": (
        "status is dropped on create; only a /status update reaches it (test_claim_status.py)"
    ),
    "admin access on a status update that newly allocates admin results": "needs /status (test_claim_status.py)",
    "DeviceTaintRule status conditions": "needs /status (test_updates.py)",
    "alpha fields whose gates are off in 1.37 (derivedAttributes, nodeAllocatableResources, "
    "compatibilityGroups, partitionTypeAttribute, skipNodeOperations)": (
        "the server drops them on write and checks nothing; draco ignores them the same way"
    ),
}


@pytest.fixture
def admin_namespace(kube: ControlPlane, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-admin"
    kube.kubectl("create", "namespace", name)
    labels = [f"{k}={v}" for k, v in ADMIN_LABELS.items()]
    kube.kubectl("label", "namespace", name, *labels)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _server_verdict(kube: ControlPlane, manifest: Manifest, namespace: str) -> tuple[bool, str]:
    args = ["create", "--dry-run=server", "--validate=strict", "-o", "name", "-f", "-"]
    if manifest.namespaced:
        args += ["-n", namespace]
    # JSON, not YAML: Go's YAML reads some bare strings (`y`, `n`) as booleans.
    result = kube.kubectl(*args, input=json.dumps(manifest.obj), check=False)
    return result.returncode == 0, result.stderr.strip()


def test_the_corpus_covers_every_kind_valid_and_invalid() -> None:
    manifests = corpus()
    assert len(manifests) >= 60
    for kind in FIVE_KINDS:
        verdicts = {m.expect_valid for m in manifests if m.obj["kind"] == kind}
        assert verdicts == {True, False}, f"{kind} needs valid and invalid manifests"
    assert any(m.admin_namespace for m in manifests)


def test_draco_and_kube_apiserver_agree_on_every_manifest(
    kube: ControlPlane, namespace: str, admin_namespace: str
) -> None:
    manifests = [*corpus(), *example_manifests()]
    disagreements = []
    mislabelled = []
    for manifest in manifests:
        ns = admin_namespace if manifest.admin_namespace else namespace
        server_ok, server_says = _server_verdict(kube, manifest, ns)
        labels = ADMIN_LABELS if manifest.admin_namespace else {}
        errors = validate_object(manifest.obj, namespace_labels=labels if manifest.namespaced else None)
        if server_ok != (not errors):
            disagreements.append(
                f"{manifest.name}: kube-apiserver {'accepts' if server_ok else 'rejects'} "
                f"({server_says or 'no error'}), draco {'rejects' if errors else 'accepts'} ({render_all(errors)})"
            )
        if manifest.expect_valid is not None and manifest.expect_valid != server_ok:
            mislabelled.append(f"{manifest.name}: named as {'valid' if manifest.expect_valid else 'invalid'}")
    assert not disagreements, "\n".join(disagreements)
    assert not mislabelled, "corpus file names disagree with kube-apiserver:\n" + "\n".join(mislabelled)


def test_draco_knows_exactly_the_fields_the_server_serves(kube: ControlPlane) -> None:
    """Every struct in `draco.validation.shapes` has the field set of the live OpenAPI
    schema, so "unknown field" means the same thing to both."""
    document = json.loads(kube.kubectl("get", "--raw", "/openapi/v3/apis/resource.k8s.io/v1").stdout)
    schemas = document["components"]["schemas"]
    by_short_name: dict[str, set[str]] = {}
    for full_name, schema in schemas.items():
        by_short_name.setdefault(full_name.rsplit(".", 1)[-1], set()).update(
            (schema.get("properties") or {}).keys()
        )
    mismatches = []
    for name, shape in SHAPES_BY_NAME.items():
        served = by_short_name.get(name)
        assert served is not None, f"{name} is not served"
        if set(shape.fields) != served:
            mismatches.append(
                f"{name}: draco-only {set(shape.fields) - served}, server-only {served - set(shape.fields)}"
            )
    assert not mismatches, "\n".join(mismatches)
