"""Binding conditions: devices that must be made ready (by their node agent) before the pod
may be pinned. The operator waits until every condition is True, and starts over when a
binding failure condition turns True. The test plays the node agent by writing
`status.devices[].conditions` itself. How each wait ended is counted under kube-scheduler's
names (`scheduler_dra_bindingconditions_*`, KEP-5007) on the operator's /metrics."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, start_operator, wait_for
from tests.e2e.test_scheduling import settled_pod

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]


def report(kube: ControlPlane, namespace: str, claim_name: str, condition: str) -> None:
    """What the node agent does: a True condition on the allocated device's status."""
    claim = k.get(kube, k.CLAIMS, claim_name, namespace=namespace)
    assert claim is not None
    driver, pool, device = k.allocated_devices(claim)[0]
    entry = {
        "driver": driver,
        "pool": pool,
        "device": device,
        "conditions": [
            {
                "type": condition,
                "status": "True",
                "reason": "Test",
                "message": "set by the test",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    patch = json.dumps({"status": {"devices": [entry]}})
    kube.kubectl(
        "patch", k.CLAIMS, claim_name, "-n", namespace, "--subresource=status", "--type=merge", "-p", patch
    )


def allocation_of(kube: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    claim = k.get(kube, k.CLAIMS, name, namespace=namespace)
    return None if claim is None else (claim.get("status") or {}).get("allocation")


def binding_metrics(port: int) -> dict[str, float]:
    """The operator's binding-condition samples by their text (name and labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(scheduler_dra_bindingconditions_\S+) (\S+)$", text, re.MULTILINE)
    }


def counted(port: int, namespace: str, status: str) -> float:
    name = (
        "scheduler_dra_bindingconditions_allocations_total"
        f'{{driver="{k.driver_of(namespace)}",profile="default-scheduler",status="{status}"}}'
    )
    return binding_metrics(port).get(name, 0.0)


def waits(port: int, namespace: str, status: str) -> float:
    labels = f'driver="{k.driver_of(namespace)}",profile="default-scheduler",status="{status}"'
    return binding_metrics(port).get(
        f"scheduler_dra_bindingconditions_wait_duration_seconds_count{{{labels}}}", 0.0
    )


def setup(kube: ControlPlane, namespace: str) -> None:
    node = f"{namespace}-n0"
    k.add_nodes(kube, [k.node(node)])
    k.apply(kube, [k.device_class(namespace)])
    extra = {
        "bindsToNode": True,
        "bindingConditions": ["Prepared"],
        "bindingFailureConditions": ["PrepareFailed"],
    }
    k.apply(kube, [k.node_slice(namespace, node, 1, device_extra=extra)])
    k.apply(kube, [k.claim(namespace, "c")])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "c"}])])


def test_the_pod_waits_until_every_binding_condition_is_true(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    setup(kube, namespace)
    port = free_port()
    start_operator(draco_process, namespace, metrics_port=port)

    allocation = wait_for(lambda: allocation_of(kube, namespace, "c"), timeout=60, what="claim allocated")
    assert isinstance(allocation, dict)
    result = allocation["devices"]["results"][0]
    assert result["bindingConditions"] == ["Prepared"]
    assert allocation.get("allocationTimestamp")
    wait_for(
        lambda: k.event_notes(kube, namespace, "p", "BindingConditionsPending"),
        timeout=60,
        what="pending Event",
    )
    pod = k.get(kube, "pod", "p", namespace=namespace)
    assert pod is not None and k.is_gated(pod), "not pinned before the device is ready"

    assert counted(port, namespace, "success") == 0.0, "counted when the wait ends, not before"

    report(kube, namespace, "c", "Prepared")
    pod = wait_for(lambda: settled_pod(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict) and k.pinned_node(pod) == f"{namespace}-n0"
    assert counted(port, namespace, "success") == 1.0  # one device with binding conditions
    assert waits(port, namespace, "success") == 1.0


def test_a_binding_failure_clears_the_allocation_and_starts_over(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    setup(kube, namespace)
    port = free_port()
    start_operator(draco_process, namespace, metrics_port=port)
    first = wait_for(lambda: allocation_of(kube, namespace, "c"), timeout=60, what="claim allocated")
    assert isinstance(first, dict)

    report(kube, namespace, "c", "PrepareFailed")
    wait_for(
        lambda: k.event_notes(kube, namespace, "p", "BindingConditionsFailed"),
        timeout=60,
        what="failure Event",
    )

    def allocated_again() -> bool:
        claim = k.get(kube, k.CLAIMS, "c", namespace=namespace)
        status = (claim or {}).get("status") or {}
        return bool(status.get("allocation")) and not status.get("devices")

    wait_for(allocated_again, timeout=60, what="a fresh allocation without the failed device status")
    pod = k.get(kube, "pod", "p", namespace=namespace)
    assert pod is not None and k.is_gated(pod)
    assert counted(port, namespace, "failure") == 1.0
    assert waits(port, namespace, "failure") == 1.0
    report(kube, namespace, "c", "Prepared")
    wait_for(lambda: settled_pod(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert counted(port, namespace, "success") == 1.0
