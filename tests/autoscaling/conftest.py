"""Autoscaling with the real Karpenter (`make e2e-autoscaling`): the session's control plane,
Karpenter with its kwok provider and two instance types (a cheap CPU node with one
accelerator of the class ``accel.example.com``, an expensive GPU node with one GPU of
``gpu.example.com``), the node stage (`kwokkit.NodeStage`: Ready, draco's agent on each
new node), a garbage collector, a kube-scheduler serving ``default-scheduler`` (it binds
what draco un-gates) and draco's operator with ``--autoscaling``.

Not part of `make test` (tests/conftest.py leaves this folder out unless
``DRACO_AUTOSCALING_TESTS`` is set): Karpenter's build is long the first time, and the
tests wait for nodes to come and go. Needs ``KARPENTER`` (`hack/karpenter.sh`),
``KUBEBUILDER_ASSETS`` with kube-controller-manager and ``DRACO_NODE_ASSETS`` with
kube-scheduler.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.scheduling.nodetemplates import NodeTemplate, template_resources
from draco.tools.dev.controlplane import ChildProcess, ControlPlane
from draco.tools.simulation.inputs import fake_slices
from tests.autoscaling import kwokkit
from tests.e2e import schedkit as k
from tests.e2e.conftest import namespace  # noqa: F401 (the fixture: the e2e suite's namespace per test)
from tests.e2e.schedulerkit import KubeScheduler
from tests.e2e.support import DracoProcess, start_draco, wait_for

Obj = dict[str, Any]

DEMAND_NAMESPACE = "draco-autoscaling"
GPU_CLASS = "gpu.example.com"
ACCEL_CLASS = "accel.example.com"
GPU_TYPE = "gpu-1x"
CPU_TYPE = "cpu-1x"


def _device_file(driver: str) -> str:
    return yaml.safe_dump({"name": driver, "devices": [{"name": "dev-0", "attributes": {"model": "X1"}}]})


def device_class(name: str) -> Obj:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]},
    }


def template_devices(device_file: Path) -> list[Obj]:
    """The slice specs draco's agent publishes from ``device_file`` (a NodePool's devices)."""
    return [
        {k: v for k, v in s.to_dict()["spec"].items() if k in ("driver", "devices", "sharedCounters")}
        for s in fake_slices(str(device_file), ["template"])
    ]


@dataclass
class Autoscaled:
    kube: ControlPlane
    karpenter: ChildProcess
    stage: kwokkit.NodeStage
    operator: DracoProcess
    devices: dict[str, Path]

    def explain(self) -> str:
        return (
            "--- karpenter ---\n"
            + self.karpenter.tail(40)
            + "\n--- operator ---\n"
            + "\n".join(self.operator.logs().splitlines()[-40:])
        )


@pytest.fixture(scope="session")
def autoscaled(kube: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Autoscaled]:
    if kwokkit.karpenter_binary() is None:
        pytest.fail("KARPENTER is not set: run `make e2e-autoscaling` (hack/karpenter.sh builds it)")
    workdir = tmp_path_factory.mktemp("autoscaling")
    kube.kubectl("apply", "--server-side", "-f", str(kwokkit.karpenter_crds()))
    kube.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    kube.kubectl("create", "namespace", DEMAND_NAMESPACE)
    devices = {}
    for kind, driver in ((GPU_TYPE, GPU_CLASS), (CPU_TYPE, ACCEL_CLASS)):
        path = workdir / f"{kind}.yaml"
        path.write_text(_device_file(driver))
        devices[kind] = path
    classes = [device_class(GPU_CLASS), device_class(ACCEL_CLASS)]
    k.apply(kube, classes)
    # What a new node of each type is advertised with, from its devices (as the chart's
    # docs tell users to declare it on their instance types and node groups).
    extended = {
        kind: {
            n: str(c)
            for n, c in template_resources(
                NodeTemplate(name=kind, slices=tuple(template_devices(path))), classes
            ).items()
        }
        for kind, path in devices.items()
    }
    types = [
        kwokkit.instance_type(CPU_TYPE, cpu="2", memory="8Gi", price=0.1, resources=extended[CPU_TYPE]),
        kwokkit.instance_type(GPU_TYPE, cpu="4", memory="16Gi", price=1.0, resources=extended[GPU_TYPE]),
    ]
    node_class = {
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
    }
    k.apply(kube, [node_class])
    ready = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    kube.kubectl(
        "patch",
        "kwoknodeclass",
        "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": ready}),
    )
    gc = kwokkit.start_garbage_collector(kube, workdir)
    karpenter = kwokkit.start_karpenter(kube, workdir, types)
    scheduler = KubeScheduler(kube, workdir / "scheduler", "default-scheduler")
    stage = kwokkit.NodeStage(kube, workdir, devices).start()
    operator = start_draco(
        (
            "operator",
            "--metrics-port",
            "0",
            "--health-port",
            "0",
            "--leader-elect=false",
            "--autoscaling",
            "--autoscaling-namespace",
            DEMAND_NAMESPACE,
        ),
        env=kube.env(),
        log_path=workdir / "operator.log",
    )
    try:
        yield Autoscaled(kube=kube, karpenter=karpenter, stage=stage, operator=operator, devices=devices)
    finally:
        operator.stop()
        stage.stop()
        scheduler.stop()
        karpenter.stop()
        gc.stop()


@pytest.fixture
def nodepools(autoscaled: Autoscaled) -> Iterator[list[str]]:
    """NodePools a test makes (their names); deleted, and their nodes gone, at the end."""
    made: list[str] = []
    yield made
    kube = autoscaled.kube
    # No kubelet confirms a bound pod's end: the pods on the test's nodes go at once.
    nodes = {
        n["metadata"]["name"]
        for n in k.items(kube, "nodes")
        if (n["metadata"].get("labels") or {}).get(kwokkit.NODEPOOL_LABEL) in made
    }
    for pod in k.items(kube, "pods"):
        if pod["spec"].get("nodeName") in nodes:
            kube.kubectl(
                "delete",
                "pod",
                pod["metadata"]["name"],
                "-n",
                pod["metadata"]["namespace"],
                "--grace-period=0",
                "--force",
                check=False,
            )
    for name in made:
        kube.kubectl("delete", "nodepool", name, "--wait=false", check=False)
    wait_for(
        lambda: (
            not [
                n
                for n in k.items(kube, "nodes")
                if (n["metadata"].get("labels") or {}).get(kwokkit.NODEPOOL_LABEL) in made
            ]
        ),
        timeout=120,
        what="the test's nodes to go",
        explain=autoscaled.explain,
    )


@pytest.fixture
def node_template_maps(autoscaled: Autoscaled) -> Iterator[list[str]]:
    """Node-template ConfigMaps a test makes in draco's namespace (their names); deleted at
    the end (a template is cluster-wide: it would steer the next tests' demand)."""
    made: list[str] = []
    yield made
    for name in made:
        autoscaled.kube.kubectl("delete", "configmap", name, "-n", DEMAND_NAMESPACE, check=False)
