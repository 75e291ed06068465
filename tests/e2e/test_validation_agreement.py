"""draco's validation and a real kube-apiserver give the same verdict on every manifest.

The corpus (`tests/e2e/corpus/`, valid and invalid manifests of all five kinds) and every
DRA object in `examples/` are submitted as `resource.k8s.io/v1` with server-side dry run
(`kubectl create --dry-run=server`, strict field validation) and judged by
`draco.validation.validate_object`; both must accept, or both must reject.

Updates and status writes are compared too: the old object is created for real, and the
change is submitted with `kubectl replace --dry-run=server` (on `/status` where needed).
The few rules that cannot be compared against the native server are listed in
`NOT_COMPARABLE` with the unit tests that cover them, not skipped silently.

Where Kubernetes 1.38 refuses what the 1.37 server accepts, draco follows 1.38 for its own
kinds: those corpus manifests are marked (`# 1.38: refused (...)`, see
tests/unit/validation/corpus.py) and must be accepted by kube-apiserver 1.37 and refused by
draco, a known difference that docs/fidelity.md lists; a 1.38 server refusing them too is
agreement.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from draco.api.constants import GROUP, NATIVE_GROUP
from draco.api.versions import SERVED_VERSIONS, convert, to_storage
from draco.errors import InvalidObjectError
from draco.tools.dev.controlplane import ControlPlane
from draco.validation import render_all, validate_object
from draco.validation.shapes import SHAPES_BY_NAME
from tests.unit.validation.corpus import ADMIN_LABELS, FIVE_KINDS, Manifest, corpus, example_manifests

pytestmark = pytest.mark.e2e

#: Where draco and kube-apiserver cannot be compared here, and the unit test module in
#: tests/unit/validation that covers the rule instead. Nothing is skipped silently.
NOT_COMPARABLE = {
    "ratcheting: stored CEL not recompiled, stored large parameters, stored taint effects and "
    "capacities kept": (
        "test_updates.py",
        "the server never stores an invalid object to ratchet from (only version skew does)",
    ),
    "alpha fields whose gates are off in 1.37 (derivedAttributes, nodeAllocatableResources, "
    "compatibilityGroups, partitionTypeAttribute, skipNodeOperations)": (
        "test_objects.py",
        "the server drops them on write and checks nothing; draco accepts and ignores them",
    ),
    "admin access for resource.draco.dev objects uses draco's namespace label": (
        "test_objects.py",
        "the native server only knows resource.kubernetes.io/admin-access; native objects are compared",
    ),
    "reservedFor may not grow while the claim is being deleted": (
        "test_claim_status.py",
        "needs a claim with deletionTimestamp, which needs a finalizer and a real delete",
    ),
}


def test_every_rule_not_compared_here_has_a_unit_test() -> None:
    unit = Path(__file__).resolve().parents[1] / "unit" / "validation"
    for rule, (module, _why) in NOT_COMPARABLE.items():
        assert (unit / module).is_file(), rule


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
    known_differences = []
    for manifest in manifests:
        ns = admin_namespace if manifest.admin_namespace else namespace
        server_ok, server_says = _server_verdict(kube, manifest, ns)
        labels = ADMIN_LABELS if manifest.admin_namespace else {}
        errors = validate_object(manifest.obj, namespace_labels=labels if manifest.namespaced else None)
        if manifest.refused_from_138:
            # Refused by draco as by 1.38 (and by a 1.38 server, if this is one).
            if not errors:
                disagreements.append(f"{manifest.name}: draco accepts what 1.38 refuses")
            elif server_ok:
                known_differences.append(manifest.name)
            continue
        if server_ok != (not errors):
            disagreements.append(
                f"{manifest.name}: kube-apiserver {'accepts' if server_ok else 'rejects'} "
                f"({server_says or 'no error'}), draco {'rejects' if errors else 'accepts'} ({render_all(errors)})"
            )
        if manifest.expect_valid is not None and manifest.expect_valid != server_ok:
            mislabelled.append(f"{manifest.name}: named as {'valid' if manifest.expect_valid else 'invalid'}")
    assert not disagreements, "\n".join(disagreements)
    assert not mislabelled, "corpus file names disagree with kube-apiserver:\n" + "\n".join(mislabelled)
    marked = sorted(m.name for m in manifests if m.refused_from_138)
    if known_differences:  # a 1.37 server: every marked manifest is a difference, no other
        assert sorted(known_differences) == marked


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_draco_and_kube_apiserver_agree_in_the_older_versions(
    kube: ControlPlane, namespace: str, admin_namespace: str, version: str
) -> None:
    """Every manifest in `version` (converted from v1 by `draco.api.versions`): the native
    server judges it in resource.k8s.io/`version`, draco converts it to v1 as its
    conversion webhook does and judges that."""
    if f"{NATIVE_GROUP}/{version}" not in kube.kubectl("api-versions").stdout.split():
        pytest.skip(
            f"this kube-apiserver does not serve {NATIVE_GROUP}/{version} (the dev control plane does on 1.37)"
        )
    disagreements = []
    compared = 0
    for manifest in [*corpus(), *example_manifests()]:
        kind = manifest.obj.get("kind")
        if version not in SERVED_VERSIONS.get(str(kind), ()):
            continue
        try:
            older = convert({**manifest.obj, "apiVersion": f"{GROUP}/v1"}, f"{GROUP}/{version}")
        except InvalidObjectError:
            continue  # not a kind draco serves (the corpus's wrong kinds): v1 covers them
        native = {**older, "apiVersion": f"{NATIVE_GROUP}/{version}"}
        ns = admin_namespace if manifest.admin_namespace else namespace
        server_ok, server_says = _server_verdict(kube, replace(manifest, obj=native), ns)
        labels = ADMIN_LABELS if manifest.admin_namespace else {}
        stored = {**to_storage(older), "apiVersion": manifest.obj["apiVersion"]}
        errors = validate_object(stored, namespace_labels=labels if manifest.namespaced else None)
        compared += 1
        if manifest.refused_from_138 and errors:
            continue  # a known 1.38 difference (see the module docstring)
        if server_ok != (not errors):
            disagreements.append(
                f"{manifest.name} as {version}: kube-apiserver {'accepts' if server_ok else 'rejects'} "
                f"({server_says or 'no error'}), draco {'rejects' if errors else 'accepts'} ({render_all(errors)})"
            )
    assert compared >= 40
    assert not disagreements, "\n".join(disagreements)


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


# --- updates and status writes ---------------------------------------------------------------
#
# A create dry run cannot reach the update rules, so these cases create the old object for
# real, then submit the change with `kubectl replace --dry-run=server` (on /status where
# the case says so) and compare with validate_object(new, old=<stored object>).

_SHARE_POD = {"resource": "pods", "name": "p", "uid": "0b7f7c34-8d0e-4a1f-9d4e-3c2b1a0f9e8d"}
_RESULT = {"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}
_ALLOCATION = {"devices": {"results": [_RESULT]}}


def _native_claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        },
    }


def _native_slice(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": name, "generation": 0, "resourceSliceCount": 1},
            "nodeName": "node-1",
            "devices": [{"name": "gpu-0"}],
        },
    }


def _native_rule(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com"},
            "taint": {"key": "k", "effect": "NoSchedule"},
        },
    }


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    here = obj
    keys = path.split(".")
    for key in keys[:-1]:
        here = here[int(key)] if isinstance(here, list) else here.setdefault(key, {})
    if isinstance(here, list):
        here[int(keys[-1])] = value
    else:
        here[keys[-1]] = value
    return obj


_CONDITION = {
    "type": "EvictionInProgress",
    "status": "False",
    "reason": "NotStarted",
    "message": "",
    "lastTransitionTime": "2026-01-02T03:04:05Z",
}

#: (name, old object, status to store first or None, change, subresource)
UPDATE_CASES: list[
    tuple[
        str,
        Callable[[str], dict[str, Any]],
        dict[str, Any] | None,
        Callable[[dict[str, Any]], dict[str, Any]],
        str | None,
    ]
] = [
    (
        "claim-spec-change",
        _native_claim,
        None,
        lambda o: _set(o, "spec.devices.requests.0.name", "other"),
        None,
    ),
    ("claim-label-change", _native_claim, None, lambda o: _set(o, "metadata.labels", {"a": "b"}), None),
    (
        "claim-reserved-without-allocation",
        _native_claim,
        None,
        lambda o: _set(o, "status", {"reservedFor": [_SHARE_POD]}),
        "status",
    ),
    (
        "claim-allocate",
        _native_claim,
        None,
        lambda o: _set(o, "status", {"allocation": _ALLOCATION, "reservedFor": [_SHARE_POD]}),
        "status",
    ),
    (
        "claim-allocate-unknown-request",
        _native_claim,
        None,
        lambda o: _set(
            o, "status", {"allocation": {"devices": {"results": [{**_RESULT, "request": "nope"}]}}}
        ),
        "status",
    ),
    (
        "claim-allocation-change",
        _native_claim,
        {"allocation": _ALLOCATION},
        lambda o: _set(o, "status.allocation.devices.results.0.device", "gpu-1"),
        "status",
    ),
    (
        "claim-deallocate",
        _native_claim,
        {"allocation": _ALLOCATION},
        lambda o: _set(o, "status", {}),
        "status",
    ),
    (
        "claim-device-status-allocated",
        _native_claim,
        {"allocation": _ALLOCATION},
        lambda o: _set(
            o,
            "status.devices",
            [{"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0", "data": {"a": 1}}],
        ),
        "status",
    ),
    (
        "claim-device-status-not-allocated",
        _native_claim,
        {"allocation": _ALLOCATION},
        lambda o: _set(
            o, "status.devices", [{"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-7"}]
        ),
        "status",
    ),
    (
        "claim-admin-allocation-unlabelled",
        _native_claim,
        None,
        lambda o: _set(
            o, "status", {"allocation": {"devices": {"results": [{**_RESULT, "adminAccess": True}]}}}
        ),
        "status",
    ),
    ("slice-driver-change", _native_slice, None, lambda o: _set(o, "spec.driver", "other.example.com"), None),
    ("slice-node-change", _native_slice, None, lambda o: _set(o, "spec.nodeName", "node-2"), None),
    ("slice-generation-bump", _native_slice, None, lambda o: _set(o, "spec.pool.generation", 1), None),
    (
        "slice-bad-device-added",
        _native_slice,
        None,
        lambda o: _set(o, "spec.devices", [{"name": "gpu-0"}, {"name": "GPU-1"}]),
        None,
    ),
    ("rule-effect-change", _native_rule, None, lambda o: _set(o, "spec.taint.effect", "NoExecute"), None),
    ("rule-bad-effect", _native_rule, None, lambda o: _set(o, "spec.taint.effect", "Sometimes"), None),
    (
        "rule-status-condition",
        _native_rule,
        None,
        lambda o: _set(o, "status", {"conditions": [_CONDITION]}),
        "status",
    ),
    (
        "rule-status-bad-condition",
        _native_rule,
        None,
        lambda o: _set(o, "status", {"conditions": [{**_CONDITION, "status": "Maybe"}]}),
        "status",
    ),
]


#: What kube-apiserver answers, so a case cannot pass by both sides failing for another reason.
ACCEPTED_UPDATES = {
    "claim-label-change",
    "claim-allocate",
    "claim-deallocate",
    "claim-device-status-allocated",
    "slice-generation-bump",
    "rule-effect-change",
    "rule-status-condition",
}


@pytest.mark.parametrize(
    ("case", "make_old", "old_status", "change", "subresource"),
    UPDATE_CASES,
    ids=[c[0] for c in UPDATE_CASES],
)
def test_draco_and_kube_apiserver_agree_on_updates(
    kube: ControlPlane,
    namespace: str,
    case: str,
    make_old: Callable[[str], dict[str, Any]],
    old_status: dict[str, Any] | None,
    change: Callable[[dict[str, Any]], dict[str, Any]],
    subresource: str | None,
) -> None:
    name = f"{case}-{namespace[-6:]}"
    old = make_old(name)
    scope = ["-n", namespace] if old["kind"] == "ResourceClaim" else []
    kube.kubectl("create", *scope, "-f", "-", input=json.dumps(old))
    resource = f"{old['kind'].lower()}s.resource.k8s.io"
    if old_status is not None:
        stored = json.loads(kube.kubectl("get", *scope, resource, name, "-o", "json").stdout)
        stored["status"] = old_status
        kube.kubectl("replace", *scope, "--subresource=status", "-f", "-", input=json.dumps(stored))
    stored = json.loads(kube.kubectl("get", *scope, resource, name, "-o", "json").stdout)
    new = change(copy.deepcopy(stored))
    args = ["replace", *scope, "--dry-run=server", "-f", "-"]
    if subresource:
        args.insert(1, f"--subresource={subresource}")
    result = kube.kubectl(*args, input=json.dumps(new), check=False)
    errors = validate_object(new, old=stored, subresource=subresource, namespace_labels={})
    assert (result.returncode == 0) == (case in ACCEPTED_UPDATES), result.stderr
    assert (result.returncode == 0) == (not errors), (
        f"kube-apiserver: {result.stderr.strip() or 'accepts'}; draco: {render_all(errors) or 'accepts'}"
    )
