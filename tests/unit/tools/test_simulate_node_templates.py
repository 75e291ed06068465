"""`draco simulate --node-template`: would a pod fit a new node of a node group (the input's
nodes set aside), what such a node would be advertised with, and an invalid template
refused whole with its file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.tools import simulate

CLUSTER = """
apiVersion: v1
kind: List
items:
- apiVersion: resource.draco.dev/v1
  kind: DeviceClass
  metadata: {name: gpu}
  spec:
    extendedResourceName: example.com/gpu
    selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-only}
  status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
- apiVersion: resource.draco.dev/v1
  kind: ResourceClaimTemplate
  metadata: {name: two, namespace: ns}
  spec:
    spec:
      devices:
        requests: [{name: gpu, exactly: {deviceClassName: gpu, count: 2}}]
- apiVersion: v1
  kind: Pod
  metadata: {name: train, namespace: ns}
  spec:
    tolerations: [{key: nvidia.com/gpu, operator: Exists}]
    resourceClaims: [{name: gpu, resourceClaimTemplateName: two}]
    containers: [{name: c, image: x, resources: {requests: {cpu: "8"}, claims: [{name: gpu}]}}]
"""


def template(name: str, *, cpu: str, gpus: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.resource.draco.dev/v1alpha1",
        "kind": "NodeTemplate",
        "metadata": {"name": name},
        "spec": {
            "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
            "devices": [
                {"driver": "gpu.example.com", "devices": [{"name": f"gpu-{i}"} for i in range(gpus)]}
            ],
            **spec,
        },
    }


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    big = template("gpu-big", cpu="96", gpus=4, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    small = template("gpu-small", cpu="4", gpus=2)
    broken = template("gpu-broken", cpu="96", gpus=4)
    broken["spec"]["devices"][0]["devices"][3]["capacity"] = {"memory": {"value": "forty"}}
    paths = {"cluster": CLUSTER, "big": big, "small": small, "broken": broken}
    out = {}
    for name, content in paths.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        out[name] = str(path)
    return out


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = simulate.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_pod_that_fits_no_node_fits_a_new_node_of_a_group(
    capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    code, _out, err = run(capsys, "-f", files["cluster"])
    assert code == 1 and "Insufficient cpu" in err
    code, out, err = run(
        capsys, "-f", files["cluster"], "--node-template", files["small"], "--node-template", files["big"]
    )
    assert code == 0, err
    assert "on node new-gpu-big" in err
    [claim] = yaml.safe_load(out)["items"]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results} == {"new-gpu-big-gpu.example.com"} and len(results) == 2


def test_a_group_whose_new_node_is_too_small_is_told_why(
    capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    code, out, err = run(capsys, "-f", files["cluster"], "--node-template", files["small"])
    assert code == 1 and out == ""
    # One node considered: the template's, not the input's cpu-only node.
    assert "0/1 nodes are available: 1 Insufficient cpu" in err


def test_an_invalid_template_is_refused_whole_with_its_file_and_field(
    capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    code, out, err = run(capsys, "-f", files["cluster"], "--node-template", files["broken"])
    assert code == 2 and out == ""
    assert files["broken"] in err
    assert "node template gpu-broken is invalid: spec.devices[0].devices[3].capacity[memory].value" in err


def test_template_resources_are_what_draco_would_advertise_in_the_autoscalers_terms(
    capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    code, out, err = run(
        capsys, "-f", files["cluster"], "--node-template", files["big"], "--template-resources"
    )
    assert code == 0, err
    [big] = yaml.safe_load(out)["templates"]
    assert big["template"] == "gpu-big"
    assert big["resources"]["example.com/gpu"] == "4"
    assert big["resources"]["deviceclass.resource.draco.dev/gpu"] == "4"
    tags = big["clusterAutoscalerTags"]
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/example.com/gpu"] == "4"
    code, _out, err = run(capsys, "-f", files["cluster"], "--template-resources")
    assert code == 2 and "needs --node-template" in err
