"""Events that repeat are one Event series, and a pod applied with its template gets no
Warning for the moment between the two.

A pod whose template claim device quota refuses is tried again and again (every change of
the namespace's quotas, and with backoff): each try's claim has a fresh generated name, and
the refusal names it. The pod's `FailedResourceClaimCreation` Events must still be one
series per pod, its count growing, its note naming no generated name. A pod and its
template in one `kubectl apply` (the pod first, as a manifest may list them) must get its
claim without a `template not found` Warning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draco.api.quota import quota_entry
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.lifecycle_support import events
from tests.e2e.support import DracoProcess, running_webhook, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]
REASON = "FailedResourceClaimCreation"


def template(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}
        },
    }


def device_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }


def gated_pod(name: str, template_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {
                "resource.draco.dev/claims": json.dumps(
                    [{"name": "gpu", "resourceClaimTemplateName": template_name}]
                )
            },
        },
        "spec": {
            "schedulingGates": [{"name": "resource.draco.dev/allocation"}],
            "containers": [{"name": "main", "image": "registry.invalid/none"}],
        },
    }


def apply_in(kube: ControlPlane, namespace: str, *objects: dict[str, Any]) -> None:
    items = [{**o, "metadata": {**o["metadata"], "namespace": namespace}} for o in objects]
    kube.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )


def series(event: dict[str, Any]) -> int:
    return int((event.get("series") or {}).get("count") or event.get("count") or 1)


def test_a_pods_repeated_quota_refusal_is_one_event_series(
    kube: ControlPlane, namespace: str, draco_process: Start, tmp_path: Path
) -> None:
    class_name = f"{namespace}-gpu"
    kube.kubectl("apply", "-f", "-", input=json.dumps(device_class(class_name)))
    entry = quota_entry(class_name)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "none", "namespace": namespace},
        "spec": {"hard": {entry: "0"}},
    }
    kube.kubectl("apply", "-f", "-", input=json.dumps(quota))

    def counted() -> bool:  # before that, claims are refused with "status unknown" (another message)
        out = kube.kubectl("get", "resourcequota", "none", "-n", namespace, "-o", "json")
        return entry in ((json.loads(out.stdout).get("status") or {}).get("used") or {})

    # Configured as the chart configures it: the operator (the admin here) exempt from
    # validation, its claims charged by the quota-only webhook.
    with running_webhook(kube, tmp_path / "webhook", exempt_users=("admin",), answered=lambda: True):
        start_operator(draco_process, namespace)
        wait_for(counted, timeout=60, what="the operator to count the quota")
        apply_in(
            kube,
            namespace,
            template("one-gpu", class_name),
            gated_pod("a", "one-gpu"),
            gated_pod("b", "one-gpu"),
        )

        def refusals(pod: str) -> int:
            return sum(series(e) for e in events(kube, namespace=namespace, reason=REASON)
                       if e["involvedObject"]["name"] == pod)  # fmt: skip

        wait_for(
            lambda: refusals("a") >= 3 and refusals("b") >= 3,
            timeout=120,
            what="each pod refused three times",
        )
        before = {pod: refusals(pod) for pod in ("a", "b")}
        # Another change of the quotas wakes both pods again: still one series each.
        kube.kubectl("label", "resourcequota", "none", "-n", namespace, "touched=yes")
        wait_for(
            lambda: all(refusals(pod) > before[pod] for pod in before), timeout=60, what="both refused again"
        )
    final = events(kube, namespace=namespace, reason=REASON)
    assert sorted(e["involvedObject"]["name"] for e in final) == ["a", "b"], [
        (e["involvedObject"]["name"], e["message"]) for e in final
    ]
    for event in final:
        assert event["type"] == "Warning"
        assert "exceeded quota: none" in event["message"], event["message"]
        # No fresh generated claim name in it: the pod's claim as draco names it before it exists.
        pod = event["involvedObject"]["name"]
        assert not re.search(rf'"{pod}-gpu-[a-z0-9]{{5}}"', event["message"]), event["message"]
        assert f"{pod}-gpu-*" in event["message"], event["message"]


def test_a_pod_applied_with_its_template_gets_no_warning(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    class_name = f"{namespace}-gpu"
    kube.kubectl("apply", "-f", "-", input=json.dumps(device_class(class_name)))
    operator = start_operator(draco_process, namespace)
    # The pod first, its template right after, in one apply (and a second pair, the other way).
    apply_in(kube, namespace, gated_pod("first", "late"), template("late", class_name))
    apply_in(kube, namespace, template("early", class_name), gated_pod("second", "early"))
    # And the moment made certain: the operator has found the template missing before it comes.
    apply_in(kube, namespace, gated_pod("third", "later"))
    wait_for(
        lambda: (
            '"pod_claim":"gpu"' in operator.logs() and "Claim waits for what the pod names" in operator.logs()
        ),
        timeout=60,
        what="the operator to find the third pod's template missing",
    )
    apply_in(kube, namespace, template("later", class_name))

    def claims() -> list[str]:
        out = kube.kubectl("get", "resourceclaims.resource.draco.dev", "-n", namespace, "-o", "json")
        return [c["metadata"]["generateName"] for c in json.loads(out.stdout)["items"]]

    wait_for(lambda: len(claims()) == 3, timeout=60, what="the three pods' claims")
    assert sorted(claims()) == ["first-gpu-", "second-gpu-", "third-gpu-"]
    assert [e["message"] for e in events(kube, namespace=namespace, reason=REASON)] == []
