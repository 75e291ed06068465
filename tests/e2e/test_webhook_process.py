"""`draco webhook` as its own process, registered by URL with a CA bundle from files, as an
installer would: a 1 MiB ResourceSlice is created and updated through it (the update's
AdmissionReview carries two of them), and when the process is killed the node agent keeps
publishing while user writes of DeviceClasses are refused, as docs/webhook.md says."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.agent_support import CLAIMS, SLICES, pool_complete, slices_of, start_agent, unique
from tests.e2e.support import DracoProcess, WebhookProcess, running_webhook, wait_for

pytestmark = pytest.mark.e2e

V = "resource.draco.dev/v1"
DOMAIN = "gpu." + "d" * 47 + ".example.com"  # the longest attribute domain: 63 characters


def _big_slice(name: str, pool: str) -> dict[str, Any]:
    """A valid slice of about 1 MiB: 128 devices, 32 attributes each with the longest
    names and values, and a per-device node selector."""
    devices = []
    for i in range(128):
        attributes: dict[str, Any] = {
            f"{DOMAIN}/attribute{j:02d}" + "x" * 21: {"string": f"{i:03d}-{j:02d}-" + "v" * 57}
            for j in range(31)
        }
        attributes[f"{DOMAIN}/index"] = {"int": i}
        hosts = [f"node-{k:02d}-" + "h" * 55 for k in range(40)]
        selector = {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": attributes,
                "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [selector]}]},
            }
        )
    return {
        "apiVersion": V,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.example.com",
            "perDeviceNodeSelection": True,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _webhook_requests(webhook: WebhookProcess, *, kind: str, operation: str, verdict: str) -> float:
    """`draco_webhook_requests_total` for one kind/operation/verdict, read from the
    webhook's /metrics (plain HTTP on the loopback address, its default)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{webhook.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = (
        rf'draco_webhook_requests_total\{{kind="{kind}",operation="{operation}",'
        rf'verdict="{verdict}",webhook="validate"\}} ([0-9.e+]+)'
    )
    match = re.search(pattern, text)
    return float(match.group(1)) if match else 0.0


def test_a_one_mib_slice_is_created_and_updated_through_the_webhook(
    kube: ControlPlane, tmp_path: Path
) -> None:
    with running_webhook(kube, tmp_path / "webhook") as webhook:
        body = _big_slice(unique("big"), unique("pool"))
        name = body["metadata"]["name"]
        assert len(json.dumps(body, separators=(",", ":"))) > 1024 * 1024
        created = kube.kubectl("create", "-f", "-", input=json.dumps(body), check=False)
        assert created.returncode == 0, created.stderr
        assert _webhook_requests(webhook, kind="ResourceSlice", operation="CREATE", verdict="allowed") >= 1

        stored = json.loads(kube.kubectl("get", SLICES, name, "-o", "json").stdout)
        stored["spec"]["devices"][5]["attributes"][f"{DOMAIN}/index"] = {"int": 500}
        updated = kube.kubectl("replace", "-f", "-", input=json.dumps(stored), check=False)
        assert updated.returncode == 0, updated.stderr
        assert _webhook_requests(webhook, kind="ResourceSlice", operation="UPDATE", verdict="allowed") >= 1

        # The webhook read both objects of the update: a duplicate device name in the
        # ~2 MiB review is found and refused (a 413 would have let it through: Ignore).
        stored = json.loads(kube.kubectl("get", SLICES, name, "-o", "json").stdout)
        stored["spec"]["devices"][127]["name"] = "gpu-0"
        refused = kube.kubectl("replace", "-f", "-", input=json.dumps(stored), check=False)
        assert refused.returncode != 0
        assert 'admission webhook "system.validate.resource.draco.dev" denied the request' in refused.stderr
        assert 'spec.devices[127]: Duplicate value: "gpu-0"' in refused.stderr
        assert webhook.process.popen.poll() is None, webhook.process.logs()
        kube.kubectl("delete", SLICES, name)


DEVICES = """
name: gpu.draco.dev
cdiClass: gpu
devices:
- name: gpu-{index}
  count: 2
  attributes: {model: A100}
"""


def test_a_killed_webhook_blocks_user_writes_but_not_the_agent(
    kube: ControlPlane, draco_process: Callable[..., DracoProcess], namespace: str, tmp_path: Path
) -> None:
    claim = {
        "apiVersion": V,
        "kind": "ResourceClaim",
        "metadata": {"name": "held", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    with running_webhook(kube, tmp_path / "webhook") as webhook:
        kube.kubectl("create", "-f", "-", input=json.dumps(claim))
        webhook.process.kill()  # SIGKILL: the configurations stay behind

        # The node agent publishes its devices: ResourceSlice writes fail open.
        node = unique("killed")
        start_agent(draco_process, tmp_path, devices_yaml=DEVICES, node=node)
        published = wait_for(
            lambda: (s := slices_of(kube, node)) and pool_complete(s) and s,
            timeout=90,
            what="the agent's slices while the webhook is down",
        )
        assert isinstance(published, list)

        # Claim status (the operator's allocation, the agent's device status) too.
        result = {"request": "gpu", "driver": "gpu.draco.dev", "pool": node, "device": "gpu-0"}
        patched = kube.kubectl(
            "patch", CLAIMS, "held", "-n", namespace, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"allocation": {"devices": {"results": [result]}}}}),
            check=False,
        )  # fmt: skip
        assert patched.returncode == 0, patched.stderr

        # User writes of DeviceClasses (and claims) fail closed, naming the webhook.
        device_class = {
            "apiVersion": V,
            "kind": "DeviceClass",
            "metadata": {"name": unique("while-down")},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.draco.dev"'}}]},
        }
        refused = kube.kubectl("create", "-f", "-", input=json.dumps(device_class), check=False)
        assert refused.returncode != 0
        assert 'failed calling webhook "user.validate.resource.draco.dev"' in refused.stderr
        another = {**claim, "metadata": {"name": "new", "namespace": namespace}}
        refused = kube.kubectl("create", "-f", "-", input=json.dumps(another), check=False)
        assert refused.returncode != 0
        assert "failed calling webhook" in refused.stderr
