"""Informers: one LIST and WATCH per kind, one cache, and every consumer fed from it in order.

Why the operator has these instead of Kopf's watches for pods and claims: which devices
are in use is derived from what the operator knows of claims, so that knowledge must end
up equal to the API's whatever happens while the operator starts or reconnects. Kopf
cannot give that. Its watches start only after every startup handler has run, with a
LIST of their own, so objects deleted between a startup handler's LIST and Kopf's are
never reported deleted; after a 410 Kopf lists again and reports what exists, never what
went away; and it hands events of different objects to different workers, so their order
is lost. After a restart that left claims of finished pods to clean up, the lifecycle
deleted some of them exactly in that gap, and the scheduler kept their devices counted
in use for good: pods waited beside free devices.

An :class:`Informer` is client-go's reflector and store, reduced to what the operator
needs:

- The first LIST of each scope (a namespace, or the whole cluster) fills the cache, and
  the WATCH of that scope starts at the LIST's resourceVersion, so nothing that happens
  between the two is lost: it arrives as events.
- A LIST replaces what the cache holds of its scope: an object missing from it is
  reported DELETED with its last known state (unless the cache holds a state newer than
  the LIST, which only our own writes can give). That covers a 410 (the WATCH is too
  old: list again) and any deletion the watch never delivered.
- Consumers subscribe with a handler ``handler(type, obj)`` (``ADDED``, ``MODIFIED``,
  ``DELETED``), called synchronously, in resourceVersion order, for every change; one
  subscribing late first gets the cache as ``ADDED``. A consumer's own state is thus a
  function of the cache: there is no second tally to drift from it.
- :meth:`Informer.assume` puts the API's answer to our own write into the cache at once
  (upstream's assume cache), so consumers see it before its watch event; an answer about
  an object the cache already knows deleted, or older than the cache's state, is ignored.
- Indexes (client-go's indexers): :meth:`Informer.add_index` names a function from a
  cached object to the values it is found under (a pod under the claims it names, a claim
  under the pods that own it); :meth:`Informer.by_index` answers from the cache. An index
  is updated with the cache, before any handler hears of the change, so a handler that
  reads an index reads it consistent with the object it is handed. Consumers look things
  up here instead of keeping their own copies of the objects.
- :meth:`Informer.was_deleted` says whether an object (by UID) was seen deleted lately:
  the tombstones that keep late answers from reviving one, read by the consumers that
  must tell "gone" from "not seen yet".

Handlers run on the event loop and must not block; an exception in one is logged and the
others still run.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Generic, Literal, Protocol, cast

from draco.api.bodies import Body, meta_of
from draco.errors import KubeError
from draco.kube.client import Obj, Resource, WatchEvent, key_of
from draco.logs import get_logger

__all__ = ["Body", "ChangeType", "Handler", "IndexFunc", "Informer", "Source", "resource_version"]

log = get_logger(__name__)

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]
Handler = Callable[[ChangeType, Body], None]
#: What an index finds a cached object under (none: it is not in that index).
IndexFunc = Callable[[Body], Iterable[str]]

#: How long the server keeps one watch request open (jittered so watches do not all end together).
WATCH_TIMEOUT_S: Final = 270
#: UIDs of deleted objects remembered, so that a late answer to our own write cannot revive one.
TOMBSTONES: Final = 10_000
_BACKOFF_START_S: Final = 0.5
_BACKOFF_MAX_S: Final = 10.0


class Source(Protocol):
    """What an informer reads (``kube.client.Kube`` is one)."""

    async def list_with_version(
        self, resource: Resource, *, namespace: str | None = None, each: Callable[[Obj], Obj] | None = None
    ) -> tuple[list[Obj], str]:
        """Every object of ``resource`` (each as ``each`` makes it, page by page, so that a
        LIST of thousands is never held whole and decoded), and the LIST's resourceVersion."""
        ...

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        timeout_seconds: int = ...,
    ) -> AsyncIterator[WatchEvent]: ...


def resource_version(obj: Mapping[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd revisions; 0 when absent)."""
    text = meta_of(obj).get("resourceVersion") or "0"
    try:
        return int(text)
    except ValueError:
        return 0


def _uid(obj: Mapping[str, Any]) -> str:
    return str(meta_of(obj).get("uid") or "")


def _namespace(obj: Mapping[str, Any]) -> str:
    return str(meta_of(obj).get("namespace") or "")


class Informer(Generic[Body]):
    """The cache of one kind (see the module docstring), its objects typed as ``Body``
    (``Informer[PodBody]``): what the API sends is cast to it, never checked or copied.

    ``scopes`` are what is listed and watched: namespaces, or None for the whole cluster
    (the default; the only choice for a cluster-scoped resource). ``serves``, when given,
    keeps only the objects whose namespace it accepts (for namespace patterns, watched
    cluster-wide). ``trim``, when given, is what the cache keeps of each object; handlers
    get that cached form of an added or changed object too (and the whole object of a
    DELETED event), so it must keep what they read.
    """

    def __init__(
        self,
        source: Source,
        resource: Resource,
        *,
        scopes: Iterable[str | None] = (None,),
        serves: Callable[[str], bool] | None = None,
        trim: Callable[[Body], Body] | None = None,
    ) -> None:
        self.source = source
        self.resource = resource
        self.scopes: tuple[str | None, ...] = tuple(scopes) if resource.namespaced else (None,)
        self._serves_namespace = serves
        self._trim = trim
        self._objects: dict[str, Body] = {}
        self._versions: dict[str, int] = {}
        self._tombstones: OrderedDict[str, None] = OrderedDict()
        self._handlers: list[Handler[Body]] = []
        #: Per index: its function, value -> keys, and key -> the values it is under now.
        self._index_funcs: dict[str, IndexFunc[Body]] = {}
        self._indexes: dict[str, dict[str, set[str]]] = {}
        self._indexed: dict[str, dict[str, tuple[str, ...]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        #: True once every scope has been listed.
        self.synced = False

    # --- reading ---------------------------------------------------------------------------------

    def get(self, key: str) -> Body | None:
        return self._objects.get(key)

    def values(self) -> Iterator[Body]:
        yield from list(self._objects.values())

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def add_index(self, name: str, func: IndexFunc[Body]) -> None:
        """Keep index ``name``: every cached object under the values ``func`` gives for it
        (computed on the cached form, see ``trim``)."""
        if name in self._index_funcs:
            raise ValueError(f"index {name!r} exists already")
        self._index_funcs[name] = func
        self._indexes[name] = {}
        self._indexed[name] = {}
        for key, obj in self._objects.items():
            self._index_one(name, key, obj)

    def keys_by(self, name: str, value: str) -> set[str]:
        """Keys of the cached objects under ``value`` in index ``name`` (a copy)."""
        return set(self._indexes[name].get(value, ()))

    def by_index(self, name: str, value: str) -> list[Body]:
        """The cached objects under ``value`` in index ``name``, by key."""
        return [self._objects[key] for key in sorted(self._indexes[name].get(value, ()))]

    def was_deleted(self, uid: str) -> bool:
        """Whether the object with ``uid`` was seen deleted (among the last
        :data:`TOMBSTONES` deletions): gone for good, not merely unseen yet."""
        return bool(uid) and uid in self._tombstones

    def subscribe(self, handler: Handler[Body], *, replay: bool = True) -> None:
        """Call ``handler`` for every change from now on, after handing it every object
        the cache holds now as ``ADDED`` (nothing is awaited in between). ``replay=False``
        skips that for a caller that has just read :meth:`values` itself, with no
        ``await`` since."""
        if replay:
            for obj in list(self._objects.values()):
                handler("ADDED", obj)
        self._handlers.append(handler)

    async def subscribe_primed(
        self, handler: Handler[Body], prime: Callable[[list[Body]], Awaitable[None]]
    ) -> None:
        """Like :meth:`subscribe`, for a consumer whose start from the cache is long work
        that awaits (built in a thread, say): ``prime`` gets the cache as it is now, the
        changes that arrive while it runs are held, then handed to ``handler`` in order,
        and ``handler`` gets every change from then on. Nothing is missed in between."""
        held: list[tuple[ChangeType, Body]] = []

        def hold(type_: ChangeType, obj: Body) -> None:
            held.append((type_, obj))

        self._handlers.append(hold)
        try:
            await prime(list(self._objects.values()))
        except BaseException:
            self._handlers.remove(hold)
            raise
        # No await from here on: the held changes, then the handler in the holder's place.
        for type_, obj in held:
            self._call(handler, type_, obj)
        self._handlers[self._handlers.index(hold)] = handler

    # --- what the API says -------------------------------------------------------------------------

    def replace(
        self, scope: str | None, items: Iterable[Body], version: str | int, *, trimmed: bool = False
    ) -> None:
        """A LIST of ``scope`` at ``version``: the cache's part of that scope becomes it
        (``trimmed``: the items are in their cached form already)."""
        listed_at = int(version or 0)
        seen: set[str] = set()
        for obj in items:
            if not self._serves(obj):
                continue
            seen.add(key_of(obj))
            self._upsert(obj, trimmed=trimmed)
        for key in [k for k in self._objects if k not in seen and self._in_scope(k, scope)]:
            if self._versions.get(key, 0) <= listed_at:
                self._tombstone(_uid(self._objects[key]))
                self._delete(key, self._objects[key])

    def apply(self, type_: str, obj: Body) -> None:
        """One watch event."""
        if not self._serves(obj):
            return
        if type_ == "DELETED":
            key = key_of(obj)
            cached = self._objects.get(key)
            self._tombstone(_uid(obj))
            if cached is not None and _uid(cached) == _uid(obj):
                self._delete(key, obj)
        elif type_ in ("ADDED", "MODIFIED"):
            self._upsert(obj)

    def assume(self, obj: Body) -> bool:
        """The API's answer to a write of ours: the cache holds it now, unless the object
        is known deleted or the cache already holds a newer state. Returns whether it took."""
        uid = _uid(obj)
        if uid and uid in self._tombstones:
            return False
        cached = self._objects.get(key_of(obj))
        if cached is not None and _uid(cached) != uid:
            return False
        return self._upsert(obj)

    def _serves(self, obj: Body) -> bool:
        return self._serves_namespace is None or self._serves_namespace(_namespace(obj))

    def _in_scope(self, key: str, scope: str | None) -> bool:
        if scope is None:
            return True
        return key.partition("/")[0] == scope

    def _upsert(self, obj: Body, *, trimmed: bool = False) -> bool:
        key = key_of(obj)
        uid = _uid(obj)
        if uid and uid in self._tombstones:
            return False  # an event older than the deletion we saw
        version = resource_version(obj)
        cached = self._objects.get(key)
        if cached is not None:
            if _uid(cached) == uid:
                if version <= self._versions.get(key, 0):
                    return False  # not newer than what we hold (our own write, typically)
            else:
                # Deleted and created again under the same name, the deletion unseen.
                self._tombstone(_uid(cached))
                self._delete(key, cached)
                cached = None
        stored = self._trim(obj) if self._trim is not None and not trimmed else obj
        self._objects[key] = stored
        self._versions[key] = version
        self._reindex(key, stored)
        # Handlers get the cached form too, so that what they keep holds the cache's
        # compact parts rather than a second, whole copy of the object.
        self._notify("ADDED" if cached is None else "MODIFIED", stored)
        return True

    def _delete(self, key: str, last: Body) -> None:
        self._objects.pop(key, None)
        self._versions.pop(key, None)
        self._reindex(key, None)
        self._notify("DELETED", last)

    def _reindex(self, key: str, obj: Body | None) -> None:
        for name in self._index_funcs:
            self._unindex_one(name, key)
            if obj is not None:
                self._index_one(name, key, obj)

    def _index_one(self, name: str, key: str, obj: Body) -> None:
        try:
            values = tuple(set(self._index_funcs[name](obj)))
        except Exception:
            log.exception("Index function failed", kind=self.resource.kind, index=name, object=key)
            return
        if not values:
            return
        self._indexed[name][key] = values
        index = self._indexes[name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _unindex_one(self, name: str, key: str) -> None:
        values = self._indexed[name].pop(key, ())
        index = self._indexes[name]
        for value in values:
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]

    def _tombstone(self, uid: str) -> None:
        if not uid:
            return
        self._tombstones[uid] = None
        self._tombstones.move_to_end(uid)
        while len(self._tombstones) > TOMBSTONES:
            self._tombstones.popitem(last=False)

    def _notify(self, type_: ChangeType, obj: Body) -> None:
        for handler in self._handlers:
            self._call(handler, type_, obj)

    def _call(self, handler: Handler[Body], type_: ChangeType, obj: Body) -> None:
        try:
            handler(type_, obj)
        except Exception:
            log.exception("Informer handler failed", kind=self.resource.kind, object=key_of(obj))

    # --- running -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """List every scope (the cache is complete when this returns), then watch each
        from its list's resourceVersion in background tasks."""
        versions: list[str] = []
        for scope in self.scopes:
            versions.append(await self._list(scope))
        self.synced = True
        for scope, version in zip(self.scopes, versions, strict=True):
            name = f"informer-{self.resource.plural}-{scope or 'all'}"
            self._tasks.append(asyncio.create_task(self._run(scope, version), name=name))

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._tasks)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:
                log.warning("Informer stopped with an error", kind=self.resource.kind, error=repr(exc))
        self._tasks.clear()

    async def _list(self, scope: str | None) -> str:
        # Trimmed as each page arrives: a re-list of 20,000 pods and claims held whole and
        # decoded, beside the cache, was the operator's peak memory after a restart.
        each = cast(Callable[[Obj], Obj] | None, self._trim)
        items, version = await self.source.list_with_version(self.resource, namespace=scope, each=each)
        self.replace(scope, cast(list[Body], items), version, trimmed=self._trim is not None)
        return version

    async def _run(self, scope: str | None, version: str) -> None:
        """Watch ``scope`` from ``version`` forever: resume after the server ends a watch,
        list again (and replace) after a 410, back off and resume after other errors."""
        backoff = _BACKOFF_START_S
        relist = False
        #: Failed attempts since the watch last delivered anything (logged when it does again).
        failures = 0
        while True:
            try:
                if relist:
                    version = await self._list(scope)
                    log.info("Listed again", kind=self.resource.kind, scope=scope or "all")
                    relist = False
                    failures = 0
                async for event in self.source.watch(
                    self.resource,
                    resource_version=version,
                    namespace=scope,
                    timeout_seconds=WATCH_TIMEOUT_S + random.randint(0, 30),
                ):
                    version = str((event.object.get("metadata") or {}).get("resourceVersion") or version)
                    if event.type != "BOOKMARK":
                        self.apply(event.type, cast(Body, event.object))
                    if failures:
                        log.info(
                            "Watch resumed", kind=self.resource.kind, scope=scope or "all", failures=failures
                        )
                        failures = 0
                backoff = _BACKOFF_START_S
                continue
            except asyncio.CancelledError:
                raise
            except KubeError as exc:
                if exc.status == 410:
                    log.info("Watch expired; listing again", kind=self.resource.kind, scope=scope or "all")
                    relist = True
                    continue
                failures += 1
                log.warning(
                    "Watch failed; retrying",
                    kind=self.resource.kind,
                    status=exc.status,
                    reason=exc.reason,
                    error=str(exc),
                    delay=backoff,
                )
            except Exception as exc:
                failures += 1
                log.warning("Watch failed; retrying", kind=self.resource.kind, error=repr(exc), delay=backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
