"""Pool status requests' reactions, as Kopf event handlers (fed by the operator's
informers: `draco.operator.feed`), bound to the service they hand changes to
(:class:`~draco.operator.resourcepoolstatus.service.PoolStatusService`): a request added
or changed without a status goes on its queue; one deleted is forgotten.
"""

from __future__ import annotations

from typing import Any

import kopf

from draco.api.constants import GROUP, PLURAL_RESOURCE_POOL_STATUS_REQUESTS
from draco.operator import feed
from draco.operator.informers import Informers
from draco.operator.resourcepoolstatus.service import PoolStatusService

__all__ = ["PoolStatusHandlers"]


class PoolStatusHandlers:
    """The pool status requests' Kopf event handler, on a registry of its own."""

    def __init__(self, service: PoolStatusService) -> None:
        self.service = service
        self.registry = kopf.OperatorRegistry()
        on = feed.on_event(self.registry)
        on(GROUP, PLURAL_RESOURCE_POOL_STATUS_REQUESTS, id="pool-status/request")(self.request_changed)

    def request_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.service.on_request(body, deleted=type == "DELETED")

    def follow(self, informers: Informers) -> None:
        """Subscribe the handler: every request as cached now (``type=None``), then changes."""
        feed.subscribe(informers.pool_status_requests, self.registry, listing=True)
