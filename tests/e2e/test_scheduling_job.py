"""The Job of `examples/`, end to end: claims generated, allocated, pods pinned and
un-gated, and everything cleaned up when the pods finish.

There is no Job controller, scheduler or kubelet here: the Job's pods are stamped from its
template (as the Job controller would), Nodes and ResourceSlices are created as objects,
and pods "finish" by having their phase set to Succeeded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.api.constants import FINALIZER
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import lifecycle_support as lifecycle
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DRIVER = "gpu.draco.dev"


def example(name: str, namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    if "namespace" in obj["metadata"]:
        obj["metadata"]["namespace"] = namespace
    return obj


def gpu_slice(node_name: str, devices: int) -> dict[str, Any]:
    """Devices the example's selectors accept: model T4 (shared claim), 16Gi (template)."""
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node_name,
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"model": {"string": "T4"}},
                    "capacity": {"memory": {"value": "16Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def by_name(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects}


def check_running(kube: ControlPlane, namespace: str, pod_names: list[str]) -> str:
    """Every pod un-gated, pinned where its claims are; the shared claim reserved by all."""
    pods = by_name(k.items(kube, "pods", namespace=namespace))
    claims = by_name(k.items(kube, k.CLAIMS, namespace=namespace))
    shared = claims["shared-gpu"]
    shared_node = k.allocation_node(shared)
    assert shared_node is not None
    assert len(k.allocated_devices(shared)) == 1
    assert k.reserved_uids(shared) == {pods[n]["metadata"]["uid"] for n in pod_names}
    devices = [d for c in claims.values() for d in k.allocated_devices(c)]
    assert len(devices) == len(set(devices)), "no device is allocated twice"
    for name in pod_names:
        pod = pods[name]
        assert not k.is_gated(pod)
        assert k.pinned_node(pod) == shared_node
        generated = k.generated_claims(pod)["separate-gpu-claim"]
        assert generated is not None and generated.startswith(f"{name}-separate-gpu-claim-")
        claim = claims[generated]
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert k.reserved_uids(claim) == {pod["metadata"]["uid"]}
        assert k.allocation_node(claim) == shared_node
        assert FINALIZER in claim["metadata"]["finalizers"]
    return shared_node


def all_ungated(kube: ControlPlane, namespace: str, names: list[str]) -> bool:
    pods = by_name(k.items(kube, "pods", namespace=namespace))
    return all(n in pods and not k.is_gated(pods[n]) for n in names)


def only_shared_left_unused(kube: ControlPlane, namespace: str) -> bool:
    claims = k.items(kube, k.CLAIMS, namespace=namespace)
    if [c["metadata"]["name"] for c in claims] != ["shared-gpu"]:
        return False
    shared = claims[0]
    status = shared.get("status") or {}
    return not status.get("allocation") and not status.get("reservedFor")


def test_the_example_job_runs_to_completion(kube: ControlPlane, namespace: str, draco_process: Start) -> None:
    nodes = [f"{namespace}-n{i}" for i in range(2)]
    k.add_nodes(kube, [k.node(n, labels={"draco-e2e": namespace}) for n in nodes])
    k.apply(kube, [example("deviceclass.yaml", namespace)])
    k.apply(kube, [gpu_slice(n, 12) for n in nodes])
    k.apply(
        kube,
        [example("resourceclaimtemplate.yaml", namespace), example("resourceclaim-shared.yaml", namespace)],
    )
    job = example("job.yaml", namespace)
    # Other tests publish devices of the same driver on their own nodes: stay on ours.
    job["spec"]["template"]["spec"]["nodeSelector"] = {"draco-e2e": namespace}
    job["spec"]["suspend"] = True
    created_job = lifecycle.create(kube, job, namespace=namespace)
    start_operator(draco_process, namespace)

    # The Job's parallelism first: two pods at a time.
    first = [p["metadata"]["name"] for p in lifecycle.stamp_job_pods(kube, created_job, indexes=range(2))]
    wait_for(lambda: all_ungated(kube, namespace, first), timeout=90, what="first two pods un-gated")
    node = check_running(kube, namespace, first)
    assert node in nodes
    for name in first:
        lifecycle.set_phase(kube, name, "Succeeded", namespace=namespace)
    wait_for(lambda: only_shared_left_unused(kube, namespace), timeout=60, what="first wave cleaned up")

    # Then the other eight at once: the shared claim is allocated once for all of them.
    rest = [p["metadata"]["name"] for p in lifecycle.stamp_job_pods(kube, created_job, indexes=range(2, 10))]
    wait_for(lambda: all_ungated(kube, namespace, rest), timeout=120, what="eight pods un-gated")
    check_running(kube, namespace, rest)
    for name in rest:
        lifecycle.set_phase(kube, name, "Succeeded", namespace=namespace)
    wait_for(
        lambda: only_shared_left_unused(kube, namespace), timeout=90, what="every generated claim deleted"
    )
    shared = k.get(kube, k.CLAIMS, "shared-gpu", namespace=namespace)
    assert shared is not None
    assert FINALIZER not in (shared["metadata"].get("finalizers") or [])
    pods = k.items(kube, "pods", namespace=namespace)
    assert len(pods) == 10 and all(not k.is_gated(p) for p in pods)
