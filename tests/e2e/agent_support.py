"""Helpers for the agent's e2e tests: starting an agent on fake devices, reading slices."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.support import DracoProcess

SLICES = "resourceslices.resource.draco.dev"
CLAIMS = "resourceclaims.resource.draco.dev"


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@dataclass
class FakeAgent:
    """A `draco agent` process on a fake device file the test can edit."""

    process: DracoProcess
    config: Path
    cdi_dir: Path
    state_dir: Path
    node: str


def start_agent(
    draco_process: Callable[..., DracoProcess],
    tmp_path: Path,
    *,
    devices_yaml: str,
    node: str,
    extra: tuple[str, ...] = (),
    name: str = "agent",
) -> FakeAgent:
    config = tmp_path / "devices.yaml"
    if not config.exists():
        config.write_text(devices_yaml)
    cdi_dir, state_dir = tmp_path / "cdi", tmp_path / "state"
    process = draco_process(
        "agent",
        "--node-name",
        node,
        "--driver",
        "fake",
        "--config",
        str(config),
        "--cdi-dir",
        str(cdi_dir),
        "--state-dir",
        str(state_dir),
        "--poll-interval",
        "0.2",
        "--create-nodes",
        *extra,
        name=name,
    )
    return FakeAgent(process=process, config=config, cdi_dir=cdi_dir, state_dir=state_dir, node=node)


def slices_of(kube: ControlPlane, node: str) -> list[dict[str, Any]]:
    # Filtered here, not with a field selector: kube-apiserver < 1.31 serves none on CRDs.
    out = kube.kubectl("get", SLICES, "-o", "json")
    items = [s for s in json.loads(out.stdout)["items"] if (s.get("spec") or {}).get("nodeName") == node]
    return sorted(items, key=lambda s: s["metadata"]["name"])


def pool_complete(items: list[dict[str, Any]]) -> bool:
    """All slices share one generation and their number is the declared count."""
    if not items:
        return False
    pools = {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in items}
    return len(pools) == 1 and next(iter(pools))[1] == len(items)


def devices_of(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in items for d in s["spec"].get("devices") or []}
