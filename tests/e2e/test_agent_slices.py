"""The agent publishes a fake node's devices as ResourceSlices and keeps them right."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.agent_support import SLICES, devices_of, pool_complete, slices_of, start_agent, unique
from tests.e2e.support import DracoProcess, wait_for

pytestmark = pytest.mark.e2e

DEVICES = """
name: gpu.draco.dev
cdiClass: gpu
devices:
- name: gpu-{index}
  count: 4
  attributes: {model: A100, index: {int: "{index}"}}
  capacity: {memory: 40Gi}
"""


def test_slices_appear_come_back_and_follow_the_file(
    kube: ControlPlane, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    node = unique("slices")
    agent = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node)
    items = wait_for(
        lambda: (s := slices_of(kube, node)) and pool_complete(s) and s, timeout=60, what="slices"
    )
    assert isinstance(items, list) and len(items) == 1
    (first,) = items
    assert first["spec"]["driver"] == "gpu.draco.dev"
    assert first["spec"]["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
    assert sorted(devices_of(items)) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert devices_of(items)["gpu-2"]["attributes"]["index"] == {"int": 2}
    node_obj = json.loads(kube.kubectl("get", "node", node, "-o", "json").stdout)
    assert first["metadata"]["ownerReferences"][0]["uid"] == node_obj["metadata"]["uid"]

    # Someone deletes the slice: it comes back, same generation (nothing changed).
    kube.kubectl("delete", SLICES, first["metadata"]["name"])
    back = wait_for(
        lambda: [s for s in slices_of(kube, node) if s["metadata"]["uid"] != first["metadata"]["uid"]],
        timeout=30,
        what="the deleted slice to be republished",
    )
    assert isinstance(back, list) and back[0]["spec"]["pool"]["generation"] == 1
    assert sorted(devices_of(back)) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]

    # Someone edits it: the agent puts its content back under a new generation.
    edited = back[0]
    edited["spec"]["devices"] = edited["spec"]["devices"][:1]
    kube.kubectl("replace", "-f", "-", input=json.dumps(edited))
    fixed = wait_for(
        lambda: (
            (s := slices_of(kube, node))
            and len(devices_of(s)) == 4
            and s[0]["spec"]["pool"]["generation"] == 2
            and s
        ),
        timeout=30,
        what="the edited slice to be restored",
    )
    assert isinstance(fixed, list)

    # The device file changes: the pool follows with a bumped generation.
    agent.config.write_text(DEVICES.replace("count: 4", "count: 6").replace("A100", "H100"))
    grown = wait_for(
        lambda: (s := slices_of(kube, node)) and len(devices_of(s)) == 6 and s,
        timeout=30,
        what="the pool to follow the file",
    )
    assert isinstance(grown, list)
    assert grown[0]["spec"]["pool"]["generation"] == 3
    assert devices_of(grown)["gpu-5"]["attributes"]["model"] == {"string": "H100"}
    assert "Published pool" in agent.process.logs()


def test_300_devices_make_three_slices(
    kube: ControlPlane, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    node = unique("big")
    start_agent(draco_process, tmp_path, devices_yaml=DEVICES.replace("count: 4", "count: 300"), node=node)
    items = wait_for(
        lambda: (s := slices_of(kube, node)) and pool_complete(s) and s, timeout=60, what="slices"
    )
    assert isinstance(items, list)
    assert [len(s["spec"]["devices"]) for s in items] == [128, 128, 44]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in items} == {3}
    assert len(devices_of(items)) == 300


def test_many_simulated_nodes_and_an_unhealthy_device(
    kube: ControlPlane, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    prefix = unique("sim")
    agent = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=prefix, extra=("--nodes", "3"))
    for i in range(3):
        wait_for(lambda i=i: pool_complete(slices_of(kube, f"{prefix}-{i}")), timeout=60, what=f"node {i}")
    nodes = kube.kubectl("get", "nodes", "-o", "name").stdout.split()
    assert {f"node/{prefix}-{i}" for i in range(3)} <= set(nodes)
    agent.config.write_text(DEVICES + f"unhealthy: [{prefix}-1/gpu-2]\n")
    tainted = wait_for(
        lambda: devices_of(slices_of(kube, f"{prefix}-1"))["gpu-2"].get("taints"),
        timeout=30,
        what="the taint",
    )
    assert isinstance(tainted, list)
    assert [(t["key"], t["effect"]) for t in tainted] == [("draco.dev/unhealthy", "NoExecute")]
    assert tainted[0]["timeAdded"]
    assert "taints" not in devices_of(slices_of(kube, f"{prefix}-0"))["gpu-2"]
    listed = kube.kubectl("get", SLICES, "-o", "name").stdout
    assert f"{prefix}-1-gpu.draco.dev-0" in listed
