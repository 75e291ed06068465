"""A node agent's Events are about its own node's pods and claims: what CEL cannot check.

RBAC lets the agent create and patch Events, and the chart's policy
`<release>-agent-events` keeps what an agent's request *says* to its kind of Event (about
a Pod or a draco ResourceClaim, in that object's namespace, reported from its node). Which
node the pod is on, or the claim is allocated to, only the API knows: the webhook
`agent-events.validate` (sent only the agent's requests, `--agent-user`) reads the
regarded object and refuses an Event about a pod of another node (`spec.nodeName`), a
claim allocated elsewhere or nowhere (`status.nodeName`), or an object that is not the one
named (another uid: deleted and made again). The node is the one bound into the agent's
token (`authentication.kubernetes.io/node-name`, as the policies read it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import aiohttp

from draco.errors import KubeError
from draco.kube.client import PODS, RESOURCE_CLAIMS, Kube, Resource

__all__ = ["NODE_NAME_EXTRA", "Reader", "agent_event_refusal", "object_reader", "token_node"]

#: Where kube-apiserver puts the node of a pod-bound ServiceAccount token.
NODE_NAME_EXTRA: Final = "authentication.kubernetes.io/node-name"

#: Reads one object (None: it does not exist).
Reader = Callable[[Resource, str, str], Awaitable[Mapping[str, Any] | None]]


def object_reader(kube: Kube) -> Reader:
    """Live reads through `kube` (a cache could be older than the pod the Event is about)."""

    async def read(resource: Resource, name: str, namespace: str) -> Mapping[str, Any] | None:
        return await kube.get_or_none(resource, name, namespace=namespace)

    return read


def token_node(userinfo: Mapping[str, Any] | None) -> str:
    """The node name bound into the requester's token ('' when none is)."""
    values = ((userinfo or {}).get("extra") or {}).get(NODE_NAME_EXTRA) or []
    return str(values[0]) if values else ""


async def agent_event_refusal(
    event: Mapping[str, Any], *, userinfo: Mapping[str, Any] | None, read: Reader
) -> str | None:
    """Why the agent may not write `event` (None: it may)."""
    node = token_node(userinfo)
    if not node:
        return "the agent's token carries no node name (it must be the token of a pod on a node)"
    regarding = event.get("regarding") or {}
    kind = str(regarding.get("kind") or "")
    namespace = str(regarding.get("namespace") or "")
    name = str(regarding.get("name") or "")
    who = f"the agent on node {node}"
    if kind == "Pod":
        resource = PODS
    elif kind == "ResourceClaim" and str(regarding.get("apiVersion") or "").startswith(
        RESOURCE_CLAIMS.group + "/"
    ):
        resource = RESOURCE_CLAIMS
    else:
        return f"{who} may write Events only about Pods and ResourceClaims, not about {kind or 'nothing'}"
    target = f"{kind} {namespace}/{name}"
    try:
        found = await read(resource, name, namespace)
    except (KubeError, aiohttp.ClientError, TimeoutError) as err:
        return f"could not read {target} to check {who} may write an Event about it: {err}"
    if found is None:
        return f"{who} may not write an Event about {target}, which does not exist"
    uid = str(regarding.get("uid") or "")
    if uid and (found.get("metadata") or {}).get("uid") != uid:
        return f"{who} may not write an Event about {target} of uid {uid}: the {kind} of that name is another one"
    if resource is PODS:
        where = str((found.get("spec") or {}).get("nodeName") or "")
        if where != node:
            return f"{who} may not write an Event about {target}, which is not on its node"
        return None
    where = str((found.get("status") or {}).get("nodeName") or "")
    if where != node:
        allocated = f"allocated to node {where}" if where else "not allocated to a node"
        return f"{who} may not write an Event about {target}, which is {allocated}"
    return None
