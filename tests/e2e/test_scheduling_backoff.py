"""Under a retry storm draco backs off like upstream's scheduler.

The case: a real agent whose driver refuses the opaque config of one claim (so each
preparation fails and, with binding conditions on, the binding failure condition turns
True: the operator clears the allocation), beside ten pods that wait for devices of
another driver that cannot fit. Over a window of a minute the failing pod is attempted at
most once per backoff step (1 s doubling to 10 s), the waiting pods are not retried by the
failing claim's churn, every pod's Events aggregate (one Event per reason and message,
its count growing), and the operator's log stays small. The bounds are counts over the
window with generous margins: the code before the backoff retried about once a second
(the failing pod) and once per churn (each waiting pod), far above them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draco.api.constants import API_VERSION
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.agent_support import slices_of, start_agent, unique
from tests.e2e.support import DracoProcess, json_list, start_operator, wait_for

pytestmark = pytest.mark.e2e

#: How long the counts are taken over (a measurement, not a wait for a signal).
WINDOW_S = 60.0
WAITING_PODS = 10

DEVICES = """
drivers:
- name: gpu.TAG.draco.dev
  cdiClass: gpu
  bindingConditions: true
  devices:
  - name: gpu-{index}
    count: 2
- name: nic.TAG.draco.dev
  cdiClass: nic
  devices:
  - name: nic-0
"""


def objects(namespace: str, tag: str, node: str) -> list[dict[str, Any]]:
    def device_class(kind: str) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": f"{kind}-{tag}"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{kind}.{tag}.draco.dev"'}}]},
        }

    refused = {
        "opaque": {
            "driver": f"gpu.{tag}.draco.dev",
            "parameters": {"apiVersion": "fake.draco.dev/v1alpha1", "kind": "NoSuchConfig"},
        }
    }
    return [
        device_class("gpu"),
        device_class("nic"),
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaim",
            "metadata": {"name": "refused", "namespace": namespace},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": f"gpu-{tag}"}}],
                    "config": [refused],
                }
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two-nics", "namespace": namespace},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "nic", "exactly": {"deviceClassName": f"nic-{tag}", "count": 2}}
                        ]
                    }
                }
            },
        },
    ]


def pod(namespace: str, name: str, node: str, claim: dict[str, str]) -> dict[str, Any]:
    body = k.pod(namespace, name, [claim])
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return body


def counts(kube: ControlPlane, namespace: str, reason: str) -> dict[str, list[int]]:
    """Object name -> the counts of its Events with ``reason`` (one entry per Event object)."""
    found: dict[str, list[int]] = {}
    for event in k.events(kube, namespace):
        if event.get("reason") != reason:
            continue
        count = int(((event.get("series") or {}).get("count")) or event.get("deprecatedCount") or 1)
        found.setdefault(str((event.get("regarding") or {}).get("name")), []).append(count)
    return found


def test_a_refused_claim_backs_off_and_leaves_the_waiting_pods_alone(
    kube: ControlPlane, namespace: str, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    tag = unique("storm")
    node = f"{tag}-node"
    start_agent(draco_process, tmp_path, devices_yaml=DEVICES.replace("TAG", tag), node=node)
    wait_for(
        lambda: (
            {s["spec"]["driver"] for s in slices_of(kube, node)}
            == {f"gpu.{tag}.draco.dev", f"nic.{tag}.draco.dev"}
        ),
        timeout=90,
        what="both drivers' slices",
    )
    kube.kubectl("apply", "-f", "-", input=json_list(objects(namespace, tag, node)))
    operator = start_operator(draco_process, namespace)
    waiting = [f"waiting-{i}" for i in range(WAITING_PODS)]
    pods = [pod(namespace, "refused", node, {"name": "gpu", "resourceClaimName": "refused"})]
    pods += [
        pod(namespace, name, node, {"name": "nic", "resourceClaimTemplateName": "two-nics"})
        for name in waiting
    ]
    kube.kubectl("create", "-f", "-", input=json_list(pods))

    def started() -> bool:
        failed = counts(kube, namespace, "BindingConditionsFailed")
        unschedulable = counts(kube, namespace, "FailedScheduling")
        return "refused" in failed and all(name in unschedulable for name in waiting)

    wait_for(started, timeout=180, what="the first binding failure and every waiting pod's FailedScheduling")
    before_failed = counts(kube, namespace, "BindingConditionsFailed")
    before_waiting = counts(kube, namespace, "FailedScheduling")
    before_lines = len(operator.logs().splitlines())
    began = time.monotonic()
    time.sleep(WINDOW_S)
    elapsed = time.monotonic() - began
    after_failed = counts(kube, namespace, "BindingConditionsFailed")
    after_waiting = counts(kube, namespace, "FailedScheduling")
    lines = len(operator.logs().splitlines()) - before_lines
    prepare_failures = counts(kube, namespace, "FailedPrepareDynamicResources").get("refused", [])
    report = json.dumps(
        {
            "window_s": round(elapsed, 1),
            "binding_failures": [before_failed.get("refused"), after_failed.get("refused")],
            "failed_scheduling": {n: [before_waiting.get(n), after_waiting.get(n)] for n in waiting},
            "prepare_failure_events": prepare_failures,
            "operator_log_lines": lines,
        }
    )

    print(report)
    # The failing pod: at most one attempt per backoff step (at 1, 3, 7, 15, 25, 35, ... s
    # after the first failure: 9 in a minute), and still tried (backoff is no giving up).
    failures = sum(after_failed["refused"]) - sum(before_failed["refused"])
    assert 1 <= failures <= 2 + elapsed / 10 + 4, report
    # Its Events aggregate: one object per message (the device may differ), the count grows.
    assert len(after_failed["refused"]) <= 2, report
    assert len(prepare_failures) <= 2, report
    # The waiting pods: not retried by the churn (each attempt writes one FailedScheduling).
    for name in waiting:
        assert len(after_waiting[name]) == 1, report
        assert after_waiting[name][0] - before_waiting[name][0] <= 3, report
    # The operator's log: a few lines per attempt, not thousands a minute.
    assert lines <= 120 * elapsed / 60, report
    pod_obj = k.get(kube, "pod", "refused", namespace=namespace)
    assert pod_obj is not None and k.is_gated(pod_obj), report
