"""Operator and agent together: allocation, preparation, binding conditions, un-gating,
cleanup, and a tainted device avoided."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draco.agent.metadata import first_known
from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit
from tests.e2e.agent_support import CLAIMS, devices_of, pool_complete, slices_of, start_agent, unique
from tests.e2e.support import DracoProcess, json_list, start_operator, wait_for
from tests.unit.agent.support import validate_cdi, validate_metadata

pytestmark = pytest.mark.e2e

DEVICES = """
name: gpu.draco.dev
cdiClass: gpu
bindingConditions: true
devices:
- name: gpu-{index}
  count: 2
  attributes: {model: A100}
"""


def setup(kube: ControlPlane, namespace: str) -> None:
    objects = [
        {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "DeviceClass",
            "metadata": {"name": f"gpu-{namespace}"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.draco.dev"'}}]},
        },
        {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": namespace},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": f"gpu-{namespace}"}}]
                    }
                }
            },
        },
    ]
    kube.kubectl("apply", "-f", "-", input=json_list(objects))


def create_pod(kube: ControlPlane, namespace: str, name: str, node: str) -> None:
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {CLAIMS_ANNOTATION: json.dumps(claims)},
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": "registry.invalid/none"}],
        },
    }
    kube.kubectl("create", "-f", "-", input=json.dumps(pod))


def get(kube: ControlPlane, *args: str) -> dict[str, Any]:
    out = kube.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def gated(kube: ControlPlane, namespace: str, name: str) -> bool:
    pod = get(kube, "pod", "-n", namespace, name)
    return any(g["name"] == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or [])


def claims_of(kube: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(kube, CLAIMS, "-n", namespace).get("items", [])
    return items


def allocated(kube: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return [c for c in claims_of(kube, namespace) if (c.get("status") or {}).get("allocation")]


def test_binding_condition_gates_the_pod_until_the_agent_prepared(
    kube: ControlPlane, namespace: str, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    node = unique("flow")
    agent = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node, name="agent-publish")
    wait_for(lambda: pool_complete(slices_of(kube, node)), timeout=60, what="slices")
    # The agent goes away: the devices stay published, but nobody can prepare them.
    agent.process.kill(signal.SIGKILL)
    setup(kube, namespace)
    start_operator(draco_process, namespace)
    create_pod(kube, namespace, "trainer", node)

    wait_for(lambda: allocated(kube, namespace), timeout=60, what="the claim to be allocated")
    (claim,) = allocated(kube, namespace)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["bindingConditions"] == ["draco.dev/prepared"]
    time.sleep(3)  # the operator has had its chance to (wrongly) un-gate
    assert gated(kube, namespace, "trainer"), "un-gated before the device was prepared"

    # The agent comes back, prepares, sets the condition: only now the pod is un-gated.
    again = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node, name="agent-prepare")
    wait_for(lambda: not gated(kube, namespace, "trainer"), timeout=60, what="the pod to be un-gated")
    (claim,) = allocated(kube, namespace)
    (entry,) = claim["status"]["devices"]
    states = {c["type"]: c["status"] for c in entry["conditions"]}
    assert states["Ready"] == "True" and states["draco.dev/prepared"] == "True"
    uid = claim["metadata"]["uid"]
    spec = json.loads((again.cdi_dir / f"draco-gpu.draco.dev-{uid}.json").read_text())
    validate_cdi(spec)
    mount = spec["devices"][-1]["containerEdits"]["mounts"][0]
    assert mount["containerPath"] == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/gpu.draco.dev-metadata.json"
    )
    metadata = first_known(Path(mount["hostPath"]).read_text())
    validate_metadata(metadata)
    assert metadata["podClaimName"] == "gpu"
    # `kubectl describe` of the claim says the node prepared it.
    notes = wait_for(
        lambda: schedkit.event_notes(kube, namespace, claim["metadata"]["name"], "Prepared"),
        timeout=30,
        what="the Prepared event on the claim",
    )
    assert isinstance(notes, list) and f"on node {node}" in notes[0], notes

    # The pod finishes: the generated claim goes, and the agent removes everything.
    kube.kubectl(
        "patch", "pod", "-n", namespace, "trainer", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": "Succeeded"}}),
    )  # fmt: skip
    wait_for(lambda: not allocated(kube, namespace), timeout=60, what="the claim to be released")
    wait_for(lambda: not any(again.cdi_dir.rglob("*.json")), timeout=30, what="the CDI spec to go")
    assert not any((again.state_dir / "dra-device-metadata").rglob("*.json"))
    assert not list((again.state_dir / "checkpoint").glob("*.json"))
    assert not (again.state_dir / "checkpoint.json").exists()


def test_a_tainted_device_is_avoided(
    kube: ControlPlane, namespace: str, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    node = unique("taint")
    agent = start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node)
    wait_for(lambda: pool_complete(slices_of(kube, node)), timeout=60, what="slices")
    agent.config.write_text(DEVICES + "unhealthy: [gpu-0]\n")
    wait_for(lambda: devices_of(slices_of(kube, node))["gpu-0"].get("taints"), timeout=30, what="the taint")
    setup(kube, namespace)
    start_operator(draco_process, namespace)
    create_pod(kube, namespace, "p", node)
    wait_for(lambda: not gated(kube, namespace, "p"), timeout=60, what="the pod to be un-gated")
    (claim,) = allocated(kube, namespace)
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu-1"]
