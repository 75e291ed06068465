"""The README's kubectl recipes, run as the README spells them, against the real API server.

Each recipe is the ```sh block after a `<!-- recipe: NAME -->` marker in README.md; the test
reads it from there, so the README cannot drift from what works.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.support import json_list, wait_for

README = Path(__file__).resolve().parents[2] / "README.md"
_RECIPE = re.compile(r"<!-- recipe: (?P<name>[\w-]+) -->\s*```sh\n(?P<body>.*?)```", re.DOTALL)


def recipe(name: str) -> str:
    recipes = {m["name"]: m["body"] for m in _RECIPE.finditer(README.read_text())}
    assert name in recipes, f"README.md has no recipe {name!r} (has {sorted(recipes)})"
    return recipes[name]


def run_recipe(kube: ControlPlane, name: str) -> subprocess.CompletedProcess[str]:
    """Run the recipe with bash, with kubectl and draco on PATH as a user would have them."""
    path = os.pathsep.join([str(kube.binaries), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**kube.env(), "PATH": path}
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", recipe(name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _apply(kube: ControlPlane, *documents: dict[str, object]) -> None:
    kube.kubectl("apply", "-f", "-", input=json_list(documents))


@pytest.fixture
def waiting_pod(kube: ControlPlane, namespace: str) -> str:
    """A class, one node's slice, a template and a gated pod that uses it (no operator runs)."""
    driver = f"{namespace}.recipes.example.com"
    group = "resource.draco.dev/v1"
    _apply(
        kube,
        {
            "apiVersion": group,
            "kind": "DeviceClass",
            "metadata": {"name": f"{namespace}-gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
        {
            "apiVersion": group,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{namespace}-node-1"},
            "spec": {
                "driver": driver,
                "nodeName": f"{namespace}-node-1",
                "pool": {"name": f"{namespace}-node-1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}"} for i in range(2)],
            },
        },
        {
            "apiVersion": group,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": namespace},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": f"{namespace}-gpu"}}]
                    }
                }
            },
        },
        {
            "apiVersion": group,
            "kind": "ResourceClaim",
            "metadata": {"name": "spare", "namespace": namespace},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": f"{namespace}-gpu"}}]}
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "trainer",
                "namespace": namespace,
                "annotations": {
                    "resource.draco.dev/claims": "- name: gpu\n  resourceClaimTemplateName: one-gpu\n"
                },
            },
            "spec": {
                "schedulingGates": [{"name": "resource.draco.dev/allocation"}],
                "containers": [{"name": "main", "image": "busybox"}],
            },
        },
    )
    return namespace


def test_the_list_recipe_shows_draco_objects(kube: ControlPlane, waiting_pod: str) -> None:
    # The API server publishes a new CRD's schema to `kubectl explain` a little after the
    # CRD is established: wait for that, as a user who just installed draco would.
    wait_for(
        lambda: kube.kubectl("explain", "drc.spec.devices", check=False).returncode == 0,
        timeout=60,
        what="the CRD schema published for kubectl explain",
    )
    result = run_recipe(kube, "list")
    assert result.returncode == 0, result.stderr
    assert "resourceclaim.resource.draco.dev/spare" in result.stdout
    assert "resourceclaimtemplate.resource.draco.dev/one-gpu" in result.stdout
    assert f"deviceclass.resource.draco.dev/{waiting_pod}-gpu" in result.stdout
    # A claim nobody has allocated yet prints STATE pending, as upstream's does.
    spare = [line.split() for line in result.stdout.splitlines() if line.split()[1:2] == ["spare"]]
    assert spare and spare[0][2] == "pending", result.stdout


def test_the_simulate_recipe_allocates_the_waiting_pod(kube: ControlPlane, waiting_pod: str) -> None:
    result = run_recipe(kube, "simulate")
    # Other tests' leftovers may share the API server: judge only this namespace's lines.
    mine = [line for line in result.stderr.splitlines() if waiting_pod in line]
    assert any(line.startswith(f"allocated {waiting_pod}/trainer-gpu-") for line in mine), result.stderr
    assert f"allocated {waiting_pod}/spare on node {waiting_pod}-node-1" in mine
    items = yaml.safe_load(result.stdout)["items"] if result.stdout else []
    devices = {
        r["device"]
        for item in items
        if item["metadata"]["namespace"] == waiting_pod
        for r in item["status"]["allocation"]["devices"]["results"]
    }
    assert devices == {"gpu-0", "gpu-1"}
