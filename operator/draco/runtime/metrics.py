"""Prometheus metrics of every draco process: one registry, served one way.

Everything a process exports lives on `REGISTRY` (not prometheus_client's global one, so
libraries' collectors never mix in), declared at module level next to the code it
measures: the work-queue metrics here (client-go's `workqueue_*` family, by queue
`name`), the operator's in `draco.operator.metrics`, the agent's in
`draco.agent.metrics`. A process serves it with `draco.runtime.metricsserver` (HTTPS to
callers the API server authorizes, or plain HTTP on the loopback address), which also sets
``draco_build_info{component, version}`` to 1: what tells a draco process's series from
another's of the same name (client-go's ``workqueue_*`` come from kube-controller-manager
too), for alerts and dashboards. Upstream's metric names are kept wherever upstream has one.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "BUILD_INFO",
    "REGISTRY",
    "WORKQUEUE_ADDS",
    "WORKQUEUE_DEPTH",
    "WORKQUEUE_QUEUE_DURATION",
    "WORKQUEUE_RETRIES",
    "WORKQUEUE_WORK_DURATION",
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


BUILD_INFO = Gauge(
    "draco_build_info",
    "1 for every draco process: which component (operator, webhook, agent) of which version.",
    ["component", "version"],
    registry=REGISTRY,
)
