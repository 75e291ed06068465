"""The operator's Prometheus metrics: one registry, upstream's names where upstream has one.

Everything the operator exports lives on `REGISTRY` (not prometheus_client's global one), so
tests and several in-process operators never collide, and other modules of the operator
(allocation, scheduling) register their own metrics on the same registry. The work-queue
metrics mirror client-go's `workqueue_*` family; the claim metrics mirror the
resourceclaim controller's (`dynamic_resource_allocation_*`, Kubernetes 1.37 names).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from threading import Thread
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "CLAIM_CREATES",
    "REGISTRY",
    "WORKQUEUE_ADDS",
    "WORKQUEUE_DEPTH",
    "WORKQUEUE_QUEUE_DURATION",
    "WORKQUEUE_RETRIES",
    "WORKQUEUE_WORK_DURATION",
    "ClaimsCollector",
    "claim_source",
    "serve_metrics",
]

REGISTRY = CollectorRegistry(auto_describe=True)

# client-go's buckets for queue and work durations: 1µs .. 10s, factor 10.
_WORKQUEUE_BUCKETS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)

WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Current depth of the work queue.", ["name"], registry=REGISTRY)
WORKQUEUE_ADDS = Counter(
    "workqueue_adds", "Total number of adds handled by the work queue.", ["name"], registry=REGISTRY
)
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries", "Total number of retries handled by the work queue.", ["name"], registry=REGISTRY
)
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in the work queue before being requested.",
    ["name"],
    buckets=_WORKQUEUE_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from the work queue takes.",
    ["name"],
    buckets=_WORKQUEUE_BUCKETS,
    registry=REGISTRY,
)

CLAIM_CREATES = Counter(
    "dynamic_resource_allocation_resourceclaim_creates",
    "Number of ResourceClaims creation requests, by outcome and whether admin access was requested.",
    ["status", "admin_access"],
    registry=REGISTRY,
)

SOURCE_TEMPLATE = "resource_claim_template"
SOURCE_EXTENDED_RESOURCE = "extended_resource"
SOURCE_USER = ""


def claim_source(claim: dict[str, Any]) -> str:
    """Where a claim came from, as upstream's `source` label: template, extended resource, user."""
    from draco.api.constants import EXTENDED_RESOURCE_CLAIM_ANNOTATION, POD_CLAIM_NAME_ANNOTATION

    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    if annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true":
        return SOURCE_EXTENDED_RESOURCE
    if POD_CLAIM_NAME_ANNOTATION in annotations:
        return SOURCE_TEMPLATE
    return SOURCE_USER


def claim_uses_admin_access(claim: dict[str, Any]) -> bool:
    """True when any request of the claim (or any of its subrequests) asks for admin access."""
    requests = (((claim.get("spec") or {}).get("devices") or {}).get("requests")) or []
    return any((request.get("exactly") or {}).get("adminAccess") is True for request in requests)


class ClaimsCollector(Collector):
    """`dynamic_resource_allocation_resource_claims{allocated,admin_access,source}`, computed
    at scrape time from the claims the operator currently sees (a callable returning them)."""

    def __init__(self, claims: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self._claims = claims

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "dynamic_resource_allocation_resource_claims",
            "Number of ResourceClaims, by allocation state, admin access and where they came from.",
            labels=["allocated", "admin_access", "source"],
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts: dict[tuple[str, str, str], int] = {}
        for claim in self._claims():
            allocated = "true" if (claim.get("status") or {}).get("allocation") else "false"
            admin = "true" if claim_uses_admin_access(claim) else "false"
            key = (allocated, admin, claim_source(claim))
            counts[key] = counts.get(key, 0) + 1
        family = self._family()
        for labels, value in sorted(counts.items()):
            family.add_metric(list(labels), value)
        yield family


def serve_metrics(*, port: int, host: str = "0.0.0.0") -> Thread | None:
    """Serve `REGISTRY` on http://host:port/metrics in a daemon thread (port 0: don't)."""
    if port == 0:
        return None
    _server, thread = start_http_server(port, addr=host, registry=REGISTRY)
    return thread
