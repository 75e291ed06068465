"""The NVIDIA driver on the real node, on replayed NVML: the container gets the GPU.

The agent runs `--driver nvidia --nvidia-compat` on the NVML answers recorded on an H100
(`--nvml-replay`), as an NRI plugin of the test node's containerd. This machine has no
NVIDIA device nodes, so the agent takes them from a folder of stand-ins
(`--nvidia-dev-root`): `nvidia0`, `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, each a
symlink to `/dev/zero`. A pod in the shape of NVIDIA's quickstart gpu-test2 (two
containers sharing one GPU, class `gpu.nvidia.com`) runs; each container prints its
environment and reads its `/dev/nvidia*` character devices.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import IMAGE, Node
from tests.e2e.agent_support import pool_complete, slices_of
from tests.e2e.node_support import NodeTest, parse_output, zero_bytes
from tests.e2e.support import DracoProcess, wait_for
from tests.unit.agent.gpus import H100

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
UUID = "GPU-00000000-1111-2222-3333-444444444444"
NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
SHOW = (
    'echo "---- env"; env | sort; echo "---- devices"; '
    f'for d in {" ".join(NODES)}; do [ -c "$d" ] && echo "DEVICE $d $(head -c 4 "$d" | od -An -tx1 | tr -d " ")"; done; '
    'echo "---- end"'
)


@pytest.fixture
def world(
    kube: ControlPlane,
    node: Node,
    namespace: str,
    draco_process: Callable[..., DracoProcess],
    tmp_path: Path,
) -> Iterator[NodeTest]:
    test = NodeTest(
        kube=kube,
        node=node,
        namespace=namespace,
        draco_process=draco_process,
        tmp_path=tmp_path,
        driver="gpu.nvidia.com",
    )
    yield test
    kube.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=1", "--wait=false", check=False)


def start_nvidia_agent(test: NodeTest, *extra: str) -> None:
    dev = test.tmp_path / "dev"
    dev.mkdir()
    for path in NODES:
        (dev / Path(path).name).symlink_to("/dev/zero")
    replay = [arg for path in H100 for arg in ("--nvml-replay", str(path))]
    test.agent = test.draco_process(
        "agent", "--node-name", test.node.name, "--driver", "nvidia", "--nvidia-compat", *replay,
        "--nvidia-dev-root", str(dev), "--binding-conditions",
        "--cdi-dir", str(test.cdi_dir), "--state-dir", str(test.state_dir),
        "--nri-socket", str(test.node.nri_socket), *extra,
        name="agent",
    )  # fmt: skip
    agent = test.agent
    wait_for(
        lambda: "NRI plugin registered" in agent.logs(), timeout=60, what="the agent to register with NRI"
    )
    wait_for(
        lambda: pool_complete(
            [s for s in slices_of(test.kube, test.node.name) if s["spec"]["driver"] == test.driver]
        ),
        timeout=60,
        what="the H100's slice",
    )


def test_a_pod_shaped_like_nvidias_gpu_test2_sees_the_gpu(world: NodeTest) -> None:
    start_nvidia_agent(world)
    classes = (ROOT / "examples" / "nvidia" / "deviceclasses.yaml").read_text()
    world.kube.kubectl("apply", "-f", "-", input=classes)
    template = yaml.safe_load_all((ROOT / "examples" / "nvidia" / "gpu-test2.yaml").read_text())
    (rct,) = [d for d in template if d and d["kind"] == "ResourceClaimTemplate"]
    rct["metadata"]["namespace"] = world.namespace
    world.kube.kubectl("apply", "-f", "-", input=json.dumps(rct))
    world.start_operator()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pod",
            "namespace": world.namespace,
            "annotations": {
                CLAIMS_ANNOTATION: json.dumps(
                    [{"name": "shared-gpu", "resourceClaimTemplateName": "single-gpu"}]
                )
            },
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": c,
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", f"{SHOW}; exec sleep 3600"],
                }
                for c in ("ctr0", "ctr1")
            ],
        },
    }
    world.kube.kubectl("create", "-f", "-", input=json.dumps(pod))
    world.wait_running("pod")
    (claim,) = world.claims()
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["device"]) == ("gpu.nvidia.com", "gpu-0")
    for container in ("ctr0", "ctr1"):

        def complete(name: str = container) -> object:
            out = world.kube.kubectl("logs", "-n", world.namespace, "pod", "-c", name, check=False)
            seen = parse_output(out.stdout) if out.returncode == 0 else None
            return seen if seen and seen.complete else None

        seen = wait_for(complete, timeout=60, what=f"the output of {container}")
        assert seen.env["NVIDIA_VISIBLE_DEVICES"] == UUID  # type: ignore[attr-defined]
        devices = seen.devices  # type: ignore[attr-defined]
        assert set(devices) == set(NODES)
        assert all(zero_bytes(data) for data in devices.values())

    world.delete_pod("pod")
    wait_for(lambda: not world.claims(), timeout=90, what="the generated claim to be deleted")
    wait_for(lambda: not world.cdi_specs(), timeout=30, what="the CDI spec to be removed")
