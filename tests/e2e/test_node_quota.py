"""Device quota on the real node: a ResourceQuota entry for a draco class limits its devices.

The webhook (registered as a cluster registers it) charges every claim being created to
its namespace's quotas; the operator keeps ``status.used`` of draco's entries. A claim past
the limit is refused with upstream's 403 (``exceeded quota: ...``); a pod whose template
claim is refused gets upstream's Warning Event ``FailedResourceClaimCreation`` naming the
quota, stays gated, and runs once the limit is raised.

Twice: with every writer going through the validating webhook, and configured as the
chart configures it, the operator exempt from it and its claims sent to the quota-only
webhook (here the test's own user is the exempt one, so its claims take that path too).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from draco.api.quota import quota_entry
from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import Node
from tests.e2e.node_support import NodeTest
from tests.e2e.support import DracoProcess, running_webhook, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(params=[(), ("admin",)], ids=["validated", "exempt"])
def world(
    kube: ControlPlane,
    node: Node,
    namespace: str,
    draco_process: Callable[..., DracoProcess],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[NodeTest]:
    with running_webhook(
        kube,
        tmp_path / "webhook",
        exempt_users=request.param,
        answered=lambda: quota_refuses(kube, namespace),
    ):
        test = NodeTest(
            kube=kube, node=node, namespace=namespace, draco_process=draco_process, tmp_path=tmp_path
        )
        yield test.start()
        kube.kubectl(
            "delete", "pods", "--all", "-n", namespace, "--grace-period=1", "--wait=false", check=False
        )


def quota_refuses(kube: ControlPlane, namespace: str) -> bool:
    """Whether the webhook answers: a dry-run claim of a class its namespace's quota has
    not counted yet is refused (by `quota.validate` too, which sees the exempt users)."""
    probe = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"hard": {quota_entry("probe"): "0"}},
    }
    kube.kubectl("apply", "-f", "-", input=json.dumps(probe))
    claim = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "probe"}}]}},
    }
    result = kube.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(claim), check=False)
    return "denied the request" in result.stderr


def used(world: NodeTest, entry: str) -> str | None:
    out = world.kube.kubectl("get", "resourcequota", "-n", world.namespace, "gpus", "-o", "json")
    return ((json.loads(out.stdout).get("status") or {}).get("used") or {}).get(entry)


def claim(world: NodeTest, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": world.namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": world.device_class}}]}
        },
    }


def events(world: NodeTest, pod: str, reason: str) -> list[str]:
    out = world.kube.kubectl(
        "get", "events", "-n", world.namespace, "--field-selector", f"involvedObject.name={pod}", "-o", "json"
    )
    return [e.get("message", "") for e in json.loads(out.stdout)["items"] if e.get("reason") == reason]


def test_quota_refuses_devices_past_the_limit_for_claims_and_templates(world: NodeTest) -> None:
    entry = quota_entry(world.device_class)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": world.namespace},
        "spec": {"hard": {entry: "1"}},
    }
    world.kube.kubectl("create", "-f", "-", input=json.dumps(quota))
    wait_for(lambda: used(world, entry) == "0", timeout=60, what="the operator to count the quota")

    world.kube.kubectl("create", "-f", "-", input=json.dumps(claim(world, "first")))
    assert used(world, entry) == "1"  # charged at admission, before the claim exists
    refused = world.kube.kubectl("create", "-f", "-", input=json.dumps(claim(world, "second")), check=False)
    assert refused.returncode != 0
    assert "(Forbidden)" in refused.stderr, refused.stderr
    assert (
        f"exceeded quota: gpus, requested: {entry}=1, used: {entry}=1, limited: {entry}=1" in refused.stderr
    )
    assert used(world, entry) == "1"

    # A pod's template claim: refused the same way, which the pod's Events say; it waits.
    world.create_pod("pod", claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    messages = wait_for(
        lambda: events(world, "pod", "FailedResourceClaimCreation"),
        timeout=60,
        what="the pod's FailedResourceClaimCreation event",
    )
    assert isinstance(messages, list) and any("exceeded quota: gpus" in m for m in messages), messages
    assert world.pod("pod")["spec"].get("schedulingGates"), "a pod without its claim must stay gated"

    # Room made by raising the limit: the pod gets its claim and runs.
    world.kube.kubectl(
        "patch", "resourcequota", "-n", world.namespace, "gpus", "--type=merge",
        "-p", json.dumps({"spec": {"hard": {entry: "2"}}}),
    )  # fmt: skip
    world.wait_running("pod")
    wait_for(lambda: used(world, entry) == "2", timeout=60, what="the quota to count both claims")

    # A claim deleted gives its devices back.
    world.kube.kubectl("delete", "resourceclaims.resource.draco.dev", "-n", world.namespace, "first")
    wait_for(lambda: used(world, entry) == "1", timeout=60, what="the quota to give back the deleted claim")
