"""The chart's files that are copies or derivations of others stay in step: its CRDs are
`crds/` (generated from the models), and docs/install.md's values reference is the
schema's."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "draco"


def test_the_chart_carries_exactly_the_generated_crds() -> None:
    generated = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    carried = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert generated, "crds/ is empty: run `make crds`"
    assert carried == generated, "charts/draco/crds differs from crds/: run `make crds`"


def test_the_values_reference_of_the_install_doc_is_generated_from_the_schema() -> None:
    spec = importlib.util.spec_from_file_location("values_doc", ROOT / "hack" / "values-doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "docs/install.md is stale: run `make chart-docs`"
    doc = (ROOT / "docs" / "install.md").read_text()
    assert '| `agent.drivers` | list of `fake` \\| `nvidia` | `["fake"]` |' in doc


def test_the_dashboard_is_generated_and_every_panel_has_a_query() -> None:
    spec = importlib.util.spec_from_file_location("dashboard", ROOT / "hack" / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "charts/draco/dashboards/draco.json is stale: run `make dashboard`"
    dashboard = json.loads((CHART / "dashboards" / "draco.json").read_text())
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Nodes", "Allocation", "Waiting pods and groups", "Devices per container"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert (
        panels and all(t["expr"] for p in panels for t in p["targets"]) and all(p["targets"] for p in panels)
    )
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_every_default_value_is_described_by_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: dict[str, object], given: dict[str, object], path: str) -> None:
        properties = node.get("properties")
        assert isinstance(properties, dict), path
        for key, value in given.items():
            assert key in properties, f"{path}{key} is in values.yaml but not in values.schema.json"
            child = properties[key]
            assert child.get("description"), f"{path}{key} has no description"
            if isinstance(value, dict) and "properties" in child:
                walk(child, value, f"{path}{key}.")

    walk(schema, values, "")


def test_the_agent_claim_policy_keeps_every_status_field_but_devices() -> None:
    """A field added to the claim's status, in any served version (the policy matches every
    version), must be added to the policy's `restUnchanged`, or the agent could write it."""
    crd = yaml.safe_load((ROOT / "crds" / "resource.draco.dev_resourceclaims.yaml").read_text())
    fields = {
        field
        for version in crd["spec"]["versions"]
        for field in version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    }
    policy = (CHART / "templates" / "agent-claim-policy.yaml").read_text()
    for field in fields - {"devices"}:
        assert f"object.?status.?{field} == oldObject.?status.?{field}" in policy, field
    assert "devices" in fields
