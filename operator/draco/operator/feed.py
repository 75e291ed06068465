"""The operator's Kopf event handlers, fed by its informers instead of Kopf's watches.

Each controller declares its reactions as Kopf event handlers (``kopf.on.event``) on a
registry of its own: the methods of its handlers object (``handlers.py``), registered
bound, when the object is built with the service they hand changes to (:func:`on_event`).
Kopf never runs those registries: the operator's watches are its informers (`draco.kube.informer`), and
:func:`subscribe` hands each informer's changes to the handlers of a registry that
watch its resource. Why not Kopf's watches, with the failing test or the measurement for
each reason, is in docs/architecture.md ("Kopf in the operator"): a re-list after a
``410 Gone`` reports no deletions in Kopf; Kopf's per-object processing costs about 30
times an informer's per event and keeps about 0.9 KB per object (over the memory budget at
20,000 pods); and Kopf says when a kind has been listed only to index handlers, never
when a kind has no objects, while every controller starts from a complete cache.

What a handler gets, as Kopf gives it to an event handler:

- ``type``: ``ADDED``, ``MODIFIED``, ``DELETED`` (a deletion the watch reported, or one a
  re-list found); ``None`` for the objects already cached when the handler is subscribed
  with ``listing=True`` (Kopf's type for what its initial LIST finds);
- ``body`` (the cached form of the object: read-only below its top level and its
  metadata, see `draco.operator.informers`), ``event``, ``meta``, ``spec``, ``status``,
  ``name``, ``namespace``, ``uid``, ``labels``, ``annotations``, ``resource`` (Kopf's
  reference to the kind), ``param`` and ``logger`` (bound to the object when first used).
  No ``memo``: a handler is a method of the object that holds what it needs.

Unlike Kopf, a handler is called synchronously on the event loop, in the informer's order
(resourceVersion order per kind; every handler of a change before the next change), and
must not block: it decides from the caches and hands work to a queue. So handlers are plain
functions (or bound methods); a coroutine function is refused at :func:`subscribe`, as are the filters this
feed does not evaluate (``labels``, ``annotations``, ``field``, ``value``; ``when`` is
evaluated). A handler that raises is logged and the others still run.

Kopf keeps the handlers of a registry where its decorators put them
(``registry._watching``): :func:`handlers_of` is the one place the operator reads it, pinned
by tests/unit/operator/test_feed.py.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import kopf

from draco.api.bodies import meta_of
from draco.kube.client import Resource, key_of
from draco.kube.informer import ChangeType, Informer
from draco.logs import get_logger

__all__ = ["FeedError", "handlers_of", "kopf_resource", "on_event", "subscribe", "subscribe_primed"]

log = get_logger(__name__)

_UNSUPPORTED_FILTERS: Final = ("labels", "annotations", "field", "value")
#: The key an object is logged under (`claim=ns/name`), as the rest of the operator logs it.
_LOG_KEYS: Final = {
    "ResourceClaim": "claim",
    "ResourceClaimTemplate": "template",
    "ResourceSlice": "slice",
    "DeviceClass": "class",
    "DeviceTaintRule": "rule",
    "ResourceQuota": "quota",
}


class FeedError(Exception):
    """A handler the feed cannot call as registered."""


def kopf_resource(resource: Resource) -> kopf.Resource:
    """Kopf's reference to the kind an informer watches (the version Kopf would prefer)."""
    return kopf.Resource(
        group=resource.group,
        version=resource.version,
        plural=resource.plural,
        kind=resource.kind,
        namespaced=resource.namespaced,
        preferred=True,
    )


def handlers_of(registry: kopf.OperatorRegistry, resource: Resource) -> list[Any]:
    """The event handlers of `registry` whose resource selector matches `resource`."""
    reference = kopf_resource(resource)
    found = [
        h for h in registry._watching.get_all_handlers() if h.selector is None or h.selector.check(reference)
    ]
    for handler in found:
        if inspect.iscoroutinefunction(handler.fn):
            raise FeedError(f"{handler}: the operator's event handlers are plain functions (called in order)")
        unsupported = [name for name in _UNSUPPORTED_FILTERS if getattr(handler, name) is not None]
        if unsupported:
            raise FeedError(f"{handler}: filters {unsupported} are not evaluated for informer-fed handlers")
    return found


class _ObjectLogger:
    """The handler's ``logger``: the operator's logger bound to the object, on first use."""

    __slots__ = ("_bound", "_fields")

    def __init__(self, fields: Mapping[str, str]) -> None:
        self._fields = fields
        self._bound: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._bound is None:
            self._bound = log.bind(**self._fields)
        return getattr(self._bound, name)


def on_event(registry: kopf.OperatorRegistry) -> Callable[..., Callable[[Callable[..., None]], Any]]:
    """``kopf.on.event`` onto ``registry``: ``on_event(registry)("v1", "pods", id=...)(handler)``,
    for the bound methods of a controller's handlers object."""
    return functools.partial(kopf.on.event, registry=registry)


def _caller(informer: Informer[Any], handlers: list[Any]) -> Callable[[Any, Any], None]:
    reference = kopf_resource(informer.resource)
    kind = _LOG_KEYS.get(informer.resource.kind, informer.resource.kind.lower())

    def call(type_: ChangeType | None, body: Any) -> None:
        meta = meta_of(body)
        kwargs: dict[str, Any] = {
            "type": type_,
            "event": {"type": type_, "object": body},
            "body": body,
            "meta": meta,
            "spec": body.get("spec") or {},
            "status": body.get("status") or {},
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
            "resource": reference,
            "logger": _ObjectLogger({kind: key_of(body)}),
        }
        for handler in handlers:
            try:
                if handler.when is not None and not handler.when(**kwargs, param=handler.param):
                    continue
                handler.fn(**kwargs, param=handler.param)
            except Exception:
                log.exception("Handler failed", handler=handler.id, **{kind: key_of(body)})

    return call


def subscribe(
    informer: Informer[Any],
    registry: kopf.OperatorRegistry,
    *,
    listing: bool = False,
) -> None:
    """Call `registry`'s event handlers of the informer's kind for every change from now
    on; with `listing`, first for every cached object (``type=None``). Nothing is awaited,
    so no change is missed or seen twice."""
    handlers = handlers_of(registry, informer.resource)
    if not handlers:
        return
    call = _caller(informer, handlers)
    if listing:
        for body in informer.values():
            call(None, body)
    informer.subscribe(call, replay=False)


async def subscribe_primed(
    informer: Informer[Any],
    registry: kopf.OperatorRegistry,
    *,
    prime: Callable[[list[Any]], Awaitable[None]],
) -> None:
    """Like :func:`subscribe`, for a controller whose start from the cache is long work that
    awaits (`Informer.subscribe_primed`): `prime` gets the cache, the changes meanwhile are
    held and handed to the handlers afterwards, in order."""
    handlers = handlers_of(registry, informer.resource)
    await informer.subscribe_primed(_caller(informer, handlers), prime)
