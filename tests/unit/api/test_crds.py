"""The CRDs in crds/ are exactly what the generator makes from the models, and they are
structural schemas the API server accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from draco.api import cli
from draco.api.claimspec import DeviceSubRequest, ExactDeviceRequest
from draco.api.crds import CRD_SPECS, field_descriptions, generate_crds
from tests.unit.api import samples

CRDS = Path(__file__).resolve().parents[3] / "crds"


def test_committed_crds_match_the_models() -> None:
    generated = {name: cli.dump_crd(crd) for name, crd in generate_crds().items()}
    committed = {path.name: path.read_text() for path in CRDS.glob("*.draco.dev_*.yaml")}
    assert set(committed) == set(generated), "crds/ is stale: run `make crds`"
    for name, text in generated.items():
        assert committed[name] == text, f"crds/{name} is stale: run `make crds`"


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, schema)]
    for name, child in schema.get("properties", {}).items():
        nodes += _walk(child, f"{path}.{name}")
    if "items" in schema:
        nodes += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        nodes += _walk(schema["additionalProperties"], f"{path}{{}}")
    return nodes


@pytest.mark.parametrize("crd", generate_crds().values(), ids=lambda crd: crd["metadata"]["name"])
def test_schemas_are_structural(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert [branch["type"] for branch in node["anyOf"]] == ["integer", "string"], path
            continue
        assert "anyOf" not in node, path
        assert node.get("type") in {"object", "array", "string", "integer", "boolean"}, path
        assert not ("properties" in node and "additionalProperties" in node), path
        for key in node.get("x-kubernetes-list-map-keys", []):
            assert key in node["items"].get("required", []), path


@pytest.mark.parametrize("make", samples.ALL_SAMPLES.values(), ids=samples.ALL_SAMPLES.keys())
def test_samples_validate_against_their_crd(make: Any) -> None:
    data = make()
    crd = next(crd for crd in generate_crds().values() if crd["spec"]["names"]["kind"] == data["kind"])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.validate(data, schema)


def test_printer_columns_and_names() -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in generate_crds().values()}
    columns = {
        kind: [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
        for kind, crd in crds.items()
    }
    assert columns["ResourceSlice"] == ["Node", "Driver", "Pool", "Age"]
    assert columns["DeviceClass"] == ["Selected", "Allocated", "Valid", "Age"]
    assert columns["ResourceClaim"] == ["State", "Devices", "Age"]
    short_names = [name for spec in CRD_SPECS for name in spec.short_names]
    assert len(short_names) == len(set(short_names))
    assert crds["ResourceClaim"]["spec"]["scope"] == "Namespaced"
    assert crds["ResourceSlice"]["spec"]["scope"] == "Cluster"
    subresources = {kind for kind, crd in crds.items() if "subresources" in crd["spec"]["versions"][0]}
    assert subresources == {
        "ResourceClaim",
        "DeviceTaintRule",
        "DeviceClass",
        "PodGroup",
        "ResourcePoolStatusRequest",
    }
    assert columns["PodGroup"] == ["MinCount", "Scheduled", "Reason", "Age"]
    assert crds["PodGroup"]["spec"]["group"] == "scheduling.draco.dev"
    assert [v["name"] for v in crds["PodGroup"]["spec"]["versions"] if v["storage"]] == ["v1beta1"]
    # Upstream's columns of KEP-5677 (the sums are draco's status fields).
    assert columns["ResourcePoolStatusRequest"] == [
        "Driver", "Total", "Available", "Allocated", "Unavailable", "Errors", "Pools", "Status", "Completed",
    ]  # fmt: skip
    assert [v["name"] for v in crds["ResourcePoolStatusRequest"]["spec"]["versions"]] == ["v1alpha3"]
    assert crds["ResourcePoolStatusRequest"]["spec"]["scope"] == "Cluster"


def test_cli_prints_a_multi_document_stream(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main([]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in documents] == ["CustomResourceDefinition"] * 8
    assert cli.main(["-o", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(generate_crds())


@pytest.mark.parametrize("crd", generate_crds().values(), ids=lambda crd: crd["metadata"]["name"])
def test_every_field_and_object_is_described(crd: dict[str, Any]) -> None:
    # `kubectl explain` prints these; only scalar list items and map values may go without.
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    undescribed = [
        path
        for path, node in _walk(schema)
        if path != ".metadata" and not path.endswith(("[]", "{}")) and not node.get("description", "").strip()
    ]
    assert undescribed == []
    items = [node for path, node in _walk(schema) if path.endswith(("[]", "{}")) and "properties" in node]
    assert all(node.get("description") for node in items)
    descriptions = [node["description"] for _, node in _walk(schema) if "description" in node]
    assert not [text for text in descriptions if "\n" in text or "  " in text]


def test_descriptions_come_from_the_models() -> None:
    crd = generate_crds()["resource.draco.dev_resourceclaims.yaml"]
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root["description"].startswith("A request for devices")
    exactly = root["properties"]["spec"]["properties"]["devices"]["properties"]["requests"]["items"]
    count = exactly["properties"]["exactly"]["properties"]["count"]["description"]
    assert "defaults to 1" in count
    assert "`ExactCount`" in count and "``" not in count
    state = root["properties"]["status"]["properties"]["state"]["description"]
    assert state.startswith("draco:")


def test_field_descriptions_are_read_from_the_source_including_inherited_fields() -> None:
    exact = field_descriptions(ExactDeviceRequest)
    sub = field_descriptions(DeviceSubRequest)
    # `count` is declared once, on the shared base, and described for both.
    assert exact["count"] == sub["count"] and "defaults to 1" in exact["count"]
    assert "admin_access" in exact and "admin_access" not in sub
    assert set(sub) == set(DeviceSubRequest.model_fields)
    # Read by the generator, not by pydantic at import (which would slow every process).
    assert ExactDeviceRequest.model_fields["count"].description is None
