"""The agent's small parts: metrics, command-line checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest

import draco.agent.metrics  # noqa: F401  (registers the agent's metrics)
from draco.agent.cli import build_parser, make_drivers, node_names
from draco.agent.main import ClaimSelectors, claims_selector, claims_selectors
from draco.errors import AgentError, KubeError
from draco.kube.capabilities import is_unsupported_field
from draco.runtime.metrics import REGISTRY
from draco.runtime.workqueue import WorkQueue
from tests.unit.agent.support import FAKE_YAML


def test_metrics_exist_at_zero_before_anything_happens() -> None:
    text = generate_latest(REGISTRY).decode()
    assert 'draco_agent_prepare_claims_total{result="success"} 0.0' in text
    assert 'draco_agent_prepare_claims_total{result="error"} 0.0' in text
    assert 'draco_agent_unprepare_claims_total{result="error"} 0.0' in text
    assert 'draco_agent_resourceslice_writes_total{operation="create"} 0.0' in text


def test_node_names() -> None:
    assert node_names("w", 1) == ["w"]
    assert node_names("sim", 3) == ["sim-0", "sim-1", "sim-2"]
    with pytest.raises(AgentError):
        node_names("w", 0)


def test_fake_needs_a_config_and_nvidia_cannot_simulate_nodes(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="--config"):
        make_drivers(build_parser().parse_args(["--node-name", "n"]))
    path = tmp_path / "d.yaml"
    path.write_text(FAKE_YAML)
    drivers, watchers = make_drivers(build_parser().parse_args(["--node-name", "n", "--config", str(path)]))
    assert [d.name for d in drivers] == ["gpu.draco.dev", "nic.draco.dev"] and len(watchers) == 1
    with pytest.raises(AgentError, match="--nodes"):
        make_drivers(build_parser().parse_args(["--node-name", "n", "--driver", "nvidia", "--nodes", "2"]))


def test_agent_queues_report_workqueue_metrics_on_the_same_registry() -> None:
    queue: WorkQueue[str] = WorkQueue("agent-plumbing-claims")
    queue.add("uid")
    assert REGISTRY.get_sample_value("workqueue_adds_total", {"name": "agent-plumbing-claims"}) == 1
    assert REGISTRY.get_sample_value("draco_agent_prepared_claims") is not None


def test_the_claims_watch_selects_the_agents_nodes() -> None:
    assert claims_selector(["worker"]) == "status.nodeName=worker"
    # No set form for field selectors: a multi-node agent watches all and filters by pool.
    assert claims_selector(["sim-1", "sim-0"]) is None


def test_the_claims_watch_selects_by_field_where_served_else_by_label() -> None:
    assert claims_selectors(["worker"], by_field=True) == ClaimSelectors(
        field_selector="status.nodeName=worker"
    )
    # kube-apiserver < 1.31 drops CRD selectableFields: the operator's node label instead.
    assert claims_selectors(["worker"], by_field=False) == ClaimSelectors(
        label_selector="resource.draco.dev/node=worker"
    )
    assert claims_selectors(["sim-1", "sim-0"], by_field=True) == ClaimSelectors()
    assert claims_selectors(["sim-1", "sim-0"], by_field=False) == ClaimSelectors()


def test_only_an_unsupported_field_label_means_not_served() -> None:
    # What kube-apiserver 1.30 answers a field selector on a CRD field it does not serve.
    refused = KubeError(
        "list resourceclaims: field label not supported: status.nodeName", status=400, reason="BadRequest"
    )
    assert is_unsupported_field(refused)
    assert not is_unsupported_field(KubeError("list resourceclaims: forbidden", status=403))
    assert not is_unsupported_field(KubeError("list resourceclaims: field label not supported", status=500))
