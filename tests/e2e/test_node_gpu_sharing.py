"""A GPU shared by memory, device health on the claim and the pod, refusals on the pod: on
the real node (containerd with NRI, a kubelet, kube-scheduler).

The fake driver publishes one GPU the way the NVIDIA agent does with `--nvidia-shares
memory`: `allowMultipleAllocations`, its 80Gi of memory consumable capacity with a request
policy (default the whole GPU, 1Mi steps). Pods whose claims ask `capacity.requests.memory:
40Gi` share it: two run, each container with the device and its share; the third is not
placed, and its Events say the memory ran out. The GPU then turns unhealthy (the fake
file's `unhealthy`, with `taintEffect: NoSchedule` as the NVIDIA driver's default): the
claims' `status.devices` and the pods' condition `resource.draco.dev/DevicesHealthy` say
which device and why, each pod gets a `DeviceUnhealthy` Event, the pods keep running; when
it recovers all of it goes and the pods get `DeviceHealthy`. Last, a claim whose configs
the driver refuses: the pod's Event names the cause (every refused config), and the
agent announces each failed attempt once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import Node
from tests.e2e.agent_support import slices_of
from tests.e2e.node_support import NodeTest
from tests.e2e.support import DracoProcess, json_list, wait_for

pytestmark = pytest.mark.e2e

HEALTH = "resource.draco.dev/DevicesHealthy"


def shared_gpu_yaml(driver: str, *, unhealthy: bool = False) -> str:
    return f"""
name: {driver}
cdiClass: gpu
bindingConditions: true
taintEffect: NoSchedule
devices:
- name: gpu-0
  allowMultipleAllocations: true
  attributes: {{model: H100}}
  capacity:
    memory:
      value: 80Gi
      requestPolicy: {{default: 80Gi, validRange: {{min: 1Mi, max: 80Gi, step: 1Mi}}}}
  env: {{GPU_DEVICE: gpu-0}}
  deviceNodes:
  - {{path: /dev/fake-gpu0, hostPath: /dev/zero}}
{"unhealthy: [gpu-0]" if unhealthy else ""}
"""


@pytest.fixture
def world(
    kube: ControlPlane,
    node: Node,
    namespace: str,
    draco_process: Callable[..., DracoProcess],
    tmp_path: Path,
) -> Iterator[NodeTest]:
    test = NodeTest(kube=kube, node=node, namespace=namespace, draco_process=draco_process, tmp_path=tmp_path)
    (tmp_path / "devices.yaml").write_text(shared_gpu_yaml(test.driver))
    yield test
    kube.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=1", "--wait=false", check=False)


def half_gpu_template(world: NodeTest) -> None:
    template = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "half-gpu", "namespace": world.namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": world.device_class,
                                "capacity": {"requests": {"memory": "40Gi"}},
                            },
                        }
                    ]
                }
            }
        },
    }
    world.kube.kubectl("apply", "-f", "-", input=json_list([template]))


def events_of(world: NodeTest, kind: str, name: str) -> list[dict[str, Any]]:
    out = world.kube.kubectl(
        "get", "events", "-n", world.namespace, "-o", "json",
        "--field-selector", f"involvedObject.kind={kind},involvedObject.name={name}",
    )  # fmt: skip
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return items


def event_count(event: dict[str, Any]) -> int:
    """How often an Event was seen: the events.k8s.io series, as the core view shows it."""
    series = event.get("series") or {}
    return int(series.get("count") or event.get("count") or 1)


def claim_of(world: NodeTest, pod: str) -> dict[str, Any]:
    (claim,) = [
        c
        for c in world.claims()
        if any(o.get("name") == pod for o in c["metadata"].get("ownerReferences") or [])
    ]
    return claim


def published_gpu(world: NodeTest) -> dict[str, Any]:
    for obj in slices_of(world.kube, world.node.name):
        if obj["spec"]["driver"] == world.driver:
            for device in obj["spec"].get("devices") or []:
                return dict(device)
    return {}


def health_condition(world: NodeTest, pod: str) -> dict[str, Any] | None:
    for condition in (world.pod(pod).get("status") or {}).get("conditions") or []:
        if condition.get("type") == HEALTH:
            return dict(condition)
    return None


def test_two_pods_share_a_gpu_by_memory_a_third_does_not_fit_and_health_reaches_the_pods(
    world: NodeTest,
) -> None:
    world.start()
    half_gpu_template(world)
    claims = [{"name": "gpu", "resourceClaimTemplateName": "half-gpu"}]
    for pod in ("share-a", "share-b"):
        world.create_pod(pod, claims=claims)
    for pod in ("share-a", "share-b"):
        world.wait_running(pod)
    shares = set()
    for pod in ("share-a", "share-b"):
        claim = claim_of(world, pod)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["device"], result["consumedCapacity"]) == ("gpu-0", {"memory": "40Gi"})
        shares.add(result["shareID"])
        seen = world.seen(pod)
        assert seen.env["GPU_DEVICE"] == "gpu-0"
        assert seen.env["DRACO_FAKE_GPU_0_SHARE"] == result["shareID"]
        assert seen.env["DRACO_FAKE_GPU_0_MEMORY"] == "40Gi"
        assert set(seen.devices) == {"/dev/fake-gpu0"}
        # What the driver could not enforce is on the claim.
        (entry,) = claim["status"]["devices"]
        ready = next(c for c in entry["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True" and "not enforced" in ready["message"]
    assert len(shares) == 2

    # The third does not fit: the GPU's memory is taken. Its Event says so.
    world.create_pod("share-c", claims=claims)

    def refused() -> str | None:
        for event in events_of(world, "Pod", "share-c"):
            if event.get("reason") == "FailedScheduling" and "memory" in str(event.get("message")):
                return str(event["message"])
        return None

    message = wait_for(refused, timeout=90, what="share-c's FailedScheduling Event")
    assert "without enough memory left" in str(message), message
    assert not world.running("share-c")

    # The GPU turns unhealthy: the claims and the pods say so; NoSchedule keeps the pods.
    (world.tmp_path / "devices.yaml").write_text(shared_gpu_yaml(world.driver, unhealthy=True))
    for pod in ("share-a", "share-b"):
        condition = wait_for(
            lambda p=pod: health_condition(world, p), timeout=60, what=f"{pod}'s health condition"
        )
        assert isinstance(condition, dict)
        assert condition["status"] == "False" and condition["reason"] == "Unhealthy"
        claim = claim_of(world, pod)
        assert f"ResourceClaim {world.namespace}/{claim['metadata']['name']}" in condition["message"]
        assert (
            f"device {world.driver}/{world.node.name}/gpu-0 is unhealthy: marked unhealthy"
            in condition["message"]
        )
        (entry,) = claim_of(world, pod)["status"]["devices"]
        healthy = [c for c in entry["conditions"] if c["type"] == "Healthy"]
        assert [(c["status"], c["reason"]) for c in healthy] == [("False", "Unhealthy")]
        warned = [e for e in events_of(world, "Pod", pod) if e.get("reason") == "DeviceUnhealthy"]
        assert len(warned) == 1 and event_count(warned[0]) == 1, warned
        assert world.running(pod)

    assert [t["effect"] for t in published_gpu(world).get("taints") or []] == ["NoSchedule"]

    # Recovery clears all of it: the taint too.
    (world.tmp_path / "devices.yaml").write_text(shared_gpu_yaml(world.driver))
    wait_for(lambda: not published_gpu(world).get("taints"), timeout=60, what="the taint to go")
    for pod in ("share-a", "share-b"):
        wait_for(
            lambda p=pod: health_condition(world, p) is None, timeout=60, what=f"{pod}'s condition to go"
        )
        (entry,) = claim_of(world, pod)["status"]["devices"]
        assert [c["type"] for c in entry["conditions"] if c["type"] == "Healthy"] == []
        assert wait_for(
            lambda p=pod: [e for e in events_of(world, "Pod", p) if e.get("reason") == "DeviceHealthy"],
            timeout=30,
            what=f"{pod}'s DeviceHealthy Event",
        )
        assert world.running(pod)


def test_refused_configs_are_named_on_the_pod_and_announced_once_per_attempt(world: NodeTest) -> None:
    overclock = {"apiVersion": "v9", "kind": "Overclock"}
    world.start(class_config=[{"opaque": {"driver": world.driver, "parameters": overclock}}])
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
                            "parameters": {
                                "apiVersion": "fake.draco.dev/v1alpha1",
                                "kind": "FakeDeviceConfig",
                                "env": {"1X": "y"},
                            },
                        }
                    }
                ],
            }
        },
    }
    world.kube.kubectl("apply", "-f", "-", input=json.dumps(claim))
    world.create_pod("odd-pod", claims=[{"name": "gpu", "resourceClaimName": "odd"}])

    def named_on_the_pod() -> str | None:
        for event in events_of(world, "Pod", "odd-pod"):
            if event.get("reason") == "BindingConditionsFailed":
                return str(event.get("message"))
        return None

    message = wait_for(named_on_the_pod, timeout=90, what="the pod's BindingConditionsFailed Event")
    assert isinstance(message, str)
    assert "InvalidDeviceConfig" in message, message
    assert (
        "unknown configuration kind 'Overclock'" in message
        and "configuration from the device class" in message
    )
    assert "'1X' is not a variable name" in message and "configuration from the claim" in message

    def attempts() -> tuple[int, int]:
        """(attempts the pod was told failed, failures the agent announced on the claim)."""
        told = sum(
            event_count(e)
            for e in events_of(world, "Pod", "odd-pod")
            if e.get("reason") == "BindingConditionsFailed"
        )
        announced = sum(
            event_count(e)
            for e in events_of(world, "ResourceClaim", "odd")
            if e.get("reason") == "FailedPrepareDynamicResources"
        )
        return told, announced

    # A few attempts go by (the operator's backoff: 1 s, 2 s, 4 s ...).
    wait_for(lambda: attempts()[0] >= 3, timeout=120, what="three attempts")
    told, announced = attempts()
    # The agent's announcement of an attempt may be one ahead of the pod's (the operator
    # reads the failure after the agent wrote it), never two per attempt as before.
    assert told <= announced <= told + 1, (told, announced)
    assert not world.running("odd-pod")


def test_a_device_plugin_style_pod_gets_a_hint_where_a_class_could_serve_it(world: NodeTest) -> None:
    """`Insufficient <ns>.example.com/gpu` from kube-scheduler, and the operator's hint: the
    class named like NVIDIA's for its resource could serve it."""
    world.start()
    resource = f"{world.namespace}.example.com/gpu"
    named = f"gpu.{world.namespace}.example.com"
    device_class = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": named},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{world.driver}"'}}]},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plugin-style", "namespace": world.namespace},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": "registry.invalid/none", "resources": {"limits": {resource: "1"}}}
            ],
        },
    }
    world.kube.kubectl("apply", "-f", "-", input=json_list([device_class]))
    try:
        world.kube.kubectl("create", "-f", "-", input=json.dumps(pod))

        def hint() -> str | None:
            for event in events_of(world, "Pod", "plugin-style"):
                if event.get("reason") == "ExtendedResourceHint":
                    return str(event.get("message"))
            return None

        message = wait_for(hint, timeout=90, what="the pod's ExtendedResourceHint Event")
        assert f"DeviceClass {named} can serve it: set its spec.extendedResourceName to {resource}" in str(
            message
        )
    finally:
        world.kube.kubectl("delete", "deviceclasses.resource.draco.dev", named, "--wait=false", check=False)
