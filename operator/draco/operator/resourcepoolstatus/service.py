"""Answers ResourcePoolStatusRequests, once each, as upstream's resourcepoolstatusrequest
controller does (KEP-5677), and sweeps the old ones away.

A request without a status is put on the ``resource_pool_status_request`` queue; its sync
computes the matching pools (`draco.allocator.poolstatus`) over the allocation's own
inventory (what allocation decides by, with in-flight choices counted as held), and writes
the answer to the status subresource with the resourceVersion it read: ``poolCount``, the
first ``spec.limit`` pools, the condition ``Complete`` (reason ``CalculationComplete``) and
draco's sums for ``kubectl get``. A request whose status is written is never looked at
again but by the sweep.

- **Incomplete pools.** While a matching pool has fewer slices than it declares, nothing
  is written and the request is tried again (1 s, doubling), up to 5 times as upstream;
  then, where upstream leaves the request unanswered for good, draco writes the answer
  with those pools' ``PoolIncomplete:`` errors (a request is always answered).
- **Failed.** When the inventory cannot be computed (a selector error in a class: the
  allocation's inventory is built with the classes) the condition is ``Failed`` (reason
  ``CalculationFailed``) with the error.
- **Sweep.** Every 10 minutes, a request answered more than an hour ago, or made more than
  a day ago and never answered, is deleted (with its UID as precondition: never a
  namesake created since).

Metrics are upstream's, by ``driver_name``: requests answered, status writes that failed,
and how long an answer took.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client import Counter, Histogram

from draco.allocator.inventory import Inventory
from draco.allocator.poolstatus import RequestAnswer, answer_request
from draco.api.bodies import meta_of
from draco.api.constants import (
    POOL_STATUS_COMPLETE_CONDITION,
    POOL_STATUS_COMPLETE_REASON,
    POOL_STATUS_FAILED_CONDITION,
    POOL_STATUS_FAILED_REASON,
)
from draco.errors import ConflictError, DracoError, KubeError, NotFoundError
from draco.kube.client import Kube, Obj
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.informers import RESOURCE_POOL_STATUS_REQUESTS
from draco.runtime.metrics import REGISTRY
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.devicetaints import parse_time

__all__ = [
    "FIELD_MANAGER",
    "QUEUE_NAME",
    "REQUESTS_PROCESSED",
    "PoolStatusService",
    "answered",
    "status_of",
]

log = get_logger(__name__)

FIELD_MANAGER: Final = "draco-resourcepoolstatus"
QUEUE_NAME: Final = "resource_pool_status_request"
#: Tries while a pool is incomplete (upstream's maxRetries), and the first wait between them.
INCOMPLETE_TRIES: Final = 5
INCOMPLETE_RETRY_S: Final = 1.0
#: The sweep: how often, and how long answered and unanswered requests are kept (upstream's).
SWEEP_EVERY_S: Final = 600.0
ANSWERED_TTL: Final = datetime.timedelta(hours=1)
PENDING_TTL: Final = datetime.timedelta(hours=24)

REQUESTS_PROCESSED: Final = Counter(
    "resourcepoolstatusrequest_controller_requests_processed",
    "Total number of ResourcePoolStatusRequests processed.",
    ["driver_name"],
    registry=REGISTRY,
)
PROCESSING_ERRORS: Final = Counter(
    "resourcepoolstatusrequest_controller_request_processing_errors",
    "Total number of errors while processing ResourcePoolStatusRequests.",
    ["driver_name"],
    registry=REGISTRY,
)
PROCESSING_DURATION: Final = Histogram(
    "resourcepoolstatusrequest_controller_request_processing_duration_seconds",
    "Time taken to process a ResourcePoolStatusRequest.",
    ["driver_name"],
    buckets=tuple(0.001 * 2**i for i in range(15)),
    registry=REGISTRY,
)

Clock = Callable[[], datetime.datetime]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def answered(request: Mapping[str, Any]) -> bool:
    """Whether the request's status is written (then it is final)."""
    return bool(request.get("status"))


def status_of(answer: RequestAnswer, *, now: datetime.datetime) -> dict[str, Any]:
    """The status that says `answer`: upstream's fields, its condition, and draco's sums."""
    pools = [pool.to_wire() for pool in answer.pools]
    invalid = sum(1 for _ in answer.invalid())
    message = f"Calculated status for {len(pools)} pools" + (f" ({invalid} incomplete)" if invalid else "")
    status: dict[str, Any] = {
        "poolCount": answer.pool_count,
        "pools": pools,
        "conditions": [_condition(POOL_STATUS_COMPLETE_CONDITION, POOL_STATUS_COMPLETE_REASON, message, now)],
        "invalidPools": invalid,
    }
    for name, attribute in (
        ("totalDevices", "total_devices"),
        ("allocatedDevices", "allocated_devices"),
        ("availableDevices", "available_devices"),
        ("unavailableDevices", "unavailable_devices"),
    ):
        status[name] = sum(getattr(pool, attribute) or 0 for pool in answer.pools)
    return status


def _condition(kind: str, reason: str, message: str, now: datetime.datetime) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": _stamp(now),
    }


def expired(request: Mapping[str, Any], *, now: datetime.datetime) -> bool:
    """Whether the sweep deletes the request now (see the module docstring)."""
    if answered(request):
        conditions = (request.get("status") or {}).get("conditions") or []
        times = [t for c in conditions if (t := parse_time(c.get("lastTransitionTime"))) is not None]
        return bool(times) and now - max(times) > ANSWERED_TTL
    created = parse_time(meta_of(request).get("creationTimestamp"))
    return created is not None and now - created > PENDING_TTL


@dataclass
class PoolStatusService:
    """See the module docstring. ``inventory()`` is the allocation's current inventory."""

    kube: Kube
    requests: Informer[Obj]
    queue: WorkQueue[str]
    inventory: Callable[[], Awaitable[Inventory]]
    clock: Clock = _now
    #: Tries so far of requests that met an incomplete pool.
    tries: dict[str, int] = field(default_factory=dict)
    runner: asyncio.Task[None] | None = None
    sweeper: asyncio.Task[None] | None = None

    def on_request(self, request: Mapping[str, Any], *, deleted: bool) -> None:
        name = str(meta_of(request).get("name") or "")
        if deleted:
            self.tries.pop(name, None)
        elif not answered(request):
            self.queue.add(name)

    async def sync(self, name: str) -> float | None:
        """Answer the request `name` if it is still unanswered (the queue's sync)."""
        request = self.requests.get(name)
        if request is None or answered(request):
            self.tries.pop(name, None)
            return None
        spec = request.get("spec") or {}
        driver = str(spec.get("driver") or "")
        started = asyncio.get_running_loop().time()
        try:
            answer = answer_request(await self.inventory(), spec)
        except DracoError as exc:
            status = {
                "poolCount": 0,
                "conditions": [
                    _condition(
                        POOL_STATUS_FAILED_CONDITION, POOL_STATUS_FAILED_REASON, str(exc), self.clock()
                    )
                ],
            }
            log.warning("Could not compute pool status", request=name, error=str(exc))
        else:
            if answer.incomplete and self.tries.get(name, 0) + 1 < INCOMPLETE_TRIES:
                tries = self.tries[name] = self.tries.get(name, 0) + 1
                return float(INCOMPLETE_RETRY_S * 2 ** (tries - 1))
            status = status_of(answer, now=self.clock())
        await self._write(request, status, driver=driver)
        PROCESSING_DURATION.labels(driver_name=driver).observe(asyncio.get_running_loop().time() - started)
        self.tries.pop(name, None)
        return None

    async def _write(self, request: Obj, status: dict[str, Any], *, driver: str) -> None:
        meta = meta_of(request)
        body = {
            "apiVersion": RESOURCE_POOL_STATUS_REQUESTS.api_version,
            "kind": RESOURCE_POOL_STATUS_REQUESTS.kind,
            "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
            "spec": request.get("spec") or {},
            "status": status,
        }
        try:
            written = await self.kube.replace_status(RESOURCE_POOL_STATUS_REQUESTS, body)
        except NotFoundError:
            return  # deleted meanwhile: nobody to answer
        except KubeError:
            PROCESSING_ERRORS.labels(driver_name=driver).inc()
            raise  # a conflict: the newer version comes through the informer; retried
        self.requests.assume(written)
        REQUESTS_PROCESSED.labels(driver_name=driver).inc()
        log.info(
            "Answered a pool status request",
            request=meta.get("name"),
            driver=driver,
            pools=status.get("poolCount"),
            condition=(status.get("conditions") or [{}])[0].get("type"),
        )

    async def sweep(self) -> int:
        """Delete the requests whose time is up; how many were deleted."""
        now = self.clock()
        deleted = 0
        for request in list(self.requests.values()):
            if not expired(request, now=now):
                continue
            meta = meta_of(request)
            try:
                if await self.kube.delete(
                    RESOURCE_POOL_STATUS_REQUESTS,
                    str(meta.get("name")),
                    uid=str(meta.get("uid") or "") or None,
                ):
                    deleted += 1
            except (ConflictError, NotFoundError):
                continue  # replaced by a namesake, or gone
        if deleted:
            log.info("Deleted old pool status requests", deleted=deleted)
        return deleted

    async def sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            try:
                await self.sweep()
            except KubeError as exc:
                log.warning("Sweeping pool status requests failed", error=str(exc))
