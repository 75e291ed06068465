"""draco's one seam to the Kubernetes API: a small, typed, async layer over JSON.

The operator, the webhook, the agent and the tools all talk to the API server through a
`Kube` and never touch kubernetes_asyncio themselves, so the API they depend on is the
handful of verbs below: get/list/create/replace/patch/apply/delete on any `Resource`,
status updates with optimistic concurrency, watches (see `draco.kube.watch`) and Events.
Objects are plain JSON dicts, exactly what the API server sends and what Kopf hands to
handlers, so nothing is converted twice and no field a newer server adds is lost.

Errors are mapped onto the package's tree (`draco.errors`): a 404 is `NotFoundError`, a
409 on a write with a stale resourceVersion is `ConflictError` (re-read and retry, never
overwrite), a 409 on create is `AlreadyExistsError`; no answer at all (connection refused or reset) and
429/503/504 are `APIUnavailableError` (the server is restarting or not ready: wait and
try again; `draco.kube.answers`); anything else is `KubeError` with the status, the API
server's reason and its message. A 429 or 5xx with `Retry-After` is first sent again after
that wait, as client-go does (`draco.kube.retry`). Credentials come from
`draco.kube.config` (one order for every process).

Requests go straight through the aiohttp session of the kubernetes_asyncio `ApiClient`
(its TLS context, client certificate, proxy and connection pool), with its headers and
its auth settings (a token refresh hook, as the in-cluster loader installs, runs before
every request as it does in `ApiClient.call_api`), but bodies are encoded and responses
and watch lines decoded with orjson, skipping `call_api`'s generic machinery (a
recursive walk over every body, header and query sanitizing, model deserializing):
profiling showed that machinery and `json` as a quarter of the operator's CPU under load.
"""

from __future__ import annotations

import datetime
import json
import secrets
import socket
import urllib.parse
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

import aiohttp
import orjson
from kubernetes_asyncio import client

from draco.api import constants as c
from draco.api.bodies import Body, Obj, key_of, meta_of, object_key
from draco.errors import AlreadyExistsError, ConflictError, KubeError, NotFoundError
from draco.kube.answers import CONNECTION_ERRORS, error_from_status, status_error, unanswered
from draco.kube.config import new_api_client
from draco.kube.retry import Answer, send_until_answered

__all__ = [
    "DEVICE_CLASSES",
    "DEVICE_TAINT_RULES",
    "EVENTS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "POD_DISRUPTION_BUDGETS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_QUOTAS",
    "RESOURCE_SLICES",
    "AlreadyExistsError",
    "ConflictError",
    "EventType",
    "Kube",
    "KubeError",
    "NotFoundError",
    "Obj",
    "Resource",
    "WatchEvent",
    "connect",
    "error_from_status",
    "key_of",
]

EventType = Literal["Normal", "Warning"]
_Items = list[Obj]
PatchType = Literal["merge", "json", "strategic"]

_PATCH_CONTENT_TYPES: Final = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
#: The statuses whose body is the answer (kubernetes_asyncio's response types for them).
_OBJECT_STATUSES: Final = frozenset({200, 201, 202})
#: Methods that send a body (as kubernetes_asyncio's REST client decides).
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "OPTIONS", "DELETE"})
#: kubernetes_asyncio's default for a request without `_request_timeout`: no limit (the
#: session's own default of 5 minutes in all does not apply).
_NO_TIMEOUT: Final = aiohttp.ClientTimeout()
#: The Event API limits `note` to 1 KiB.
_MAX_EVENT_NOTE: Final = 1024
_DEFAULT_FIELD_MANAGER: Final = "draco-operator"


@dataclass(frozen=True)
class Resource:
    """One kind the operator talks to, and how to build its URLs."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource is not None:
                base += f"/{subresource}"
        return base


PODS: Final = Resource("", "v1", "pods", "Pod", namespaced=True)
NODES: Final = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES: Final = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
EVENTS: Final = Resource("events.k8s.io", "v1", "events", "Event", namespaced=True)
PERSISTENT_VOLUME_CLAIMS: Final = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
PERSISTENT_VOLUMES: Final = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
STORAGE_CLASSES: Final = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
CSI_NODES: Final = Resource("storage.k8s.io", "v1", "csinodes", "CSINode", False)
CSI_DRIVERS: Final = Resource("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False)
CSI_STORAGE_CAPACITIES: Final = Resource(
    "storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", True
)
VOLUME_ATTACHMENTS: Final = Resource("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False)
SERVICES: Final = Resource("", "v1", "services", "Service", True)
REPLICATION_CONTROLLERS: Final = Resource("", "v1", "replicationcontrollers", "ReplicationController", True)
REPLICA_SETS: Final = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
STATEFUL_SETS: Final = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
POD_DISRUPTION_BUDGETS: Final = Resource(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True
)
RESOURCE_QUOTAS: Final = Resource("", "v1", "resourcequotas", "ResourceQuota", namespaced=True)
DEVICE_CLASSES: Final = Resource(c.GROUP, c.VERSION, c.PLURAL_DEVICE_CLASSES, c.KIND_DEVICE_CLASS, False)
RESOURCE_CLAIMS: Final = Resource(c.GROUP, c.VERSION, c.PLURAL_RESOURCE_CLAIMS, c.KIND_RESOURCE_CLAIM, True)
RESOURCE_CLAIM_TEMPLATES: Final = Resource(
    c.GROUP, c.VERSION, c.PLURAL_RESOURCE_CLAIM_TEMPLATES, c.KIND_RESOURCE_CLAIM_TEMPLATE, True
)
RESOURCE_SLICES: Final = Resource(c.GROUP, c.VERSION, c.PLURAL_RESOURCE_SLICES, c.KIND_RESOURCE_SLICE, False)
DEVICE_TAINT_RULES: Final = Resource(
    c.GROUP, c.VERSION, c.PLURAL_DEVICE_TAINT_RULES, c.KIND_DEVICE_TAINT_RULE, False
)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: Obj


@dataclass
class _SeenEvent:
    name: str
    namespace: str
    count: int


class Kube:
    """Async JSON access to the API server (see the module docstring)."""

    def __init__(self, api: client.ApiClient, *, field_manager: str = _DEFAULT_FIELD_MANAGER) -> None:
        """`api` is a kubernetes_asyncio client (`connect()` builds one); `field_manager`
        names this process in managedFields and is the default of `apply`."""
        self.api = api
        self.field_manager = field_manager
        self.instance = f"{field_manager}-{socket.gethostname()}"[:128]
        # Repeated identical events become one Event with a growing series count, as
        # client-go's recorder does, instead of one object per retry.
        self._seen_events: OrderedDict[tuple[str, str, str, str], _SeenEvent] = OrderedDict()
        self._owns_api = True

    def with_field_manager(self, field_manager: str) -> Kube:
        """A `Kube` over the same connection pool that writes as `field_manager` (each
        controller of a process names itself in managedFields and Events; the process
        keeps one client). Closing it leaves the shared pool open: only the `Kube` that
        `connect()` made closes it."""
        kube = Kube(self.api, field_manager=field_manager)
        kube._owns_api = False
        return kube

    async def close(self) -> None:
        if self._owns_api:
            await self.api.close()

    def _encode(self, body: Any) -> bytes:
        """`body` as JSON. orjson takes plain JSON dicts; anything else it refuses (non-str
        keys, kubernetes_asyncio models) goes through kubernetes_asyncio's own encoding."""
        try:
            return orjson.dumps(body)
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            return json.dumps(self.api.sanitize_for_serialization(body)).encode()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None,
        headers: dict[str, str],
        body: Any = None,
        client_timeout: aiohttp.ClientTimeout = _NO_TIMEOUT,
    ) -> aiohttp.ClientResponse:
        """Send one request the way `ApiClient.call_api` would (same URL, query encoding,
        headers, auth, proxy, TLS server name and timeout), without its generic machinery.
        The caller reads and releases the response."""
        api = self.api
        headers.update(api.default_headers)  # call_api lets the client's defaults win
        if api.cookie:
            headers["Cookie"] = api.cookie
        query = list(query or [])
        # The same auth settings as call_api (a refresh hook runs here, before every request).
        await api.update_params_for_auth(headers, query, ["BearerToken"])
        url = f"{api.configuration.host}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        rest = api.rest_client
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
        if rest.proxy_headers:
            extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        if body is not None and method in _BODY_METHODS:
            extra["data"] = self._encode(body)
        session: aiohttp.ClientSession = rest.pool_manager
        try:
            return await session.request(method, url, headers=headers, timeout=client_timeout, **extra)
        except CONNECTION_ERRORS as exc:
            raise unanswered(f"{method} {path}", exc) from exc

    async def _call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        headers = {"Content-Type": content_type, "Accept": "application/json"}

        async def send() -> Answer:
            response = await self._request(method, path, query=query, headers=dict(headers), body=body)
            async with response:
                try:
                    data = await response.read()
                except CONNECTION_ERRORS as exc:
                    raise unanswered(what, exc) from exc
                return Answer(response.status, response.headers, data, response.reason or "")

        answer = await send_until_answered(send, what=what)
        if not 200 <= answer.status <= 299:
            raise status_error(answer.body, code=answer.status, what=what, fallback=answer.reason)
        if answer.status not in _OBJECT_STATUSES:
            return {}
        try:
            result = orjson.loads(answer.body)
        except orjson.JSONDecodeError:
            return {}  # not JSON: call_api would have answered the text, which is no object
        return result if isinstance(result, dict) else {}

    # --- reads ---------------------------------------------------------------------------------

    async def server_version(self) -> Obj:
        """The API server's ``/version`` (``gitVersion``, ``major``, ``minor``, ...)."""
        return await self._call("GET", "/version", what="get the server version")

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        """The object, or `NotFoundError`."""
        return await self._call(
            "GET",
            resource.path(namespace=namespace, name=name),
            what=f"get {resource.kind} {object_key(namespace, name)}",
        )

    async def get_or_none(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj | None:
        try:
            return await self.get(resource, name, namespace=namespace)
        except NotFoundError:
            return None

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Every matching object (all namespaces when `namespace` is None), page by page."""
        items, _version = await self.list_with_version(
            resource, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )
        return items

    async def list_with_version(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        each: Callable[[Obj], Obj] | None = None,
    ) -> tuple[_Items, str]:
        """`list` (``each``: what to keep of an item as its page arrives) and its resourceVersion."""
        items: list[Obj] = []
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", 500)]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            page = await self._call(
                "GET", resource.path(namespace=namespace), what=f"list {resource.plural}", query=query
            )
            for item in page.get("items") or []:
                # List items come without apiVersion/kind; add them so bodies look like watch events.
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                items.append(each(item) if each is not None else item)
            # (a list's metadata is a ListMeta: continue and resourceVersion)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str((page.get("metadata") or {}).get("resourceVersion") or "")

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 240,
    ) -> AsyncIterator[WatchEvent]:
        """The events after `resource_version`, bookmarks included, until the server ends
        the watch (`timeout_seconds`). An ERROR event raises its `KubeError` (410 Gone:
        the version is too old, list again)."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        what = f"watch {resource.plural}"
        response = await self._request(
            "GET",
            resource.path(namespace=namespace),
            query=query,
            headers={"Accept": "application/json", "Content-Type": "application/json"},
            # The server ends the watch after timeout_seconds; a silent connection must not
            # hang the caller much longer than that.
            client_timeout=aiohttp.ClientTimeout(connect=30, sock_read=timeout_seconds + 30),
        )
        async with response:
            if response.status != 200:
                body = await response.read()
                raise status_error(body, code=response.status, what=what, fallback=response.reason or "")
            while True:
                line = await response.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = orjson.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise error_from_status(obj, what=what)
                if event.get("type") != "BOOKMARK":
                    obj.setdefault("apiVersion", resource.api_version)
                    obj.setdefault("kind", resource.kind)
                yield WatchEvent(type=str(event.get("type")), object=obj)

    # --- writes --------------------------------------------------------------------------------

    async def create(
        self, resource: Resource, body: Body, *, namespace: str | None = None, subresource: str | None = None
    ) -> Body:
        """Create `body` (generateName honoured; `AlreadyExistsError` on a clash), or its `subresource`."""
        meta = meta_of(body)
        namespace, named = namespace or meta.get("namespace"), meta.get("name") if subresource else None
        name = meta.get("name") or f"{meta.get('generateName', '')}*"
        answer = await self._call(
            "POST",
            resource.path(namespace=namespace, name=named, subresource=subresource),
            what=f"create {resource.kind} {object_key(namespace, name)}",
            body={"apiVersion": resource.api_version, "kind": resource.kind, **body},
            query=[("fieldManager", self.field_manager)],
        )
        return cast(Body, answer)  # the object created, so a body of the same kind

    async def replace(self, resource: Resource, body: Body, *, subresource: str | None = None) -> Body:
        """PUT `body` (Update, or UpdateStatus with `subresource="status"`).

        `body.metadata.resourceVersion` is the precondition: if the object changed since it
        was read, this raises `ConflictError` and writes nothing.
        """
        meta = meta_of(body)
        namespace, name = meta.get("namespace"), meta["name"]
        verb = "update status of" if subresource == "status" else "update"
        answer = await self._call(
            "PUT",
            resource.path(namespace=namespace, name=name, subresource=subresource),
            what=f"{verb} {resource.kind} {object_key(namespace, name)}",
            body=body,
            query=[("fieldManager", self.field_manager)],
        )
        return cast(Body, answer)  # the object written, so a body of the same kind

    async def replace_status(self, resource: Resource, body: Body) -> Body:
        """UpdateStatus with optimistic concurrency (see `replace`)."""
        return await self.replace(resource, body, subresource="status")

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> Obj:
        """PATCH with a merge, JSON or strategic-merge patch (a JSON patch may carry `test` ops)."""
        return await self._call(
            "PATCH",
            resource.path(namespace=namespace, name=name, subresource=subresource),
            what=f"patch {resource.kind} {object_key(namespace, name)}",
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            query=[("fieldManager", self.field_manager)],
        )

    async def apply(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        field_manager: str | None = None,
        force: bool = True,
        subresource: str | None = None,
    ) -> Obj:
        """Server-side apply of the fields in `body` as `field_manager` (the operator's by default).

        Fields this manager applied before and left out now are removed: always apply the
        complete set of fields the manager owns on the object.
        """
        meta = meta_of(body)
        namespace, name = meta.get("namespace"), meta["name"]
        query: list[tuple[str, Any]] = [("fieldManager", field_manager or self.field_manager)]
        if force:
            query.append(("force", "true"))
        return await self._call(
            "PATCH",
            resource.path(namespace=namespace, name=name, subresource=subresource),
            what=f"apply {resource.kind} {object_key(namespace, name)}",
            body={"apiVersion": resource.api_version, "kind": resource.kind, **body},
            content_type="application/apply-patch+yaml",
            query=query,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: Literal["Background", "Foreground", "Orphan"] | None = None,
    ) -> bool:
        """Delete the object; False if it was already gone. `uid`/`resource_version` are
        preconditions (a mismatch is `ConflictError`): delete *this* object, not a namesake."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            body["preconditions"] = preconditions
        if propagation:
            body["propagationPolicy"] = propagation
        try:
            await self._call(
                "DELETE",
                resource.path(namespace=namespace, name=name),
                what=f"delete {resource.kind} {object_key(namespace, name)}",
                body=body,
            )
        except NotFoundError:
            return False
        return True

    # --- events --------------------------------------------------------------------------------

    async def emit_event(
        self,
        obj: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        type: EventType = "Warning",
        component: str = "draco-operator",
        action: str | None = None,
        instance: str | None = None,
    ) -> None:
        """Record an Event about `obj` (events.k8s.io/v1, so `kubectl describe` shows it),
        reported by `component` from `instance` (default: the component and host name).
        The same reason and message about the same object again bumps the first Event's
        series count instead of creating another object. Failing to record an Event is
        logged by the caller's retry loop at most; it never hides the original problem."""
        meta = meta_of(obj)
        namespace = meta.get("namespace") or "default"
        note = (
            message
            if len(message.encode()) <= _MAX_EVENT_NOTE
            else message.encode()[: _MAX_EVENT_NOTE - 3].decode(errors="ignore") + "..."
        )
        dedup = (str(meta.get("uid", "")), reason, type, note)
        seen = self._seen_events.get(dedup)
        if seen is not None:
            seen.count += 1
            try:
                await self.patch(
                    EVENTS,
                    seen.name,
                    {"series": {"count": seen.count, "lastObservedTime": _now()}},
                    namespace=seen.namespace,
                )
                self._seen_events.move_to_end(dedup)
                return
            except NotFoundError:
                del self._seen_events[dedup]
        regarding = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
        }
        if meta.get("namespace"):
            regarding["namespace"] = meta["namespace"]
        event_name = f"{meta.get('name', 'object')}.{secrets.token_hex(8)}"
        await self.create(
            EVENTS,
            {
                "metadata": {"name": event_name, "namespace": namespace},
                "eventTime": _now(),
                "reportingController": component,
                "reportingInstance": (instance or f"{component}-{socket.gethostname()}")[:128],
                "action": (action or reason)[:128],
                "reason": reason[:128],
                "note": note,
                "type": type,
                "regarding": regarding,
            },
        )
        self._seen_events[dedup] = _SeenEvent(event_name, namespace, 1)
        while len(self._seen_events) > 4096:
            self._seen_events.popitem(last=False)


async def connect(*, field_manager: str = _DEFAULT_FIELD_MANAGER, connections: int | None = None) -> Kube:
    """A `Kube` for the cluster we run in (credentials in `draco.kube.config`'s order);
    ``connections`` caps its connection pool (see `new_api_client`)."""
    return Kube(await new_api_client(connections=connections), field_manager=field_manager)
