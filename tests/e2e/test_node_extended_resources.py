"""Extended resources on a real node: kube-scheduler's resource fit, the kubelet, and the
agent giving each container the devices of its own requests.

A pod asks for `<domain>/gpu` in one container's limits (a DeviceClass declares that
`extendedResourceName`) and for upstream's implicit name of the same class,
`deviceclass.resource.kubernetes.io/<class>`, in another's. draco creates its special claim, allocates it, advertises the
resource on the Node, pins and un-gates the pod; the stock kube-scheduler binds it (its
NodeResourcesFit needs the advertised allocatable), the kubelet admits it, and the agent,
an NRI plugin of the node's containerd, injects into each container only the device of the
request mapped to it. No test code plays scheduler or kubelet.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from draco.api.constants import EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import IMAGE, Node
from tests.e2e.node_support import SHOW, NodeTest
from tests.e2e.support import DracoProcess, wait_for

pytestmark = pytest.mark.e2e


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
    kube.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=1", "--wait=false", check=False)


def container(name: str, limits: dict[str, str] | None = None) -> dict[str, object]:
    obj: dict[str, object] = {
        "name": name,
        "image": IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", f"{SHOW}; exec sleep 3600"],
    }
    if limits:
        obj["resources"] = {"limits": limits}
    return obj


def test_each_container_gets_the_devices_of_its_extended_resource(world: NodeTest) -> None:
    world.start()
    resource = f"{world.driver}/gpu"
    device_class = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{world.device_class}-ext"},
        "spec": {
            "extendedResourceName": resource,
            "selectors": [{"cel": {"expression": f'device.driver == "{world.driver}"'}}],
        },
    }
    world.kube.kubectl("apply", "-f", "-", input=json.dumps(device_class))
    # The helper asks by upstream's implicit name of the same class, as a manifest written
    # for native DRA does (dra-example-driver's extended-resource pod).
    upstream = f"deviceclass.resource.kubernetes.io/{world.device_class}-ext"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ext", "namespace": world.namespace},
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                container("worker", {resource: "1"}),
                container("helper", {upstream: "1"}),
                container("plain"),
            ],
        },
    }
    world.kube.kubectl("create", "-f", "-", input=json.dumps(pod))
    running = world.wait_running("ext")
    assert running["spec"]["nodeName"] == world.node.name
    assert world.scheduled_by("ext") == "default-scheduler"
    allocatable = world.kube.kubectl("get", "node", world.node.name, "-o", "json").stdout
    assert json.loads(allocatable)["status"]["allocatable"][resource] == "2"
    assert json.loads(allocatable)["status"]["allocatable"][upstream] == "2"

    record = json.loads(running["metadata"]["annotations"][EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION])
    by_container = {m["containerName"]: m["requestName"] for m in record["requestMappings"]}
    assert by_container == {"worker": "container-0-request-0", "helper": "container-1-request-0"}
    claim = json.loads(
        world.kube.kubectl(
            "get",
            "resourceclaims.resource.draco.dev",
            record["resourceClaimName"],
            "-n",
            world.namespace,
            "-o",
            "json",
        ).stdout
    )
    device_of = {r["request"]: r["device"] for r in claim["status"]["allocation"]["devices"]["results"]}
    worker, helper, plain = (world.seen("ext", c) for c in ("worker", "helper", "plain"))
    assert worker.env["GPU_DEVICE"] == device_of["container-0-request-0"]
    assert helper.env["GPU_DEVICE"] == device_of["container-1-request-0"]
    assert len(worker.devices) == 1 and len(helper.devices) == 1
    assert worker.devices.keys() != helper.devices.keys()
    assert "GPU_DEVICE" not in plain.env and plain.devices == {}

    world.delete_pod("ext")
    wait_for(lambda: not world.claims(), timeout=90, what="the special claim to be deleted")
