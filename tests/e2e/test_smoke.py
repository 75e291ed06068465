"""The control plane the tests run on is real: it stores objects, serves CRDs, and serves
the native DRA API (`resource.k8s.io/v1`, DeviceTaintRule included)."""

from __future__ import annotations

import json
import subprocess

import pytest

from draco.tools.dev.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.smoke.draco.dev}
spec:
  group: smoke.draco.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
"""


def test_versions_are_the_pinned_release(kube: ControlPlane) -> None:
    assert kube.version().startswith("v1.3"), kube.version()
    assert "0.0.0" not in kube.version()
    client = json.loads(kube.kubectl("version", "-o", "json").stdout)
    assert client["clientVersion"]["gitVersion"] == kube.version()
    assert client["serverVersion"]["gitVersion"] == kube.version()


def test_crd_objects_round_trip(kube: ControlPlane, namespace: str) -> None:
    kube.kubectl("apply", "-f", "-", input=WIDGET_CRD)
    kube.kubectl("wait", "--for=condition=Established", "crd/widgets.smoke.draco.dev", "--timeout=30s")
    widget = {
        "apiVersion": "smoke.draco.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3},
    }
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(widget))
    got = json.loads(kube.kubectl("get", "-n", namespace, "widgets", "w", "-o", "json").stdout)
    assert got["spec"] == {"size": 3}
    assert got["metadata"]["namespace"] == namespace


def test_native_dra_api_is_served(kube: ControlPlane) -> None:
    resources = kube.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "name").stdout.split()
    for kind in (
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "resourceslices",
        "devicetaintrules",
    ):
        assert f"{kind}.resource.k8s.io" in resources, resources
    listed = json.loads(kube.kubectl("get", "deviceclasses.v1.resource.k8s.io", "-o", "json").stdout)
    assert listed["kind"] == "List"
    rule = kube.kubectl("get", "devicetaintrules.v1.resource.k8s.io", "-o", "json", check=False)
    assert rule.returncode == 0, rule.stderr


def test_kubectl_binary_reports_version(kube: ControlPlane) -> None:
    out = subprocess.run(
        [str(kube.binaries / "kubectl"), "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["clientVersion"]["gitVersion"] == kube.version()
