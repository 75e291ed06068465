"""List-then-watch, the informer loop every long-running watcher of draco needs.

`list_watch` lists the objects (handing the whole list to `on_list`, which replaces what
the caller knew), then watches from the list's resourceVersion and hands every event to
`on_event` in order. A watch the server ends (its timeout) is resumed from the last
version seen, bookmarks included; 410 Gone (the version fell out of the server's window)
lists again; any other failure is logged with the API's status and reason and retried with
a capped exponential backoff. It runs until cancelled.

Kopf does the same for the operator's handlers; this is for processes and parts that are
not Kopf handlers (the node agent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from draco.errors import KubeError
from draco.kube.client import Kube, Obj, Resource
from draco.logs import get_logger

__all__ = ["list_watch"]

log = get_logger(__name__)

_WATCH_TIMEOUT_S: Final = 240
_BACKOFF_START_S: Final = 0.5
_BACKOFF_MAX_S: Final = 10.0


async def _maybe_await(result: Awaitable[None] | None) -> None:
    if result is not None:
        await result


async def list_watch(
    kube: Kube,
    resource: Resource,
    *,
    on_list: Callable[[list[Obj]], Awaitable[None] | None],
    on_event: Callable[[str, Obj], Awaitable[None] | None],
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout_seconds: int = _WATCH_TIMEOUT_S,
) -> None:
    """List then watch `resource` forever (until cancelled); see the module docstring.

    `on_event` gets "ADDED", "MODIFIED" or "DELETED" and the object (with a label or
    field selector, an object that stops matching arrives as DELETED).
    """
    selectors = ", ".join(s for s in (label_selector, field_selector) if s)
    what = resource.plural + (f" ({selectors})" if selectors else "")
    backoff = _BACKOFF_START_S
    while True:
        try:
            items, version = await kube.list_with_version(
                resource, namespace=namespace, label_selector=label_selector, field_selector=field_selector
            )
            await _maybe_await(on_list(items))
            backoff = _BACKOFF_START_S
            while True:
                async for event in kube.watch(
                    resource,
                    resource_version=version,
                    namespace=namespace,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    timeout_seconds=timeout_seconds,
                ):
                    version = str(event.object["metadata"]["resourceVersion"])
                    if event.type != "BOOKMARK":
                        await _maybe_await(on_event(event.type, event.object))
        except asyncio.CancelledError:
            raise
        except KubeError as exc:
            if exc.status == 410:
                log.info("Watch expired; listing again", what=what)
                continue
            log.warning(
                "Watch failed; retrying",
                what=what,
                status=exc.status,
                reason=exc.reason,
                error=str(exc),
                delay=backoff,
            )
        except Exception as exc:
            log.warning("Watch failed; retrying", what=what, error=repr(exc), delay=backoff)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, _BACKOFF_MAX_S)
