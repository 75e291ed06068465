"""What the chart renders for availability: the agent's probes, a PodDisruptionBudget and
spreading over nodes for each two-replica Deployment, and the switches that turn them off.
(`helm template` only; tests/e2e/test_chart.py has the rendered chart accepted by the API
server, tests/cluster runs it.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.chartkit import render

pytestmark = pytest.mark.e2e


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_by_default_the_agent_is_probed_and_the_replicas_keep_one_and_spread() -> None:
    objects = render(release="r", namespace="ns")
    (agent,) = by_kind(objects, "DaemonSet")["r-agent"]["spec"]["template"]["spec"]["containers"]
    assert "--health-port=8081" in agent["args"]
    assert agent["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    budgets = by_kind(objects, "PodDisruptionBudget")
    deployments = by_kind(objects, "Deployment")
    for component in ("operator", "webhook"):
        budget = budgets[f"r-{component}"]["spec"]
        selector = deployments[f"r-{component}"]["spec"]["selector"]["matchLabels"]
        assert budget == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
        (spread,) = deployments[f"r-{component}"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert spread["topologyKey"] == "kubernetes.io/hostname"
        assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
        assert spread["labelSelector"] == {"matchLabels": selector}


def test_one_replica_has_no_budget_and_spreading_can_be_turned_off_or_enforced() -> None:
    objects = render(
        release="r",
        namespace="ns",
        values={
            "operator": {"replicas": 1, "topologySpread": ""},
            "webhook": {"topologySpread": "DoNotSchedule", "podDisruptionBudget": {"maxUnavailable": "50%"}},
        },
    )
    budgets = by_kind(objects, "PodDisruptionBudget")
    assert sorted(budgets) == ["r-webhook"] and budgets["r-webhook"]["spec"]["maxUnavailable"] == "50%"
    deployments = by_kind(objects, "Deployment")
    assert "topologySpreadConstraints" not in deployments["r-operator"]["spec"]["template"]["spec"]
    (spread,) = deployments["r-webhook"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
