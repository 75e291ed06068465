"""The agent's small parts: metrics, command-line checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest

from draco.agent.cli import build_parser, make_drivers, node_names
from draco.agent.metrics import AgentMetrics
from draco.errors import AgentError
from tests.unit.agent.support import FAKE_YAML


def test_metrics_exist_at_zero_before_anything_happens() -> None:
    text = generate_latest(AgentMetrics().registry).decode()
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
