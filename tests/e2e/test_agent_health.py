"""The agent's probes (`--health-port`, the DaemonSet's readiness and liveness): ready once
its slices are published and its claims listed, and with `--nri-socket` only while
registered with the runtime; alive while it runs."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e.agent_support import pool_complete, slices_of, start_agent, unique
from tests.e2e.support import DracoProcess, wait_for

pytestmark = pytest.mark.e2e

DEVICES = """
name: gpu.draco.dev
cdiClass: gpu
devices:
- name: gpu-{index}
  count: 2
  attributes: {index: {int: "{index}"}}
"""


def probe(port: int, path: str) -> tuple[int, dict[str, object]] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return None


def test_the_agent_is_ready_once_published_and_alive_while_it_runs(
    kube: ControlPlane, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    node, port = unique("health"), free_port()
    start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node, extra=("--health-port", str(port)))
    ready = wait_for(
        lambda: (r := probe(port, "/readyz")) and r[0] == 200 and r, timeout=60, what="/readyz 200"
    )
    assert isinstance(ready, tuple) and ready[1]["waiting"] == []
    assert pool_complete(slices_of(kube, node)), "ready before its slices were published"
    assert probe(port, "/healthz") == (200, {"alive": True, "dead": []})


def test_with_nri_the_agent_is_not_ready_until_the_runtime_answers(
    draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    node, port = unique("health"), free_port()
    # A socket path no runtime listens on: the agent retries, and says why it is not ready.
    extra = ("--health-port", str(port), "--nri-socket", str(tmp_path / "nri.sock"))
    start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node, extra=extra)
    waiting = wait_for(
        lambda: (r := probe(port, "/readyz")) and r[1].get("waiting") == ["nri-registered"] and r,
        timeout=60,
        what="/readyz waiting for NRI only",
    )
    assert isinstance(waiting, tuple) and waiting[0] == 503
    assert probe(port, "/healthz") == (200, {"alive": True, "dead": []})
