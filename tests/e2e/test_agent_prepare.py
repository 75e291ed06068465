"""The agent prepares claims allocated on its node and cleans up after them.

These tests write the allocation into the claim status and label the claim with its node
themselves (the operator's job), so they show the agent's half on its own;
test_agent_flow.py runs both together.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draco.agent.metadata import first_known
from draco.api.constants import NODE_LABEL
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.agent_support import CLAIMS, pool_complete, slices_of, start_agent, unique
from tests.e2e.support import DracoProcess, selectable_fields_served, wait_for
from tests.unit.agent.support import validate_cdi, validate_metadata

pytestmark = pytest.mark.e2e

DEVICES = """
name: gpu.draco.dev
cdiClass: gpu
bindingConditions: true
devices:
- name: gpu-{index}
  count: 6
  attributes: {model: A100, index: {int: "{index}"}}
- name: broken-0
  failPrepare: the fake device refuses
"""


def create_claim(kube: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    kube.kubectl("create", "-f", "-", input=json.dumps(body))
    return get_claim(kube, namespace, name)


def get_claim(kube: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    out = kube.kubectl("get", CLAIMS, "-n", namespace, name, "-o", "json", check=False)
    if out.returncode != 0:
        return {}
    claim: dict[str, Any] = json.loads(out.stdout)
    return claim


def allocate(
    kube: ControlPlane, namespace: str, name: str, *, node: str, devices: list[str], record_node: bool = True
) -> None:
    """Write an allocation as the operator does, with `status.nodeName` (what the node's
    agent selects on; `record_node=False` is an operator from before the field)."""
    results = [
        {
            "request": "gpu",
            "driver": "gpu.draco.dev",
            "pool": node,
            "device": d,
            "bindingConditions": ["draco.dev/prepared"],
            "bindingFailureConditions": ["draco.dev/prepare-failed"],
        }
        for d in devices
    ]
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if record_node:
        status["nodeName"] = node
        if not selectable_fields_served(kube):
            # kube-apiserver < 1.31: the operator labels the claim first (agents select on it).
            kube.kubectl("label", CLAIMS, "-n", namespace, name, f"{NODE_LABEL}={node}", "--overwrite")
    patch = {"status": status}
    kube.kubectl(
        "patch",
        CLAIMS,
        "-n",
        namespace,
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(patch),
    )


def deallocate(kube: ControlPlane, namespace: str, name: str) -> None:
    """As the operator does: the allocation goes, and with it the node."""
    patch = {"status": {"allocation": None, "devices": None, "nodeName": None}}
    kube.kubectl(
        "patch",
        CLAIMS,
        "-n",
        namespace,
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(patch),
    )


def conditions(claim: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        d["device"]: {c["type"]: c["status"] for c in d.get("conditions") or []}
        for d in (claim.get("status") or {}).get("devices") or []
    }


def files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def checkpoint(state_dir: Path) -> dict[str, Any]:
    """uid -> record, from the agent's one-file-per-claim checkpoint.

    The agent may remove a record between the listing and the read; a record gone by then is
    not in the checkpoint any more.
    """
    records = []
    for path in (state_dir / "checkpoint").glob("*.json"):
        try:
            records.append(json.loads(path.read_text())["claim"])
        except FileNotFoundError:
            continue
    return {r["uid"]: r for r in records}


def test_prepare_then_unprepare(
    kube: ControlPlane, namespace: str, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    node = unique("prep")
    agent = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node)
    wait_for(lambda: pool_complete(slices_of(kube, node)), timeout=60, what="slices")
    published = {d["name"]: d for s in slices_of(kube, node) for d in s["spec"]["devices"]}
    assert published["gpu-0"]["bindingConditions"] == ["draco.dev/prepared"]
    assert published["gpu-0"]["bindingFailureConditions"] == ["draco.dev/prepare-failed"]

    uid = create_claim(kube, namespace, "train")["metadata"]["uid"]
    allocate(kube, namespace, "train", node=node, devices=["gpu-1", "gpu-2"])
    ready = wait_for(
        lambda: (
            (c := conditions(get_claim(kube, namespace, "train")))
            and all(v.get("draco.dev/prepared") == "True" for v in c.values())
            and c
        ),
        timeout=30,
        what="binding conditions",
    )
    assert ready == {
        "gpu-1": {"Ready": "True", "draco.dev/prepared": "True", "draco.dev/prepare-failed": "False"},
        "gpu-2": {"Ready": "True", "draco.dev/prepared": "True", "draco.dev/prepare-failed": "False"},
    }
    claim = get_claim(kube, namespace, "train")
    spec_file = agent.cdi_dir / f"draco-gpu.draco.dev-{uid}.json"
    spec = json.loads(spec_file.read_text())
    validate_cdi(spec)
    assert claim["status"]["devices"][0]["data"]["cdiDeviceIDs"] == [
        f"gpu.draco.dev/gpu={uid}-gpu-1",
        f"gpu.draco.dev/gpu={uid}-metadata-gpu",
    ]
    mount = spec["devices"][-1]["containerEdits"]["mounts"][0]
    assert mount["containerPath"] == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/train/gpu/gpu.draco.dev-metadata.json"
    )
    metadata = first_known(Path(mount["hostPath"]).read_text())
    validate_metadata(metadata)
    assert metadata["metadata"]["uid"] == uid
    assert [d["name"] for d in metadata["requests"][0]["devices"]] == ["gpu-1", "gpu-2"]
    assert checkpoint(agent.state_dir)[uid]["state"] == "PrepareCompleted"

    deallocate(kube, namespace, "train")
    wait_for(lambda: checkpoint(agent.state_dir) == {}, timeout=30, what="the checkpoint record to go")
    assert not files(agent.cdi_dir)
    assert not files(agent.state_dir / "dra-device-metadata")
    assert not (get_claim(kube, namespace, "train").get("status") or {}).get("devices")

    # A device that cannot be prepared: the failure condition, a message, no files.
    create_claim(kube, namespace, "doomed")
    allocate(kube, namespace, "doomed", node=node, devices=["broken-0"])
    failed = wait_for(
        lambda: conditions(get_claim(kube, namespace, "doomed")).get("broken-0"), timeout=30, what="failure"
    )
    assert failed == {"Ready": "False", "draco.dev/prepared": "False", "draco.dev/prepare-failed": "True"}
    entry = get_claim(kube, namespace, "doomed")["status"]["devices"][0]
    assert "the fake device refuses" in entry["conditions"][0]["message"]
    assert not files(agent.cdi_dir)

    # Deleting an allocated claim unprepares it too.
    create_claim(kube, namespace, "short")
    allocate(kube, namespace, "short", node=node, devices=["gpu-3"])
    wait_for(lambda: files(agent.cdi_dir), timeout=30, what="the CDI spec")
    kube.kubectl("delete", CLAIMS, "-n", namespace, "short")
    wait_for(lambda: checkpoint(agent.state_dir) == {}, timeout=30, what="cleanup after delete")
    assert not files(agent.cdi_dir)
    text = agent.process.logs()
    assert text.count('"Prepared claim"') == 2, text


def test_restart_in_the_middle_prepares_nothing_twice_and_leaks_nothing(
    kube: ControlPlane, namespace: str, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    node = unique("restart")
    first = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node, name="agent-before")
    wait_for(lambda: pool_complete(slices_of(kube, node)), timeout=60, what="slices")
    uids = {}
    for i, name in enumerate(["keep", "dealloc", "gone", "rebooted"]):
        uids[name] = create_claim(kube, namespace, name)["metadata"]["uid"]
        allocate(kube, namespace, name, node=node, devices=[f"gpu-{i}"])
    wait_for(
        lambda: len(checkpoint(first.state_dir)) == 4 and len(files(first.cdi_dir)) == 4,
        timeout=30,
        what="4 prepared",
    )
    wait_for(
        lambda: all(conditions(get_claim(kube, namespace, n)) for n in uids), timeout=30, what="4 statuses"
    )

    first.process.kill(signal.SIGKILL)
    # While the agent is down: one claim is deallocated, one deleted, one new one allocated,
    # and a "reboot" wipes the files (not the checkpoint) of another.
    deallocate(kube, namespace, "dealloc")
    kube.kubectl("delete", CLAIMS, "-n", namespace, "gone")
    uids["new"] = create_claim(kube, namespace, "new")["metadata"]["uid"]
    allocate(kube, namespace, "new", node=node, devices=["gpu-5"])
    (first.cdi_dir / f"draco-gpu.draco.dev-{uids['rebooted']}.json").unlink()

    second = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node, name="agent-after")
    expected = {uids["keep"], uids["rebooted"], uids["new"]}
    wait_for(
        lambda: set(checkpoint(second.state_dir)) == expected, timeout=30, what="the checkpoint to settle"
    )
    wait_for(lambda: len(files(second.cdi_dir)) == 3, timeout=30, what="the CDI specs to settle")
    wait_for(
        lambda: conditions(get_claim(kube, namespace, "new")).get("gpu-5", {}).get("Ready") == "True",
        timeout=30,
        what="the new claim to be prepared",
    )

    record = checkpoint(second.state_dir)
    on_disk = files(second.cdi_dir) | files(second.state_dir / "dra-device-metadata")
    # Every recorded file is on disk and nothing else is (the claim's folder aside).
    recorded = {
        f for r in record.values() for f in r["files"] if not f.endswith(f"{r['namespace']}_{r['name']}")
    }
    assert on_disk == recorded
    assert all(r["state"] == "PrepareCompleted" for r in record.values())
    assert record[uids["keep"]]["metadata_generation"] == 1  # not prepared again
    assert record[uids["rebooted"]]["metadata_generation"] == 2  # repaired
    logs = second.process.logs()
    prepared = [json.loads(line) for line in logs.splitlines() if '"Prepared claim"' in line]
    assert sorted(p["uid"] for p in prepared) == sorted([uids["rebooted"], uids["new"]]), logs
    unprepared = [json.loads(line) for line in logs.splitlines() if '"Unprepared claim"' in line]
    assert sorted(p["uid"] for p in unprepared) == sorted([uids["dealloc"], uids["gone"]]), logs


def test_an_upgraded_agent_keeps_what_an_older_one_prepared(
    kube: ControlPlane, namespace: str, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    """An agent from before per-claim checkpoints and the node field prepared a claim: the
    new agent migrates the single-file checkpoint and, though its watch (selecting on
    `status.nodeName`) does not show the claim, reads it and keeps it prepared instead of
    removing it."""
    node = unique("upgrade")
    uid = create_claim(kube, namespace, "legacy")["metadata"]["uid"]
    allocate(kube, namespace, "legacy", node=node, devices=["gpu-0"], record_node=False)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    kind = "gpu.draco.dev/gpu"
    record = {
        "uid": uid,
        "namespace": namespace,
        "name": "legacy",
        "state": "PrepareCompleted",
        "devices": [
            {
                "driver": "gpu.draco.dev",
                "pool": node,
                "device": "gpu-0",
                "request": "gpu",
                "share_id": None,
                "cdi_device_ids": [f"{kind}={uid}-gpu-0", f"{kind}={uid}-metadata-gpu"],
            }
        ],
        "files": [],
        "metadata_generation": 1,
    }
    (state_dir / "checkpoint.json").write_text(json.dumps({"version": 1, "claims": {uid: record}}))

    agent = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node)
    wait_for(
        lambda: conditions(get_claim(kube, namespace, "legacy")).get("gpu-0", {}).get("Ready") == "True",
        timeout=60,
        what="the legacy claim's status",
    )
    assert not (state_dir / "checkpoint.json").exists()
    assert checkpoint(state_dir)[uid]["state"] == "PrepareCompleted"
    logs = agent.process.logs()
    assert '"Unprepared claim"' not in logs and '"Prepared claim"' not in logs, logs
