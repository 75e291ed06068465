"""Pool status requests' reactions, as Kopf event handlers (fed by the operator's
informers: `draco.operator.feed`): a request added or changed without a status goes on the
service's queue (`memo.pool_status`,
:class:`~draco.operator.resourcepoolstatus.service.PoolStatusService`); one deleted is
forgotten.
"""

from __future__ import annotations

from typing import Any, Final

import kopf

from draco.api.constants import GROUP, PLURAL_RESOURCE_POOL_STATUS_REQUESTS
from draco.operator import feed
from draco.operator.informers import Informers
from draco.operator.resourcepoolstatus.service import PoolStatusService

__all__ = ["HANDLERS", "follow"]

#: The pool status requests' handlers (`PoolStatusController.start` subscribes them).
HANDLERS: Final = kopf.OperatorRegistry()


@kopf.on.event(GROUP, PLURAL_RESOURCE_POOL_STATUS_REQUESTS, id="pool-status/request", registry=HANDLERS)
def request_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    service: PoolStatusService = memo.pool_status
    service.on_request(body, deleted=type == "DELETED")


def follow(informers: Informers, memo: kopf.Memo) -> None:
    """Subscribe the handler: every request as cached now (``type=None``), then changes."""
    feed.subscribe(informers.pool_status_requests, HANDLERS, memo=memo, listing=True)
