"""Devices in containers on a real node: containerd with NRI, a kubelet, kube-scheduler.

Every pod here is created gated, with no node; draco allocates its claims, the agent
prepares them, draco pins and un-gates the pod, kube-scheduler binds it, the kubelet has
containerd create its containers, and the agent — an NRI plugin of that containerd — adds
each container's devices. No test code plays scheduler or kubelet: the tests only read
what the containers print (`kubectl logs`).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import Node
from tests.e2e.node_support import METADATA_ROOT, NodeTest, metadata_path, zero_bytes
from tests.e2e.support import DracoProcess, wait_for

pytestmark = pytest.mark.e2e

TEMPLATE_CLAIM = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]


@pytest.fixture
def world(
    kube: ControlPlane,
    node: Node,
    namespace: str,
    draco_process: Callable[..., DracoProcess],
    tmp_path: Path,
) -> Iterator[NodeTest]:
    test = NodeTest(kube=kube, node=node, namespace=namespace, draco_process=draco_process, tmp_path=tmp_path)
    yield test
    # The namespace never finishes terminating (no controller-manager): delete its pods so
    # they do not keep running on the shared node.
    kube.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=1", "--wait=false", check=False)


def allocated_device(test: NodeTest) -> str:
    (claim,) = [c for c in test.claims() if (c.get("status") or {}).get("allocation")]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return str(result["device"])


def test_a_pod_with_one_claim_runs_with_its_device(world: NodeTest) -> None:
    world.start()
    world.create_pod("trainer", claims=TEMPLATE_CLAIM)
    pod = world.wait_running("trainer")
    # kube-scheduler bound it to the node draco pinned it to.
    assert pod["spec"]["nodeName"] == world.node.name
    assert world.scheduled_by("trainer") == "default-scheduler"
    device = allocated_device(world)
    seen = world.seen("trainer")
    assert seen.env["GPU_DEVICE"] == device
    assert seen.env["GPU_MODE"] == "fast"
    index = device.rsplit("-", 1)[1]
    assert set(seen.devices) == {f"/dev/fake-gpu{index}"}
    assert zero_bytes(seen.devices[f"/dev/fake-gpu{index}"])
    path = metadata_path(template_claim="gpu", request="gpu", driver=world.driver)
    assert set(seen.files) == {path}
    metadata = seen.files[path]
    assert metadata["kind"] == "DeviceMetadata"
    assert metadata["podClaimName"] == "gpu"
    (request,) = metadata["requests"]
    assert [(d["driver"], d["pool"], d["name"]) for d in request["devices"]] == [
        (world.driver, world.node.name, device)
    ]

    # Deleting the pod: the operator releases and deletes the generated claim, the agent
    # unprepares (CDI spec and metadata files gone).
    assert world.cdi_specs() and world.metadata_files()
    world.delete_pod("trainer")
    wait_for(lambda: not world.claims(), timeout=90, what="the generated claim to be deleted")
    wait_for(lambda: not world.cdi_specs(), timeout=30, what="the CDI spec to be removed")
    assert not world.metadata_files()


def test_only_the_container_given_the_claim_sees_it(world: NodeTest) -> None:
    world.start()
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu", "containers": ["worker"]}]
    world.create_pod("pair", claims=claims, containers=["worker", "sidecar"])
    world.wait_running("pair")
    worker, sidecar = world.seen("pair", "worker"), world.seen("pair", "sidecar")
    assert worker.env["GPU_DEVICE"] == allocated_device(world)
    assert len(worker.devices) == 1
    assert list(worker.files) == [metadata_path(template_claim="gpu", request="gpu", driver=world.driver)]
    assert "GPU_DEVICE" not in sidecar.env and "GPU_MODE" not in sidecar.env
    assert sidecar.devices == {} and sidecar.files == {}


def test_opaque_config_of_class_and_claim_reaches_the_container(world: NodeTest) -> None:
    world.start(class_config=[{"opaque": world.fake_config(FROM_CLASS="yes", BATCH="1")}])
    claim = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "tuned", "namespace": world.namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": world.device_class}}],
                "config": [{"requests": ["gpu"], "opaque": world.fake_config(BATCH="4", GPU_MODE="slow")}],
            }
        },
    }
    world.kube.kubectl("apply", "-f", "-", input=json.dumps(claim))
    world.create_pod("tuned-pod", claims=[{"name": "gpu", "resourceClaimName": "tuned"}])
    world.wait_running("tuned-pod")
    seen = world.seen("tuned-pod")
    # The claim's config overrides the class's, both override the device's own.
    assert (seen.env["FROM_CLASS"], seen.env["BATCH"], seen.env["GPU_MODE"]) == ("yes", "4", "slow")
    assert metadata_path(claim="tuned", request="gpu", driver=world.driver) in seen.files

    # A named claim outlives the pod: deleting the pod deallocates it and unprepares.
    world.delete_pod("tuned-pod")
    wait_for(
        lambda: not (world.claims()[0].get("status") or {}).get("allocation"),
        timeout=90,
        what="the claim to be deallocated",
    )
    wait_for(lambda: not world.cdi_specs(), timeout=30, what="the CDI spec to be removed")


def test_unknown_opaque_config_fails_prepare_with_a_clear_condition(world: NodeTest) -> None:
    world.start()
    claim = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "odd", "namespace": world.namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": world.device_class}}],
                "config": [
                    {
                        "opaque": {
                            "driver": world.driver,
                            "parameters": {"apiVersion": "v9", "kind": "Overclock"},
                        }
                    }
                ],
            }
        },
    }
    world.kube.kubectl("apply", "-f", "-", input=json.dumps(claim))
    world.create_pod("odd-pod", claims=[{"name": "gpu", "resourceClaimName": "odd"}])

    def failed_condition() -> dict[str, str] | None:
        for entry in (world.claims()[0].get("status") or {}).get("devices") or []:
            for condition in entry.get("conditions") or []:
                if condition["type"] == "Ready" and condition["reason"] == "InvalidDeviceConfig":
                    return dict(condition)
        return None

    condition = wait_for(failed_condition, timeout=90, what="the InvalidDeviceConfig condition")
    assert isinstance(condition, dict)
    assert condition["status"] == "False"
    assert "unknown configuration kind 'Overclock'" in condition["message"]
    # The pod never runs without its device.
    assert not world.running("odd-pod")
    assert not world.cdi_specs()


def test_an_agent_restarted_after_prepare_still_injects(world: NodeTest, tmp_path: Path) -> None:
    world.start()
    gate = tmp_path / "gate"
    gate.mkdir()
    # The init container is not given the claim; it holds the pod until the test says so.
    init = {
        "name": "wait",
        "image": "draco.invalid/busybox:local",
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", "env | sort; while [ ! -f /gate/go ]; do sleep 0.2; done"],
        "volumeMounts": [{"name": "gate", "mountPath": "/gate"}],
    }
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu", "containers": ["main"]}]
    world.create_pod(
        "late",
        claims=claims,
        init=init,
        volumes=[{"name": "gate", "hostPath": {"path": str(gate), "type": "Directory"}}],
    )

    def init_running() -> bool:
        statuses = (world.pod("late").get("status") or {}).get("initContainerStatuses") or []
        return bool(statuses) and "running" in (statuses[0].get("state") or {})

    wait_for(init_running, timeout=120, what=f"the init container to run ({world.describe('late')})")
    assert world.cdi_specs(), "the claim is prepared before any container starts"
    init_log = world.kube.kubectl("logs", "-n", world.namespace, "late", "-c", "wait").stdout
    assert "GPU_DEVICE" not in init_log and METADATA_ROOT not in init_log

    # The agent dies and comes back (new process, same state) before `main` is created.
    assert world.agent is not None
    world.agent.kill(signal.SIGKILL)
    world.start_agent(name="agent-again")
    (gate / "go").write_text("")
    world.wait_running("late")
    seen = world.seen("late")
    assert seen.env["GPU_DEVICE"] == allocated_device(world)
    assert metadata_path(template_claim="gpu", request="gpu", driver=world.driver) in seen.files
