"""An in-memory API server for the controllers' unit tests, as upstream tests its controllers
against client-go's fake clientset (an object tracker behind the real client).

:class:`FakeKube` is `draco.kube.client.Kube` with its one request method answered from
memory, so every verb the controllers use runs the client's own code above it (Events and
their series, ``generateName``, typed errors): GET, LIST, WATCH, POST, PUT (with the
resourceVersion precondition; ``/status`` writes only the status), PATCH (merge, strategic
merge of conditions, JSON patch, server-side apply as a merge; ``metadata.resourceVersion``
and ``metadata.uid`` in a patch are preconditions), DELETE (uid/resourceVersion
preconditions; an object with finalizers gets a ``deletionTimestamp`` and goes once they
are removed). Watches start at a resourceVersion and end with ``410 Gone`` when that
version is older than what the store still remembers (:meth:`FakeAPI.compact`): what a
restarted API server does to every watch, so an informer lists again.

What it leaves out: admission, validation, garbage collection of owned objects, field
selectors (every watch and list is of a whole kind or namespace), and grace periods (a
pod is deleted at once, as one without a node is).
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import jsonpatch

from draco.kube import client as k
from draco.kube.answers import error_from_status
from draco.kube.client import Kube, Obj, Resource, WatchEvent
from draco.operator.informers import POD_GROUPS, RESOURCE_POOL_STATUS_REQUESTS

__all__ = ["RESOURCES", "FakeAPI", "FakeKube"]

#: Every kind draco's client names, by plural.
RESOURCES: dict[str, Resource] = {
    value.plural: value for value in vars(k).values() if isinstance(value, Resource)
} | {POD_GROUPS.plural: POD_GROUPS, RESOURCE_POOL_STATUS_REQUESTS.plural: RESOURCE_POOL_STATUS_REQUESTS}
#: Kinds whose status is written through ``/status`` only.
_STATUS_SUBRESOURCE = {
    "pods",
    "nodes",
    "resourcequotas",
    "resourceclaims",
    "deviceclasses",
    "devicetaintrules",
    "namespaces",
    "persistentvolumeclaims",
    "persistentvolumes",
    "podgroups",
    "resourcepoolstatusrequests",
}
Key = tuple[str, str, str]  # plural, namespace ("" when cluster-scoped), name


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(target: Any, patch: Any, *, strategic: bool = False) -> Any:
    """RFC 7386 merge patch; with `strategic`, lists of objects with a ``type`` (conditions)
    merge by it, as strategic merge does for pods' conditions."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif (
            strategic and isinstance(value, list) and all(isinstance(v, dict) and "type" in v for v in value)
        ):
            merged = {item.get("type"): item for item in result.get(key) or [] if isinstance(item, dict)}
            for item in value:
                merged[item["type"]] = _merge(merged.get(item["type"], {}), item)
            result[key] = list(merged.values())
        else:
            result[key] = _merge(result.get(key), value, strategic=strategic)
    return result


@dataclass
class FakeAPI:
    """The objects and their history (shared by every `FakeKube` over it)."""

    objects: dict[Key, Obj] = field(default_factory=dict)
    #: Every change: (resourceVersion, plural, namespace, type, object).
    history: list[tuple[int, str, str, str, Obj]] = field(default_factory=list)
    #: Watches from before this resourceVersion end with 410 Gone.
    oldest: int = 0
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Condition | None = None
    #: Every request: (method, plural, subresource, namespace, name).
    requests: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    # --- for tests --------------------------------------------------------------------------

    def put(self, resource: Resource, obj: Obj) -> Obj:
        """Store `obj` as if created (a test's fixture)."""
        return self._create(resource, copy.deepcopy(obj))

    def get(self, resource: Resource, name: str, namespace: str = "") -> Obj | None:
        found = self.objects.get((resource.plural, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def all(self, resource: Resource) -> list[Obj]:
        return [
            copy.deepcopy(o)
            for (plural, _, _), o in sorted(self.objects.items())
            if plural == resource.plural
        ]

    def events(self, reason: str | None = None) -> list[Obj]:
        return [e for e in self.all(k.EVENTS) if reason is None or e.get("reason") == reason]

    def compact(self) -> None:
        """Forget the history: every watch from before now ends with 410 Gone, as after a
        restart of the API server (its new watch cache begins now)."""
        self.oldest = self.version
        self.history.clear()
        self._notify()

    @property
    def version(self) -> int:
        return self.history[-1][0] if self.history else self.oldest

    # --- the store --------------------------------------------------------------------------

    def _record(self, plural: str, namespace: str, type_: str, obj: Obj) -> None:
        version = next(self._versions)
        obj["metadata"]["resourceVersion"] = str(version)
        self.history.append((version, plural, namespace, type_, copy.deepcopy(obj)))
        self._notify()

    def _notify(self) -> None:
        if self._changed is None:
            return
        changed = self._changed

        async def wake() -> None:
            async with changed:
                changed.notify_all()

        asyncio.get_running_loop().create_task(wake())

    def condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def _create(self, resource: Resource, body: Obj) -> Obj:
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', '')}{uuid.uuid4().hex[:5]}"
        namespace = str(meta.get("namespace") or "") if resource.namespaced else ""
        key = (resource.plural, namespace, meta["name"])
        if key in self.objects:
            raise _error(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists')
        body["apiVersion"], body["kind"] = resource.api_version, resource.kind
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        meta.pop("deletionTimestamp", None)
        self.objects[key] = body
        self._record(resource.plural, namespace, "ADDED", body)
        return copy.deepcopy(body)

    def _write(self, resource: Resource, key: Key, new: Obj) -> Obj:
        """Store `new` over the object at `key` (MODIFIED), or remove it when its deletion
        waited only for finalizers that are now gone (DELETED)."""
        old = self.objects[key]
        if (new.get("spec") != old.get("spec")) and "generation" in old["metadata"]:
            new["metadata"]["generation"] = int(old["metadata"]["generation"]) + 1
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self.objects[key]
            self._record(key[0], key[1], "DELETED", new)
            return copy.deepcopy(new)
        self.objects[key] = new
        self._record(key[0], key[1], "MODIFIED", new)
        return copy.deepcopy(new)

    def update(self, resource: Resource, key: Key, body: Obj, *, subresource: str | None) -> Obj:
        old = self._existing(resource, key)
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise _error(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version",
            )
        return self._write(resource, key, _updated(resource, old, body, subresource=subresource))

    def patch(self, resource: Resource, key: Key, patch: Any, *, kind: str, subresource: str | None) -> Obj:
        old = self._existing(resource, key)
        if kind == "json":
            patched = jsonpatch.apply_patch(old, patch)
        else:
            meta = (patch.get("metadata") or {}) if isinstance(patch, dict) else {}
            for precondition in ("resourceVersion", "uid"):
                if meta.get(precondition) and meta[precondition] != old["metadata"].get(precondition):
                    raise _error(409, "Conflict", f"Precondition failed: {precondition} in the patch differs")
            patched = _merge(old, patch, strategic=kind == "strategic")
        return self._write(resource, key, _updated(resource, old, patched, subresource=subresource))

    def delete(self, resource: Resource, key: Key, options: Obj) -> None:
        old = self._existing(resource, key)
        for precondition, wanted in (options.get("preconditions") or {}).items():
            if wanted != old["metadata"].get(precondition):
                raise _error(409, "Conflict", f"Precondition failed: {precondition}")
        if old["metadata"].get("finalizers"):
            if not old["metadata"].get("deletionTimestamp"):
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = _now()
                self._write(resource, key, new)
            return
        del self.objects[key]
        self._record(key[0], key[1], "DELETED", copy.deepcopy(old))

    def _existing(self, resource: Resource, key: Key) -> Obj:
        found = self.objects.get(key)
        if found is None:
            raise _error(404, "NotFound", f'{resource.plural} "{key[2]}" not found')
        return found


def _updated(resource: Resource, old: Obj, body: Obj, *, subresource: str | None) -> Obj:
    """What an update of `old` with `body` stores: ``/status`` takes only the status; the
    main resource keeps the status where it has a status subresource; identity stays."""
    if subresource == "status":
        new = copy.deepcopy(old)
        if "status" in body:
            new["status"] = copy.deepcopy(body["status"])
        return new
    new = copy.deepcopy(body)
    if resource.plural in _STATUS_SUBRESOURCE:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    meta = new.setdefault("metadata", {})
    for kept in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "name", "namespace"):
        if kept in old["metadata"]:
            meta[kept] = old["metadata"][kept]
    new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
    return new


def _error(code: int, reason: str, message: str) -> Exception:
    return error_from_status({"reason": reason, "message": message, "code": code}, what="fake API", code=code)


def _parse(path: str) -> tuple[Resource, str, str, str | None]:
    """A request path as (resource, namespace, name, subresource)."""
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]
    namespace = ""
    if parts[0] == "namespaces" and len(parts) >= 3 and parts[2] in RESOURCES:
        namespace, parts = parts[1], parts[2:]
    resource = RESOURCES[parts[0]]
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else None
    return resource, namespace, name, subresource


_PATCH_KINDS = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
}


class FakeKube(Kube):
    """`Kube` over a `FakeAPI` (see the module docstring)."""

    def __init__(self, api: FakeAPI | None = None, *, field_manager: str = "draco-test") -> None:
        self.fake = api if api is not None else FakeAPI()
        self.field_manager = field_manager
        self.instance = field_manager
        self._seen_events = OrderedDict()
        self._owns_api = False

    def with_field_manager(self, field_manager: str) -> Kube:
        return FakeKube(self.fake, field_manager=field_manager)

    async def close(self) -> None:
        return None

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
        if path == "/version":
            return {"major": "1", "minor": "37", "gitVersion": "v1.37.1"}
        resource, namespace, name, subresource = _parse(path)
        fake = self.fake
        fake.requests.append((method, resource.plural, subresource or "", namespace, name))
        key = (resource.plural, namespace if resource.namespaced else "", name)
        await asyncio.sleep(0)  # an answer is never immediate
        if method == "GET" and name:
            return copy.deepcopy(fake._existing(resource, key))
        if method == "GET":
            items = [
                copy.deepcopy(obj)
                for (plural, ns, _), obj in sorted(fake.objects.items())
                if plural == resource.plural and (not namespace or ns == namespace)
            ]
            return {"items": items, "metadata": {"resourceVersion": str(fake.version)}}
        if method == "POST":
            return fake._create(resource, copy.deepcopy(cast(Obj, body)))
        if method == "PUT":
            return fake.update(resource, key, cast(Obj, body), subresource=subresource)
        if method == "PATCH":
            kind = _PATCH_KINDS[content_type]
            patch = body
            if kind == "apply":
                patch = {k: v for k, v in cast(Obj, body).items() if k not in ("apiVersion", "kind")}
            return fake.patch(resource, key, patch, kind=kind, subresource=subresource)
        if method == "DELETE":
            fake.delete(resource, key, cast(Obj, body or {}))
            return {}
        raise AssertionError(f"the fake API has no {method}")

    async def watch(  # type: ignore[override]
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 240,
    ) -> AsyncIterator[WatchEvent]:
        fake = self.fake
        since = int(resource_version or 0)
        condition = fake.condition()
        deadline = asyncio.get_running_loop().time() + timeout_seconds
        while True:
            if since < fake.oldest:
                raise _error(410, "Expired", "too old resource version")
            for version, plural, ns, type_, obj in list(fake.history):
                if version <= since:
                    continue
                since = version
                if plural == resource.plural and (not namespace or ns == namespace):
                    yield WatchEvent(type=type_, object=copy.deepcopy(obj))
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            async with condition:
                try:
                    await asyncio.wait_for(condition.wait(), timeout=left)
                except TimeoutError:
                    return
