"""Every field draco's CRDs declare is known to draco's structural check, so a valid
`resource.draco.dev/v1` object is never rejected as having an "unknown field"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.validation.objects import shape_for
from draco.validation.schema import ListOf, MapOf, Node, Obj

CRDS = sorted((Path(__file__).resolve().parents[3] / "crds").glob("*.yaml"))


def _unknown_to_draco(schema: dict[str, Any], node: Node, path: str) -> list[str]:
    if isinstance(node, Obj):
        props = schema.get("properties") or {}
        missing = [f"{path}.{k}" for k in props if k not in node.fields]
        for key in props.keys() & node.fields.keys():
            missing += _unknown_to_draco(props[key], node.fields[key], f"{path}.{key}")
        return missing
    if isinstance(node, ListOf) and "items" in schema:
        return _unknown_to_draco(schema["items"], node.item, f"{path}[]")
    if isinstance(node, MapOf) and isinstance(schema.get("additionalProperties"), dict):
        return _unknown_to_draco(schema["additionalProperties"], node.value, f"{path}{{}}")
    return []


@pytest.mark.parametrize("crd_path", CRDS, ids=[p.stem for p in CRDS])
def test_crd_fields_are_known(crd_path: Path) -> None:
    crd = yaml.safe_load(crd_path.read_text())
    kind = crd["spec"]["names"]["kind"]
    for version in crd["spec"]["versions"]:
        if version["name"] == "v1beta1" and crd["spec"]["group"] == "resource.draco.dev":
            continue  # converted to v1 before draco validates it (draco.api.versions)
        schema = version["schema"]["openAPIV3Schema"]
        shape = shape_for(kind, f"{crd['spec']['group']}/{version['name']}")
        assert _unknown_to_draco(schema, shape, kind) == []
