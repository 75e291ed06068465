"""The generated CRDs on a real API server: they are established, objects of every kind
written from the models come back equal, status writes go through the status
subresource, static defaults apply, and kubectl shows the printer columns."""

from __future__ import annotations

import json
from typing import Any

import pytest

from draco.api import API_VERSION, GROUP, ResourceClaim, load_object
from draco.api.crds import CRD_SPECS
from draco.tools.dev.controlplane import ControlPlane
from tests.unit.api import samples

pytestmark = pytest.mark.e2e


def _as_new(data: dict[str, Any], *, namespace: str | None, suffix: str) -> dict[str, Any]:
    """A sample as a user would create it: our apiVersion, no server-set metadata, no status."""
    data = {**data, "apiVersion": API_VERSION}
    data.pop("status", None)
    metadata = {k: v for k, v in data["metadata"].items() if k not in samples.SERVER_FIELDS}
    metadata.pop("ownerReferences", None)
    metadata.pop("generateName", None)
    metadata["name"] = f"{metadata['name']}-{suffix}"
    if namespace is not None and "namespace" in metadata:
        metadata["namespace"] = namespace
    data["metadata"] = metadata
    return data


def _get(kube: ControlPlane, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    args = ["get", f"{resource}.{GROUP}", name, "-o", "json"]
    if namespace:
        args += ["-n", namespace]
    result: dict[str, Any] = json.loads(kube.kubectl(*args).stdout)
    return result


def test_every_crd_is_established(kube: ControlPlane) -> None:
    names = set(kube.kubectl("get", "crd", "-o", "name").stdout.split())
    for spec in CRD_SPECS:
        assert f"customresourcedefinition.apiextensions.k8s.io/{spec.plural}.{GROUP}" in names


def test_short_names_do_not_clash_with_any_served_resource(kube: ControlPlane) -> None:
    table = kube.kubectl("api-resources", "-o", "wide").stdout.splitlines()
    short_names_column = table[0].index("SHORTNAMES")
    apiversion_column = table[0].index("APIVERSION")
    owners: dict[str, list[str]] = {}
    for row in table[1:]:
        short_names = row[short_names_column:apiversion_column].strip()
        for short in short_names.split(",") if short_names else ():
            owners.setdefault(short, []).append(row.split()[0])
    for spec in CRD_SPECS:
        for short in spec.short_names:
            assert owners.get(short) == [spec.plural], (short, owners.get(short))


@pytest.mark.parametrize("sample", samples.ALL_SAMPLES, ids=samples.ALL_SAMPLES.keys())
def test_objects_round_trip_through_the_api_server(kube: ControlPlane, namespace: str, sample: str) -> None:
    source = samples.ALL_SAMPLES[sample]()
    wanted = load_object(_as_new(source, namespace=namespace, suffix=namespace[-6:]))
    kube.kubectl("create", "-f", "-", input=json.dumps(wanted.to_dict()))
    spec = next(s for s in CRD_SPECS if wanted.kind == s.model.KIND)
    stored = _get(kube, spec.plural, wanted.name, wanted.namespace)
    back = load_object(stored)
    assert back.to_dict() == stored  # lossless for what the server returns
    assert back.model_dump(exclude={"metadata"}) == wanted.model_dump(exclude={"metadata"})

    if "status" in source and spec.status_subresource:
        stored["status"] = source["status"]
        kube.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(stored))
        with_status = _get(kube, spec.plural, wanted.name, wanted.namespace)
        assert with_status["status"] == source["status"]
        assert load_object(with_status).to_dict() == with_status


def test_static_defaults_are_applied_by_the_server(kube: ControlPlane, namespace: str) -> None:
    raw = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": "defaults", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu", "tolerations": [{"key": "k", "value": "v"}]},
                    }
                ]
            }
        },
    }
    kube.kubectl("create", "-f", "-", input=json.dumps(raw))
    exactly = _get(kube, "resourceclaims", "defaults", namespace)["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["allocationMode"] == "ExactCount"
    assert exactly["tolerations"][0]["operator"] == "Equal"


def test_invalid_quantities_are_rejected(kube: ControlPlane) -> None:
    data = _as_new(samples.counter_slice(), namespace=None, suffix="badq")
    data["spec"]["sharedCounters"][0]["counters"]["memory"]["value"] = "lots"
    result = kube.kubectl("create", "-f", "-", input=json.dumps(data), check=False)
    assert result.returncode != 0
    assert "sharedCounters[0].counters.memory.value" in result.stderr


def test_kubectl_shows_the_printer_columns(kube: ControlPlane, namespace: str) -> None:
    suffix = namespace[-6:]
    device_class = _as_new(samples.device_class(), namespace=None, suffix=suffix)
    kube.kubectl("create", "-f", "-", input=json.dumps(device_class))
    table = kube.kubectl("get", f"deviceclasses.{GROUP}", device_class["metadata"]["name"]).stdout
    assert table.split("\n")[0].split() == ["NAME", "SELECTED", "ALLOCATED", "VALID", "AGE"]

    slice_ = _as_new(samples.resource_slice(), namespace=None, suffix=suffix)
    kube.kubectl("create", "-f", "-", input=json.dumps(slice_))
    table = kube.kubectl("get", f"resourceslices.{GROUP}", slice_["metadata"]["name"]).stdout
    header, row = table.strip().split("\n")
    assert header.split() == ["NAME", "NODE", "DRIVER", "POOL", "AGE"]
    assert row.split()[1:4] == ["node-a", "gpu.example.com", "node-a"]
    by_node = kube.kubectl(
        "get", f"resourceslices.{GROUP}", "--field-selector", "spec.nodeName=node-a", "-o", "name"
    ).stdout
    assert slice_["metadata"]["name"] in by_node

    claim = _as_new(samples.resource_claim(), namespace=namespace, suffix=suffix)
    kube.kubectl("create", "-f", "-", input=json.dumps(claim))
    stored = ResourceClaim.from_dict(_get(kube, "resourceclaims", claim["metadata"]["name"], namespace))
    stored.status = ResourceClaim.from_dict(samples.resource_claim()).status
    assert stored.refresh_summary()
    kube.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(stored.to_dict()))
    table = kube.kubectl("get", f"resourceclaims.{GROUP}", "-n", namespace, claim["metadata"]["name"]).stdout
    header, row = table.strip().split("\n")
    assert header.split() == ["NAME", "STATE", "DEVICES", "AGE"]
    assert row.split()[1:3] == ["allocated,reserved", "node-a/eth1,node-a/gpu-0"]


def test_immutable_fields_are_enforced_by_the_server(kube: ControlPlane, namespace: str) -> None:
    claim = _as_new(samples.resource_claim(), namespace=namespace, suffix="immutable")
    kube.kubectl("create", "-f", "-", input=json.dumps(claim))
    patch = json.dumps(
        {"spec": {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "y"}}]}}}
    )
    result = kube.kubectl(
        "patch",
        f"resourceclaims.{GROUP}",
        claim["metadata"]["name"],
        "-n",
        namespace,
        "--type=merge",
        "-p",
        patch,
        check=False,
    )
    assert result.returncode != 0
    assert "field is immutable" in result.stderr

    slice_ = _as_new(samples.resource_slice(), namespace=None, suffix=namespace[-6:])
    kube.kubectl("create", "-f", "-", input=json.dumps(slice_))
    name = slice_["metadata"]["name"]
    for field, value in (("driver", "other.example.com"), ("nodeName", "node-b")):
        patch = json.dumps({"spec": {field: value}})
        result = kube.kubectl(
            "patch", f"resourceslices.{GROUP}", name, "--type=merge", "-p", patch, check=False
        )
        assert result.returncode != 0, field
        assert "field is immutable" in result.stderr
    # Mutable fields still change.
    kube.kubectl(
        "patch",
        f"resourceslices.{GROUP}",
        name,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"pool": {"generation": 4}}}),
    )
