"""docs/install.md's NVIDIA values file, installed as written, gives one working
`gpu.nvidia.com` class: the chart renders it once, the agent (the chart's DaemonSet
arguments, its ServiceAccount and policies) publishes the GPUs under `gpu.nvidia.com`,
and a pod's claim of that class is allocated and prepared. A `deviceClasses` entry of
NVIDIA's names beside `nvidiaCompat` is refused at render time.

The nvidia driver answers from a recording of an H100's NVML (`--nvml-replay`), its
device nodes are stand-ins (`--nvidia-dev-root`); there is no container runtime (no NRI)
and no webhook process (its configurations are left out: they would refuse every user
write with nobody answering). The operator serves the test's namespace only, without
extended resources: the class's `nvidia.com/gpu` would be advertised on every Node with
such devices, the session's real node among them.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.agent_support import CLAIMS, pool_complete, slices_of
from tests.e2e.chartkit import (
    agent_identity,
    allocate_trainer,
    apply_objects,
    args_of,
    by_kind,
    create_ready_node,
    remove_release,
    render,
    render_error,
)
from tests.e2e.support import DracoProcess, start_operator, wait_for
from tests.unit.agent.gpus import H100

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
DEVICE_NODES = ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


def documented_values() -> dict[str, Any]:
    """The YAML block of docs/install.md that starts with `# values-nvidia.yaml`."""
    text = (ROOT / "docs" / "install.md").read_text()
    (block,) = re.findall(r"```yaml\n(# values-nvidia\.yaml\n.*?)```", text, re.S)
    values: dict[str, Any] = yaml.safe_load(block)
    return values


def test_nvidias_class_is_not_rendered_twice() -> None:
    values = documented_values()
    error = render_error(values={**values, "deviceClasses": {"gpu.nvidia.com": {"selectors": []}}})
    assert (
        "deviceClasses.gpu.nvidia.com: agent.nvidiaCompat installs NVIDIA's class gpu.nvidia.com already"
        in error
    )


def test_the_documented_nvidia_values_give_an_allocatable_gpu_class(
    kube: ControlPlane, namespace: str, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    release = f"n{secrets.token_hex(3)}"
    values = documented_values()
    objects = render(release=release, namespace=namespace, values=values)
    classes = {c["metadata"]["name"]: c for c in by_kind(objects, "DeviceClass")}
    assert sorted(classes) == ["gpu.nvidia.com", "mig.nvidia.com"]
    assert apply_objects(kube, [o for o in objects if o["kind"] not in WEBHOOK_KINDS]).returncode == 0
    node = f"{release}-gpu"
    create_ready_node(kube, node)
    kube.kubectl("label", "node", node, *[f"{k}={v}" for k, v in values["agent"]["nodeSelector"].items()])
    token = agent_identity(
        kube, namespace=namespace, release=release, node=node, path=tmp_path / "agent.kubeconfig"
    )
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in DEVICE_NODES:
        (dev / name).symlink_to("/dev/zero")
    # The DaemonSet's own choice of driver and its options, on this machine's stand-ins.
    chart_args = [
        a
        for a in args_of(objects, "DaemonSet", f"{release}-agent")
        if a.startswith(("--driver=", "--nvidia-", "--binding-conditions"))
    ]
    assert "--driver=nvidia" in chart_args and "--nvidia-compat" in chart_args, chart_args
    replay = [arg for path in H100 for arg in ("--nvml-replay", str(path))]
    try:
        draco_process(
            "agent", "--node-name", node, *chart_args, *replay, "--nvidia-dev-root", str(dev),
            "--cdi-dir", str(tmp_path / "cdi"), "--state-dir", str(tmp_path / "state"),
            env={"KUBECONFIG": str(token)}, name="agent",
        )  # fmt: skip
        wait_for(lambda: pool_complete(slices_of(kube, node)), timeout=90, what="the node's GPUs published")
        assert {s["spec"]["driver"] for s in slices_of(kube, node)} == {"gpu.nvidia.com"}
        start_operator(draco_process, namespace, extra=["--no-extended-resources"])

        claim = allocate_trainer(kube, namespace=namespace, device_class="gpu.nvidia.com", node=node)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == ("gpu.nvidia.com", node)
        (entry,) = claim["status"]["devices"]
        assert {c["type"]: c["status"] for c in entry["conditions"]}["draco.dev/prepared"] == "True"
    finally:
        kube.kubectl("delete", "pod", "trainer", "-n", namespace, "--grace-period=0", "--force", check=False)
        kube.kubectl("delete", CLAIMS, "--all", "-n", namespace, "--wait=false", check=False)
        remove_release(kube, objects, nodes=[node])
