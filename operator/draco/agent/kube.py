"""The agent's narrow view of the Kubernetes API: slices, claims and nodes, as dicts.

Objects stay plain JSON dicts here: the agent writes what the API returned back to it
(with its resourceVersion), and a dict loses no field a newer server adds. `list_watch`
is the informer loop: list, then watch from the list's resourceVersion, re-list on 410
Gone, back off on errors; every event goes to the callbacks in order.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from draco.api.constants import GROUP, PLURAL_RESOURCE_CLAIMS, PLURAL_RESOURCE_SLICES, VERSION
from draco.logs import get_logger

__all__ = ["ApiException", "Kube", "connect", "status_of"]

log = get_logger(__name__)

_MERGE_PATCH: Final = "application/merge-patch+json"
_WATCH_TIMEOUT_S: Final = 240
_NODE_LIFECYCLE_TAINTS: Final = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})

Obj = dict[str, Any]


def status_of(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, ApiException) else None


async def connect() -> client.ApiClient:
    """An API client from $KUBECONFIG (or ~/.kube/config), else the in-cluster account."""
    # $KUBECONFIG is read now, not when kubernetes_asyncio was imported.
    try:
        await config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    except config.ConfigException:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        # The generated clients' annotations ask for model objects; the agent speaks dicts.
        self.custom: Any = client.CustomObjectsApi(api)
        self.core: Any = client.CoreV1Api(api)

    async def close(self) -> None:
        await self.api.close()

    # ---- ResourceSlices (cluster-scoped)

    async def create_slice(self, body: Obj) -> Obj:
        result: Obj = await self.custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL_RESOURCE_SLICES, body
        )
        return result

    async def replace_slice(self, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        result: Obj = await self.custom.replace_cluster_custom_object(
            GROUP, VERSION, PLURAL_RESOURCE_SLICES, name, body
        )
        return result

    async def delete_slice(self, name: str, *, resource_version: str | None = None) -> None:
        body = {"preconditions": {"resourceVersion": resource_version}} if resource_version else None
        await self.custom.delete_cluster_custom_object(
            GROUP, VERSION, PLURAL_RESOURCE_SLICES, name, body=body
        )

    def list_slices(self, **kwargs: Any) -> Awaitable[Obj]:
        # A plain function (not `async def`): `watch.Watch().stream` calls it with watch=True.
        listing: Awaitable[Obj] = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL_RESOURCE_SLICES, **kwargs
        )
        return listing

    # ---- ResourceClaims (namespaced, status subresource)

    def list_claims(self, **kwargs: Any) -> Awaitable[Obj]:
        listing: Awaitable[Obj] = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL_RESOURCE_CLAIMS, **kwargs
        )
        return listing

    async def get_claim(self, namespace: str, name: str) -> Obj:
        result: Obj = await self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL_RESOURCE_CLAIMS, name
        )
        return result

    async def patch_claim_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        """A merge patch of the status; put `metadata.resourceVersion` in `patch` to make it
        conditional (409 Conflict when the claim changed since)."""
        result: Obj = await self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL_RESOURCE_CLAIMS, name, patch, _content_type=_MERGE_PATCH
        )
        return result

    # ---- Nodes

    async def node_uid(self, name: str) -> str | None:
        try:
            node = await self.core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return str(node.metadata.uid)

    async def ensure_node(self, name: str, *, labels: Mapping[str, str]) -> str:
        """Create a Node object (for clusters without kubelets) unless it exists; its uid."""
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        }
        try:
            node = await self.core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            uid = await self.node_uid(name)
            assert uid is not None
            return uid
        status = {
            "status": {
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "simulated by draco agent",
                    }
                ],
            }
        }
        await self.core.patch_node_status(name, status, _content_type=_MERGE_PATCH)
        # The API server taints new nodes not-ready; the node lifecycle controller would lift
        # that once the kubelet reports Ready. There is neither here, so the agent does it.
        taints = [t for t in node.spec.taints or [] if t.key not in _NODE_LIFECYCLE_TAINTS]
        await self.core.patch_node(
            name,
            {"spec": {"taints": [self.api.sanitize_for_serialization(t) for t in taints] or None}},
            _content_type=_MERGE_PATCH,
        )
        return str(node.metadata.uid)


async def list_watch(
    list_fn: Callable[..., Awaitable[Obj]],
    *,
    on_list: Callable[[list[Obj]], Awaitable[None] | None],
    on_event: Callable[[str, Obj], Awaitable[None] | None],
    what: str,
    **kwargs: Any,
) -> None:
    """List then watch forever (until cancelled), handing objects to the callbacks."""
    backoff = 0.5
    while True:
        try:
            listed = await list_fn(**kwargs)
            version = str(listed["metadata"]["resourceVersion"])
            maybe = on_list(list(listed.get("items") or []))
            if maybe is not None:
                await maybe
            backoff = 0.5
            while True:
                # kubernetes_asyncio raises ApiException for ERROR events (410 Gone: re-list);
                # a normal end (the server's timeout) means: watch on from `version`.
                async with watch.Watch().stream(
                    list_fn,
                    resource_version=version,
                    timeout_seconds=_WATCH_TIMEOUT_S,
                    allow_watch_bookmarks=True,
                    **kwargs,
                ) as stream:
                    async for event in stream:
                        kind = event["type"]
                        obj = event["object"]
                        version = str(obj["metadata"]["resourceVersion"])
                        if kind == "BOOKMARK":
                            continue
                        maybe = on_event(kind, obj)
                        if maybe is not None:
                            await maybe
        except asyncio.CancelledError:
            raise
        except ApiException as exc:
            if exc.status == 410:
                log.info("Watch expired; listing again", what=what)
            else:
                log.warning("Watch failed; retrying", what=what, status=exc.status, reason=exc.reason)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10)
        except Exception as exc:
            log.warning("Watch failed; retrying", what=what, error=repr(exc))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10)
