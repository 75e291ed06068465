"""The chart's alerts as `promtool` judges them: the PrometheusRule renders (helm) into
valid rules, and each alert has a `promtool test rules` case (alerts.test.yaml) that
shows it firing when its condition holds, and not before; docs/observability.md says
what each means and names every metric they and the dashboard read."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.promkit import (
    ROOT,
    alert_names,
    alert_rules,
    dashboard_queries,
    metric_names,
    prometheus_assets,
)

TESTS = Path(__file__).with_name("alerts.test.yaml")


def test_every_alert_has_a_promtool_case_and_they_pass(tmp_path: Path) -> None:
    rules = alert_rules()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    promtool = str(prometheus_assets() / "promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", TESTS.name], cwd=tmp_path, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {test["alertname"] for case in cases for test in case["alert_rule_test"] if test["exp_alerts"]}
    assert sorted(fired) == sorted(alert_names(rules))


def test_the_rule_is_off_by_default_and_its_thresholds_are_values() -> None:
    from tests.e2e.chartkit import render

    assert not [
        o for o in render(release="draco", namespace="draco-system") if o.get("kind") == "PrometheusRule"
    ]
    rules = alert_rules({"prometheusRule": {"podWaitMinutes": 3, "for": "1m", "labels": {"release": "kps"}}})
    by_name = {r["alert"]: r for group in rules["groups"] for r in group["rules"]}
    assert by_name["DracoPodsWaitingForDevices"]["expr"].endswith("> 3 * 60")
    assert by_name["DracoNRIDisconnected"]["for"] == "1m"


def test_every_alert_and_every_metric_the_dashboard_reads_is_documented() -> None:
    """docs/observability.md has a section per alert, where its runbook_url points, and
    names every draco metric the alerts and the dashboard read."""
    doc = (ROOT / "docs" / "observability.md").read_text()
    sections = set(re.findall(r"^### (\w+)$", doc, flags=re.MULTILINE))
    rules = alert_rules()
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert rule["alert"] in sections, f"docs/observability.md has no section for {rule['alert']}"
            assert rule["annotations"]["runbook_url"].endswith(
                f"docs/observability.md#{rule['alert'].lower()}"
            )
    assert sections == set(alert_names(rules)), sorted(sections - set(alert_names(rules)))
    named = {m for _, expr in _exprs(rules) for m in metric_names(expr) if m.startswith("draco_")}
    families = {re.sub(r"_(bucket|count|sum|total)$", "", m) for m in named}
    documented = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    assert not {m for m in families if m not in documented}, sorted(
        m for m in families if m not in documented
    )


def _exprs(rules: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]] + [
        (q.title, q.expr) for q in dashboard_queries()
    ]
