"""Device quota under upstream's extended-resource names, beside a real kube-controller-manager.

Kubernetes 1.35 (kubernetes/kubernetes PR #134210) counts a claim's devices also under
``requests.<extendedResourceName>`` of its class, so one quota limits a class's devices
whether pods ask for them by resource name or by claim. Here a real kube-apiserver
enforces such a quota for pods (its own quota admission), a real kube-controller-manager's
resourcequota controller counts the pods (and writes that count alone), and draco's
operator adds its claims on top: a pod that would go past the limit with the claims is
refused by kube-apiserver itself, and after kube-controller-manager writes its pods-only
count (a pod went) the operator writes the claims back.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from draco.tools.dev.components import start_controller_manager, stop
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, start_operator, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def controller_manager(kube: ControlPlane, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """kube-controller-manager's resourcequota controller alone, for this test."""
    process = start_controller_manager(kube, kube.binaries, tmp_path, controllers="resourcequota-controller")
    yield process
    stop(process)


def _pod(namespace: str, name: str, resource: str) -> k.Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {"name": "c", "image": "registry.invalid/none", "resources": {"limits": {resource: "1"}}}
            ]
        },
    }


def test_a_quota_of_an_extended_resource_counts_pods_and_claims(
    kube: ControlPlane,
    namespace: str,
    draco_process: Callable[..., DracoProcess],
    controller_manager: subprocess.Popen[bytes],
) -> None:
    resource = f"{namespace}.example.com/gpu"
    device_class = k.device_class(namespace)
    device_class["spec"]["extendedResourceName"] = resource
    class_name = device_class["metadata"]["name"]
    explicit, implicit = f"requests.{resource}", f"requests.deviceclass.resource.draco.dev/{class_name}"
    k.apply(kube, [device_class])
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": namespace},
        "spec": {"hard": {explicit: "3", implicit: "10"}},
    }
    kube.kubectl("create", "-f", "-", input=json.dumps(quota))

    def used() -> dict[str, str]:
        stored = k.get(kube, "resourcequota", "gpus", namespace=namespace) or {}
        return dict((stored.get("status") or {}).get("used") or {})

    start_operator(draco_process, namespace)
    wait_for(lambda: used() == {explicit: "0", implicit: "0"}, timeout=60, what="the quota counted")
    kube.kubectl("create", "-f", "-", input=json.dumps(_pod(namespace, "first", resource)))
    kube.kubectl("create", "-f", "-", input=json.dumps(k.claim(namespace, "two", count=2)))
    wait_for(
        lambda: used() == {explicit: "3", implicit: "2"}, timeout=60, what="the pod and the claim counted"
    )

    # kube-apiserver's own quota admission sees the claim's devices.
    refused = kube.kubectl(
        "create", "-f", "-", input=json.dumps(_pod(namespace, "second", resource)), check=False
    )
    assert refused.returncode != 0 and "exceeded quota: gpus" in refused.stderr, refused.stderr

    # The pod goes: kube-controller-manager writes the pods alone (0), the operator the
    # claim back on top (2), whichever of the quota's write and the pod's deletion it sees last.
    kube.kubectl("delete", "pod", "first", "-n", namespace, "--grace-period=0", "--force")
    wait_for(
        lambda: used().get(explicit) == "2", timeout=90, what="kube-controller-manager's count corrected"
    )
    kube.kubectl("create", "-f", "-", input=json.dumps(_pod(namespace, "third", resource)))
    wait_for(lambda: used() == {explicit: "3", implicit: "2"}, timeout=60, what="the third pod counted")
