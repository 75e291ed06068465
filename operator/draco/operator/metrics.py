"""The operator's own Prometheus metrics, on the process's one registry
(`draco.runtime.metrics.REGISTRY`, served with `serve_metrics`).

The claim metrics mirror the resourceclaim controller's (`dynamic_resource_allocation_*`,
Kubernetes 1.37 names), the eviction metrics the device-taint-eviction controller's, the
binding-condition metrics kube-scheduler's (`scheduler_dra_bindingconditions_*`, KEP-5007,
GA in 1.38); the allocation metrics are draco's own (upstream's scheduler plugin has no
equivalent of a whole allocation attempt for a gated pod).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Final

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from draco.api.bodies import ResourceClaimBody, meta_of
from draco.api.constants import EXTENDED_RESOURCE_CLAIM_ANNOTATION, POD_CLAIM_NAME_ANNOTATION
from draco.runtime.metrics import REGISTRY

__all__ = [
    "ALLOCATION_ATTEMPTS",
    "ALLOCATION_DURATION",
    "BINDING_CONDITIONS_ALLOCATIONS",
    "BINDING_CONDITIONS_WAIT_DURATION",
    "CLAIM_CREATES",
    "DEVICE_TAINT_POD_DELETIONS",
    "DEVICE_TAINT_POD_DELETION_DURATION",
    "ClaimsCollector",
    "claim_source",
    "claim_uses_admin_access",
]

CLAIM_CREATES = Counter(
    "dynamic_resource_allocation_resourceclaim_creates",
    "Number of ResourceClaims creation requests, by outcome and whether admin access was requested.",
    ["status", "admin_access"],
    registry=REGISTRY,
)

# The device-taint-eviction controller's (upstream `devicetainteviction/metrics`).
DEVICE_TAINT_POD_DELETIONS = Counter(
    "device_taint_eviction_controller_pod_deletions",
    "Total number of Pods deleted by DeviceTaintEvictionService since its start.",
    registry=REGISTRY,
)
DEVICE_TAINT_POD_DELETION_DURATION = Histogram(
    "device_taint_eviction_controller_pod_deletion_duration_seconds",
    "Latency, in seconds, between the time when a device taint effect has been activated "
    "for a Pod and its deletion via DeviceTaintEvictionService.",
    buckets=(0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240),
    registry=REGISTRY,
)

SOURCE_TEMPLATE = "resource_claim_template"
SOURCE_EXTENDED_RESOURCE = "extended_resource"
SOURCE_USER = ""


def claim_source(claim: ResourceClaimBody) -> str:
    """Where a claim came from, as upstream's `source` label: template, extended resource, user."""
    annotations = meta_of(claim).get("annotations") or {}
    if annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true":
        return SOURCE_EXTENDED_RESOURCE
    if POD_CLAIM_NAME_ANNOTATION in annotations:
        return SOURCE_TEMPLATE
    return SOURCE_USER


def claim_uses_admin_access(claim: ResourceClaimBody) -> bool:
    """True when any request of the claim (or any of its subrequests) asks for admin access."""
    requests = (((claim.get("spec") or {}).get("devices") or {}).get("requests")) or []
    return any((request.get("exactly") or {}).get("adminAccess") is True for request in requests)


class ClaimsCollector(Collector):
    """`dynamic_resource_allocation_resource_claims{allocated,admin_access,source}`, computed
    at scrape time from the claims the operator currently sees (a callable returning them)."""

    def __init__(self, claims: Callable[[], Iterable[ResourceClaimBody]]) -> None:
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


ALLOCATION_ATTEMPTS = Counter(
    "draco_allocation_attempts",
    "Allocation attempts for gated pods, by result: allocated (pinned and un-gated), "
    "unschedulable (no node fits), waiting (claims or binding conditions not ready), "
    "conflict (re-read and retried), timeout (the wall-clock budget ran out), "
    "binding_failed (a binding failure condition or the binding timeout cleared the allocation), error.",
    ["result"],
    registry=REGISTRY,
)
#: Every result, so that a query for one (an alert on errors) finds a series before it happens.
ALLOCATION_RESULTS: Final = (
    "allocated",
    "unschedulable",
    "waiting",
    "conflict",
    "timeout",
    "binding_failed",
    "error",
)
ALLOCATION_DURATION = Histogram(
    "draco_allocation_duration_seconds",
    "Time one allocation attempt for a gated pod takes, from reading it to un-gating it.",
    ["result"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)

# kube-scheduler's binding-condition metrics, as Kubernetes 1.38 names and records them
# (pkg/scheduler/metrics, the DynamicResources plugin's PreBind): when a pod's wait for
# binding conditions ends, one count per allocated device result with binding conditions,
# and one observation of the wait per allocated device result of the pod's claims.
BINDING_CONDITIONS_ALLOCATIONS = Counter(
    "scheduler_dra_bindingconditions_allocations",
    "Number of allocations using devices with BindingConditions, counted per driver per scheduling "
    "attempt, by scheduler profile.",
    ["profile", "driver", "status"],
    registry=REGISTRY,
)
BINDING_CONDITIONS_WAIT_DURATION = Histogram(
    "scheduler_dra_bindingconditions_wait_duration_seconds",
    "Time in seconds spent waiting for BindingConditions to be satisfied during PreBind, by scheduler profile.",
    ["profile", "driver", "status"],
    buckets=tuple(0.1 * 2**i for i in range(14)),
    registry=REGISTRY,
)
for _result in ALLOCATION_RESULTS:
    ALLOCATION_ATTEMPTS.labels(result=_result)
    ALLOCATION_DURATION.labels(result=_result)
