"""resource.draco.dev/v1beta1 and v1beta2 beside v1: manifests written for Kubernetes
1.32-1.36's resource.k8s.io (NVIDIA-quickstart-shaped, tests/e2e/manifests/) are accepted
with only their group changed, stored as v1 and read back in their own version, converted
by `draco webhook --patch-crds` as upstream converts. Where this kube-apiserver serves
resource.k8s.io/v1beta1 and v1beta2 too (the dev control plane turns them on for 1.37),
the same manifests go through upstream's own conversion and must read back the same."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.api.constants import GROUP, NATIVE_GROUP
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.support import running_webhook, wait_for

pytestmark = pytest.mark.e2e

MANIFESTS = Path(__file__).parent / "manifests"
PLURALS = {
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceSlice": "resourceslices",
}


def _manifests(namespace: str) -> list[dict[str, Any]]:
    objects = []
    for path in sorted(MANIFESTS.glob("gpu-test*-v1beta1.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj["kind"] in ("ResourceClaim", "ResourceClaimTemplate"):
                obj["metadata"]["namespace"] = namespace
            else:  # cluster-scoped: named after the test's namespace
                obj["metadata"]["name"] = f"{namespace}-{obj['metadata']['name']}"[:63]
            objects.append(obj)
    return objects


def _read(kube: ControlPlane, obj: dict[str, Any], group: str, version: str) -> dict[str, Any]:
    meta = obj["metadata"]
    args = ["get", f"{PLURALS[obj['kind']]}.{version}.{group}", meta["name"], "-o", "json"]
    if "namespace" in meta:
        args += ["-n", meta["namespace"]]
    read: dict[str, Any] = json.loads(kube.kubectl(*args).stdout)
    return read


def _with_group(obj: dict[str, Any], group: str) -> dict[str, Any]:
    return {**obj, "apiVersion": f"{group}/{obj['apiVersion'].rpartition('/')[2]}"}


def _serves(kube: ControlPlane, api_version: str) -> bool:
    return api_version in kube.kubectl("api-versions").stdout.split()


@pytest.fixture
def converting(kube: ControlPlane, tmp_path: Path) -> Iterator[None]:
    with running_webhook(kube, tmp_path / "webhook", patch_crds=True):
        yield


def _create(kube: ControlPlane, obj: dict[str, Any]) -> None:
    """Create `obj`; the first one waits until the API server calls the conversion webhook
    the CRDs were just pointed at."""

    def created() -> bool:
        result = kube.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
        if result.returncode == 0:
            return True
        assert "conversion" in result.stderr or "webhook" in result.stderr, result.stderr
        return False

    wait_for(created, timeout=60, what=f"{obj['kind']} {obj['metadata']['name']} created")


def test_v1beta1_quickstart_manifests_are_stored_as_v1_and_read_back_as_v1beta1(
    kube: ControlPlane, namespace: str, converting: None
) -> None:
    objects = _manifests(namespace)
    for obj in objects:
        _create(kube, obj)
    for obj in objects:
        as_v1 = _read(kube, obj, GROUP, "v1")
        as_v1beta1 = _read(kube, obj, GROUP, "v1beta1")
        assert as_v1["apiVersion"] == f"{GROUP}/v1" and as_v1beta1["apiVersion"] == f"{GROUP}/v1beta1"
        if obj["kind"] == "ResourceClaimTemplate":
            (request,) = as_v1["spec"]["spec"]["devices"]["requests"]
            assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
            assert request["exactly"]["count"] == 2
            back = as_v1beta1["spec"]["spec"]["devices"]["requests"][0]
            assert (back["count"], back["allocationMode"]) == (2, "ExactCount")
            assert back["selectors"] == obj["spec"]["spec"]["devices"]["requests"][0]["selectors"]
            assert as_v1beta1["spec"]["spec"]["devices"]["config"] == obj["spec"]["spec"]["devices"]["config"]
        elif obj["kind"] == "ResourceClaim":
            gpus, fallback = as_v1["spec"]["devices"]["requests"]
            assert gpus["exactly"]["allocationMode"] == "All" and "count" not in gpus["exactly"]
            assert gpus["exactly"]["tolerations"] == obj["spec"]["devices"]["requests"][0]["tolerations"]
            assert "exactly" not in fallback and len(fallback["firstAvailable"]) == 2
            # The subrequest without a count got upstream's default.
            assert as_v1beta1["spec"]["devices"]["requests"][1]["firstAvailable"][1]["count"] == 1
            assert as_v1beta1["spec"]["devices"]["constraints"] == obj["spec"]["devices"]["constraints"]
        elif obj["kind"] == "ResourceSlice":
            assert as_v1["spec"]["devices"][0]["attributes"]["productName"] == {
                "string": "NVIDIA A100-SXM4-80GB"
            }
            assert "basic" not in as_v1["spec"]["devices"][0]
            assert as_v1beta1["spec"]["devices"] == obj["spec"]["devices"]
        else:
            assert as_v1["spec"] == as_v1beta1["spec"] == obj["spec"]
    for plural in PLURALS.values():
        crd = json.loads(kube.kubectl("get", "crd", f"{plural}.{GROUP}", "-o", "json").stdout)
        assert crd["status"]["storedVersions"] == ["v1"], plural


def test_a_v1beta2_claim_is_stored_as_v1_and_read_back_as_v1beta2(
    kube: ControlPlane, namespace: str, converting: None
) -> None:
    claim = {
        "apiVersion": f"{GROUP}/v1beta2",
        "kind": "ResourceClaim",
        "metadata": {"name": "beta2", "namespace": namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    _create(kube, claim)
    as_v1 = _read(kube, claim, GROUP, "v1")
    as_v1beta2 = _read(kube, claim, GROUP, "v1beta2")
    expected = {
        "name": "gpu",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1},
    }
    assert as_v1["spec"]["devices"]["requests"] == [expected]
    assert as_v1beta2["spec"] == as_v1["spec"]
    assert as_v1beta1_shape(_read(kube, claim, GROUP, "v1beta1")) == {
        "name": "gpu", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1,
    }  # fmt: skip


def as_v1beta1_shape(claim: dict[str, Any]) -> dict[str, Any]:
    (request,) = claim["spec"]["devices"]["requests"]
    return dict(request)


def test_upstreams_conversion_reads_the_same_manifests_the_same(
    kube: ControlPlane, namespace: str, converting: None
) -> None:
    """The manifests created natively (resource.k8s.io/v1beta1) and as draco's: each read
    back as v1 and as v1beta1 gives the same spec from both, so draco converts and defaults
    them as upstream does."""
    if not (_serves(kube, f"{NATIVE_GROUP}/v1beta1") and _serves(kube, f"{NATIVE_GROUP}/v1")):
        pytest.skip(f"this kube-apiserver serves no {NATIVE_GROUP}/v1beta1 and v1 to compare with")
    objects = _manifests(namespace)
    for obj in objects:
        _create(kube, obj)
        kube.kubectl("create", "-f", "-", input=json.dumps(_with_group(obj, NATIVE_GROUP)))
    differences = []
    for obj in objects:
        for version in ("v1", "v1beta1"):
            ours = _read(kube, obj, GROUP, version)["spec"]
            upstream = _read(kube, obj, NATIVE_GROUP, version)["spec"]
            if upstream.get("metadata") == {} and "metadata" not in ours:
                del upstream["metadata"]  # a template's empty ObjectMeta: Go always writes it
            if ours != upstream:
                differences.append(f"{obj['kind']} as {version}:\n  draco:    {ours}\n  upstream: {upstream}")
    assert not differences, "\n".join(differences)
