"""A node agent's Events: about a pod on its node or a claim allocated to it, and nothing
else (what the agent-events policy cannot read); routed to the webhook only for the
agents' user, failing closed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from draco.errors import KubeError
from draco.kube.client import RESOURCE_CLAIMS, Resource
from draco.webhook.agentevents import NODE_NAME_EXTRA, agent_event_refusal
from draco.webhook.configuration import Endpoint, webhook_configurations

AGENT = "system:serviceaccount:draco-system:draco-agent"
OBJECTS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("pods", "team", "here"): {"metadata": {"uid": "p1"}, "spec": {"nodeName": "node-a"}},
    ("pods", "team", "there"): {"metadata": {"uid": "p2"}, "spec": {"nodeName": "node-b"}},
    ("pods", "team", "pending"): {"metadata": {"uid": "p3"}, "spec": {}},
    ("resourceclaims", "team", "mine"): {"metadata": {"uid": "c1"}, "status": {"nodeName": "node-a"}},
    ("resourceclaims", "team", "theirs"): {"metadata": {"uid": "c2"}, "status": {"nodeName": "node-b"}},
    ("resourceclaims", "team", "free"): {"metadata": {"uid": "c3"}, "status": {}},
}


async def read(resource: Resource, name: str, namespace: str) -> Mapping[str, Any] | None:
    return OBJECTS.get((resource.plural, namespace, name))


def event(kind: str, name: str, uid: str, *, api_version: str = "v1") -> dict[str, Any]:
    return {
        "regarding": {"apiVersion": api_version, "kind": kind, "namespace": "team", "name": name, "uid": uid}
    }


def claim_event(name: str, uid: str) -> dict[str, Any]:
    return event("ResourceClaim", name, uid, api_version=RESOURCE_CLAIMS.api_version)


ON_NODE_A = {"username": AGENT, "extra": {NODE_NAME_EXTRA: ["node-a"]}}
WHO = "the agent on node node-a"


@pytest.mark.parametrize(
    ("body", "refusal"),
    [
        (event("Pod", "here", "p1"), None),
        (claim_event("mine", "c1"), None),
        (
            event("Pod", "there", "p2"),
            f"{WHO} may not write an Event about Pod team/there, which is not on its node",
        ),
        (
            event("Pod", "pending", "p3"),
            f"{WHO} may not write an Event about Pod team/pending, which is not on its node",
        ),
        (
            claim_event("theirs", "c2"),
            f"{WHO} may not write an Event about ResourceClaim team/theirs, which is allocated to node node-b",
        ),
        (
            claim_event("free", "c3"),
            f"{WHO} may not write an Event about ResourceClaim team/free, which is not allocated to a node",
        ),
        (
            event("Pod", "here", "old-uid"),
            f"{WHO} may not write an Event about Pod team/here of uid old-uid: the Pod of that name is another one",
        ),
        (
            event("Pod", "gone", "p9"),
            f"{WHO} may not write an Event about Pod team/gone, which does not exist",
        ),
        (
            event("ResourceClaim", "mine", "c1", api_version="resource.k8s.io/v1"),
            f"{WHO} may write Events only about Pods and ResourceClaims, not about ResourceClaim",
        ),
        (
            event("Secret", "token", "s1"),
            f"{WHO} may write Events only about Pods and ResourceClaims, not about Secret",
        ),
        ({}, f"{WHO} may write Events only about Pods and ResourceClaims, not about nothing"),
    ],
)
async def test_an_agent_writes_events_only_about_its_nodes_pods_and_claims(
    body: dict[str, Any], refusal: str | None
) -> None:
    assert await agent_event_refusal(body, userinfo=ON_NODE_A, read=read) == refusal


async def test_a_token_without_a_node_writes_no_event() -> None:
    refusal = await agent_event_refusal(event("Pod", "here", "p1"), userinfo={"username": AGENT}, read=read)
    assert refusal == "the agent's token carries no node name (it must be the token of a pod on a node)"


async def test_an_unreadable_object_refuses_the_event() -> None:
    async def broken(resource: Resource, name: str, namespace: str) -> Mapping[str, Any] | None:
        raise KubeError("forbidden", status=403)

    refusal = await agent_event_refusal(event("Pod", "here", "p1"), userinfo=ON_NODE_A, read=broken)
    assert refusal is not None and refusal.startswith("could not read Pod team/here to check")


def test_only_the_agents_events_are_sent_and_they_fail_closed() -> None:
    (validating, _) = webhook_configurations(Endpoint(url="https://127.0.0.1:9443", ca_bundle=b"PEM"))
    assert not [w for w in validating["webhooks"] if w["name"].startswith("agent-events.")]
    (validating, _) = webhook_configurations(
        Endpoint(url="https://127.0.0.1:9443", ca_bundle=b"PEM"), agent_users=(AGENT,)
    )
    (hook,) = [w for w in validating["webhooks"] if w["name"] == "agent-events.validate.resource.draco.dev"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443/validate-agent-events"
    assert hook["rules"] == [
        {
            "apiGroups": ["events.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["events"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    assert hook["matchConditions"] == [
        {"name": "a-node-agent", "expression": f"request.userInfo.username in ['{AGENT}']"}
    ]
