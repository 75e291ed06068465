"""Conversion between resource.draco.dev/v1beta1, v1beta2 and v1, as upstream converts
resource.k8s.io's (pkg/apis/resource/v1beta1/conversion.go): requests' `exactly`, devices'
`basic`, slices' plain nodeName/allNodes; v1beta2 is v1's shape."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from draco.api.crds import generate_crds
from draco.api.versions import SERVED_VERSIONS, convert, to_storage
from draco.errors import InvalidObjectError
from draco.webhook.conversion import convert_review
from tests.unit.api import samples

V1 = "resource.draco.dev/v1"
V1BETA1 = "resource.draco.dev/v1beta1"
V1BETA2 = "resource.draco.dev/v1beta2"


def _claim_v1beta1() -> dict[str, Any]:
    return {
        "apiVersion": V1BETA1,
        "kind": "ResourceClaim",
        "metadata": {"name": "gpus", "namespace": "ns"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "deviceClassName": "gpu.nvidia.com",
                        "allocationMode": "ExactCount",
                        "count": 2,
                        "selectors": [
                            {"cel": {"expression": "device.attributes['gpu.nvidia.com'].index < 4"}}
                        ],
                        "tolerations": [{"key": "k", "operator": "Exists"}],
                    },
                    {
                        "name": "any",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 1},
                            {"name": "small", "deviceClassName": "mig.nvidia.com", "count": 2},
                        ],
                    },
                ],
                "config": [
                    {"requests": ["gpus"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {"a": 1}}}
                ],
            }
        },
    }


def test_v1beta1_requests_carry_exactlys_fields_and_come_back_unchanged() -> None:
    claim = _claim_v1beta1()
    v1 = to_storage(claim)
    exact, first = v1["spec"]["devices"]["requests"]
    assert v1["apiVersion"] == V1
    assert exact == {
        "name": "gpus",
        "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "allocationMode": "ExactCount",
            "count": 2,
            "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].index < 4"}}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
        },
    }
    assert "exactly" not in first and len(first["firstAvailable"]) == 2
    assert v1["spec"]["devices"]["config"] == claim["spec"]["devices"]["config"]
    back = convert(v1, V1BETA1)
    # Upstream's v1beta1 never omits deviceClassName: "" on a request with firstAvailable.
    assert back["spec"]["devices"]["requests"][1].pop("deviceClassName") == ""
    assert back == claim
    assert claim == _claim_v1beta1(), "the input is not changed"


def test_any_main_field_makes_an_exactly_as_upstream_does() -> None:
    """Set beside firstAvailable too (validation then refuses it); an empty list is set
    (not nil), a zero count and an empty class name are not."""
    for fields, exactly in (
        ({"adminAccess": False}, {"adminAccess": False}),
        ({"selectors": []}, {}),
        ({"count": 0, "deviceClassName": ""}, None),
    ):
        request = {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "c"}], **fields}
        claim = {**_claim_v1beta1(), "spec": {"devices": {"requests": [request]}}}
        (converted,) = to_storage(claim)["spec"]["devices"]["requests"]
        assert converted.get("exactly") == exactly
        assert converted["firstAvailable"] == [{"name": "a", "deviceClassName": "c"}]


def test_templates_convert_their_claim_spec() -> None:
    template = {
        "apiVersion": V1BETA1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]}}},
    }
    v1 = to_storage(template)
    assert v1["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    ]
    assert convert(v1, V1BETA1) == template


def test_v1beta1_devices_are_basic_and_slices_plain() -> None:
    slice_ = {
        "apiVersion": V1BETA1,
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-a",
            "allNodes": False,
            "devices": [
                {
                    "name": "gpu-0",
                    "basic": {
                        "attributes": {"index": {"int": 0}},
                        "capacity": {"memory": {"value": "80Gi"}},
                        "taints": [{"key": "k", "effect": "NoSchedule"}],
                    },
                },
                {"name": "gpu-1", "basic": {}},
            ],
        },
    }
    v1 = to_storage(slice_)
    assert "allNodes" not in v1["spec"], "false means unset in v1beta1"
    assert v1["spec"]["devices"] == [
        {
            "name": "gpu-0",
            "attributes": {"index": {"int": 0}},
            "capacity": {"memory": {"value": "80Gi"}},
            "taints": [{"key": "k", "effect": "NoSchedule"}],
        },
        {"name": "gpu-1"},
    ]
    back = convert(v1, V1BETA1)
    assert back["spec"]["devices"] == slice_["spec"]["devices"]
    assert "allNodes" not in back["spec"]
    spread = copy.deepcopy(slice_)
    spread["spec"].update(nodeName="", allNodes=True)
    assert "nodeName" not in to_storage(spread)["spec"]
    assert to_storage(spread)["spec"]["allNodes"] is True


def test_v1beta2_is_v1s_shape_and_unknown_versions_are_refused() -> None:
    for native in (samples.resource_claim(), samples.resource_slice(), samples.device_class()):
        sample = {**native, "apiVersion": V1}
        beta2 = convert(sample, V1BETA2)
        assert {**beta2, "apiVersion": V1} == sample
        assert to_storage(beta2) == sample
        assert to_storage(convert(sample, V1BETA1)) == sample, sample["kind"]
    with pytest.raises(InvalidObjectError):
        convert({**samples.resource_claim(), "apiVersion": "resource.draco.dev/v1alpha3"}, V1)
    with pytest.raises(InvalidObjectError):
        convert({"apiVersion": V1, "kind": "DeviceTaintRule", "spec": {}}, V1BETA1)


def test_a_conversion_review_converts_every_object_or_fails_whole() -> None:
    review = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u1", "desiredAPIVersion": V1, "objects": [_claim_v1beta1(), _claim_v1beta1()]},
    }
    answer = convert_review(review)["response"]
    assert answer["uid"] == "u1" and answer["result"] == {"status": "Success"}
    assert [o["apiVersion"] for o in answer["convertedObjects"]] == [V1, V1]
    review["request"]["desiredAPIVersion"] = "resource.draco.dev/v9"
    failed = convert_review(review)["response"]
    assert failed["result"]["status"] == "Failure" and "v9" in failed["result"]["message"]
    with pytest.raises(ValueError):
        convert_review({"kind": "AdmissionReview"})


def test_the_crds_serve_each_kinds_versions_and_store_v1() -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in generate_crds().values()}
    for kind, versions in SERVED_VERSIONS.items():
        served = crds[kind]["spec"]["versions"]
        assert [v["name"] for v in served] == list(versions)
        assert [v["name"] for v in served if v["storage"]] == ["v1"]
    claim_beta1 = crds["ResourceClaim"]["spec"]["versions"][2]["schema"]["openAPIV3Schema"]
    request = claim_beta1["properties"]["spec"]["properties"]["devices"]["properties"]["requests"]["items"]
    assert "exactly" not in request["properties"] and "deviceClassName" in request["properties"]
    assert "default" not in request["properties"]["allocationMode"], "v1beta1 defaults it only with a class"
    slice_beta1 = crds["ResourceSlice"]["spec"]["versions"][2]["schema"]["openAPIV3Schema"]
    device = slice_beta1["properties"]["spec"]["properties"]["devices"]["items"]
    assert set(device["properties"]) == {"name", "basic"}
    assert crds["ResourceClaim"]["spec"]["conversion"]["strategy"] == "Webhook"
    assert "conversion" not in crds["DeviceClass"]["spec"], "same shape in every version: no webhook needed"


def test_field_paths_are_named_as_the_version_written_names_them() -> None:
    from draco.api.versions import field_path_in

    exact = "spec.devices.requests[2].exactly.selectors[0].cel.expression"
    assert (
        field_path_in("ResourceClaim", "v1beta1", exact)
        == "spec.devices.requests[2].selectors[0].cel.expression"
    )
    assert field_path_in("ResourceClaim", "v1beta2", exact) == exact
    assert field_path_in("ResourceClaim", "v1", exact) == exact
    assert (
        field_path_in("ResourceClaimTemplate", "v1beta1", "spec.spec.devices.requests[0].exactly")
        == "spec.spec.devices.requests[0]"
    )
    # Subrequests have v1's shape in v1beta1 too; a name that only starts with `exactly` is kept.
    sub = "spec.devices.requests[0].firstAvailable[1].deviceClassName"
    assert field_path_in("ResourceClaim", "v1beta1", sub) == sub
    assert field_path_in("ResourceClaim", "v1beta1", "spec.devices.requests[0].exactlyX") == (
        "spec.devices.requests[0].exactlyX"
    )
    # A v1beta1 device keeps all but its name under `basic`.
    attr = "spec.devices[3].attributes[gpu.example.com/model].string"
    assert (
        field_path_in("ResourceSlice", "v1beta1", attr)
        == "spec.devices[3].basic.attributes[gpu.example.com/model].string"
    )
    assert field_path_in("ResourceSlice", "v1beta1", "spec.devices[3].name") == "spec.devices[3].name"
    assert field_path_in("DeviceClass", "v1beta1", "spec.selectors[0]") == "spec.selectors[0]"
