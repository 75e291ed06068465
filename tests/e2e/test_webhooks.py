"""`draco webhook`'s admission, through `kubectl apply` against a real API server.

A DeviceClass (resource.draco.dev/v1) with a broken CEL selector is rejected at once with
a message naming the selector and the compiler's error; a valid one is accepted. A
ResourceClaim asking for admin access is rejected in an unlabelled namespace and accepted
in one labelled `resource.draco.dev/admin-access: "true"`. Defaults and `timeAdded` are
written by the mutating webhook.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.support import running_webhook

pytestmark = pytest.mark.e2e

V = "resource.draco.dev/v1"
BROKEN_SELECTOR = 'device.attributes["gpu.example.com"].model =='


def _class(name: str, expression: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": V,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
    )


def _admin_claim(name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": V,
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "adminAccess": True}}]
                }
            },
        }
    )


@pytest.fixture(scope="module")
def webhooks(kube: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with running_webhook(kube, tmp_path_factory.mktemp("webhook")) as webhook:
        yield
        assert webhook.process.popen.poll() is None, webhook.process.logs()


def test_a_device_class_with_a_broken_selector_is_rejected_naming_selector_and_error(
    kube: ControlPlane, webhooks: None
) -> None:
    result = kube.kubectl("apply", "-f", "-", input=_class("broken", BROKEN_SELECTOR), check=False)
    assert result.returncode != 0
    assert "spec.selectors[0].cel.expression: Invalid value" in result.stderr
    assert "compilation failed" in result.stderr
    assert "Syntax error" in result.stderr
    assert kube.kubectl("get", "deviceclasses.resource.draco.dev", "broken", check=False).returncode != 0


def test_a_valid_device_class_is_accepted(kube: ControlPlane, webhooks: None) -> None:
    result = kube.kubectl(
        "apply", "-f", "-", input=_class("fine", 'device.driver == "gpu.example.com"'), check=False
    )
    assert result.returncode == 0, result.stderr


def test_admin_access_needs_a_labelled_namespace(kube: ControlPlane, namespace: str, webhooks: None) -> None:
    denied = kube.kubectl("apply", "-n", namespace, "-f", "-", input=_admin_claim("denied"), check=False)
    assert denied.returncode != 0
    assert "spec.devices.requests[0].adminAccess: Forbidden" in denied.stderr
    assert "resource.draco.dev/admin-access: true" in denied.stderr

    kube.kubectl("label", "namespace", namespace, "resource.draco.dev/admin-access=true")
    allowed = kube.kubectl("apply", "-n", namespace, "-f", "-", input=_admin_claim("allowed"), check=False)
    assert allowed.returncode == 0, allowed.stderr


def test_defaults_and_taint_times_are_written(kube: ControlPlane, namespace: str, webhooks: None) -> None:
    claim = {
        "apiVersion": V,
        "kind": "ResourceClaim",
        "metadata": {"name": "defaulted"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(claim))
    stored = json.loads(
        kube.kubectl(
            "get", "resourceclaims.resource.draco.dev", "-n", namespace, "defaulted", "-o", "json"
        ).stdout
    )
    exactly = stored["spec"]["devices"]["requests"][0]["exactly"]
    assert (exactly["allocationMode"], exactly["count"]) == ("ExactCount", 1)

    rule = {
        "apiVersion": V,
        "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance"},
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com"},
            "taint": {"key": "example.com/maint", "effect": "NoSchedule"},
        },
    }
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(rule))
    stored = json.loads(
        kube.kubectl("get", "devicetaintrules.resource.draco.dev", "maintenance", "-o", "json").stdout
    )
    assert stored["spec"]["taint"]["timeAdded"].endswith("Z")


def test_invalid_slices_and_rules_are_rejected_too(kube: ControlPlane, webhooks: None) -> None:
    rule = {
        "apiVersion": V,
        "kind": "DeviceTaintRule",
        "metadata": {"name": "bad-effect"},
        "spec": {"taint": {"key": "k", "effect": "Evict"}},
    }
    result = kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(rule), check=False)
    assert result.returncode != 0
    assert "spec.taint.effect: Unsupported value" in result.stderr


def test_a_rule_selecting_every_device_is_admitted_with_upstreams_warning(
    kube: ControlPlane, webhooks: None
) -> None:
    """Kubernetes 1.38 (kubernetes/kubernetes#141831): kubectl prints the webhook's warning
    for `deviceSelector: {}`; a rule without a selector gets none."""
    rule = {
        "apiVersion": V,
        "kind": "DeviceTaintRule",
        "metadata": {"name": "every-device"},
        "spec": {"deviceSelector": {}, "taint": {"key": "k", "effect": "None"}},
    }
    created = kube.kubectl("create", "-f", "-", input=yaml.safe_dump(rule))
    assert (
        "Warning: spec.deviceSelector: an empty selector matches every device from every driver in the cluster"
        in created.stderr
    )
    quiet = {**rule, "metadata": {"name": "no-device"}, "spec": {"taint": rule["spec"]["taint"]}}
    assert "Warning" not in kube.kubectl("create", "-f", "-", input=yaml.safe_dump(quiet)).stderr
    kube.kubectl("delete", "devicetaintrules.resource.draco.dev", "every-device", "no-device", check=False)


def _patch_status(
    kube: ControlPlane, namespace: str, name: str, status: dict[str, object]
) -> tuple[int, str]:
    result = kube.kubectl(
        "patch",
        "resourceclaims.resource.draco.dev",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
        check=False,
    )
    return result.returncode, result.stderr


def test_claim_status_writes_are_validated(kube: ControlPlane, namespace: str, webhooks: None) -> None:
    claim = {
        "apiVersion": V,
        "kind": "ResourceClaim",
        "metadata": {"name": "status-rules"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(claim))
    pod = {"resource": "pods", "name": "p", "uid": "0b7f7c34-8d0e-4a1f-9d4e-3c2b1a0f9e8d"}

    code, stderr = _patch_status(kube, namespace, "status-rules", {"reservedFor": [pod]})
    assert code != 0
    assert "status.reservedFor: Forbidden: may not be specified when `allocated` is not set" in stderr

    result = {"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}
    allocation = {"devices": {"results": [result]}}
    code, stderr = _patch_status(
        kube, namespace, "status-rules", {"allocation": allocation, "reservedFor": [pod]}
    )
    assert code == 0, stderr

    moved = {"devices": {"results": [{**result, "device": "gpu-1"}]}}
    code, stderr = _patch_status(kube, namespace, "status-rules", {"allocation": moved})
    assert code != 0
    assert "status.allocation: Invalid value: field is immutable" in stderr


def test_newly_allocated_admin_access_needs_a_labelled_namespace(
    kube: ControlPlane, namespace: str, webhooks: None
) -> None:
    claim = {
        "apiVersion": V,
        "kind": "ResourceClaim",
        "metadata": {"name": "admin-status"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(claim))
    result = {"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "d", "adminAccess": True}
    code, stderr = _patch_status(
        kube, namespace, "admin-status", {"allocation": {"devices": {"results": [result]}}}
    )
    assert code != 0
    assert "status.allocation.devices.results[0].adminAccess: Forbidden" in stderr
