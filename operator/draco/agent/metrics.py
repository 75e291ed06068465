"""Prometheus metrics of the agent, shaped like dra-example-driver's.

Declared at module level on the process's one registry (`draco.runtime.metrics.REGISTRY`,
served by `serve_metrics` on `--metrics-port`, off when 0), as the operator's are; the
agent's work queues (`pools`, `claims`) add client-go's `workqueue_*` family there too.
Counters by `result` (success | error) are created at zero for both results, so a
dashboard's `rate()` works before the first failure ever happens.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from draco.runtime.metrics import REGISTRY

__all__ = [
    "NRI_ADJUSTMENTS",
    "NRI_CONNECTED",
    "PREPARED_CLAIMS",
    "PREPARE_DURATION",
    "PREPARE_TOTAL",
    "PUBLISHED_DEVICES",
    "SLICE_WRITES",
    "UNPREPARE_DURATION",
    "UNPREPARE_TOTAL",
    "register_nri",
]

RESULTS: Final = ("success", "error")
_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

PREPARE_TOTAL = Counter(
    "draco_agent_prepare_claims_total", "Claims prepared, by result.", ["result"], registry=REGISTRY
)
UNPREPARE_TOTAL = Counter(
    "draco_agent_unprepare_claims_total", "Claims unprepared, by result.", ["result"], registry=REGISTRY
)
PREPARE_DURATION = Histogram(
    "draco_agent_prepare_claim_duration_seconds",
    "Time to prepare one claim (files and status), by result.",
    ["result"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
UNPREPARE_DURATION = Histogram(
    "draco_agent_unprepare_claim_duration_seconds",
    "Time to unprepare one claim, by result.",
    ["result"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
SLICE_WRITES = Counter(
    "draco_agent_resourceslice_writes_total",
    "ResourceSlice writes, by operation (create, update, delete).",
    ["operation"],
    registry=REGISTRY,
)
PUBLISHED_DEVICES = Gauge(
    "draco_agent_published_devices", "Devices published, by driver.", ["driver"], registry=REGISTRY
)
PREPARED_CLAIMS = Gauge(
    "draco_agent_prepared_claims", "Claims currently prepared on the agent's nodes.", registry=REGISTRY
)

NRI_ADJUSTMENTS = Counter(
    "draco_agent_nri_container_adjustments_total",
    "Containers the runtime asked about over NRI, by result (injected, none, error).",
    ["result"],
    registry=REGISTRY,
)
#: Registered only by an agent started with ``--nri-socket`` (`register_nri`): an agent
#: without NRI exports no 0 that an alert would read as "disconnected".
NRI_CONNECTED = Gauge(
    "draco_agent_nri_connected", "1 while the agent is registered with the runtime's NRI.", registry=None
)


def register_nri() -> None:
    """Export `NRI_CONNECTED` (0 until the runtime answers); once per process."""
    if REGISTRY.get_sample_value("draco_agent_nri_connected") is None:
        REGISTRY.register(NRI_CONNECTED)


for _result in RESULTS:
    PREPARE_TOTAL.labels(result=_result)
    UNPREPARE_TOTAL.labels(result=_result)
    PREPARE_DURATION.labels(result=_result)
    UNPREPARE_DURATION.labels(result=_result)
for _operation in ("create", "update", "delete"):
    SLICE_WRITES.labels(operation=_operation)
for _result in ("injected", "none", "error"):
    NRI_ADJUSTMENTS.labels(result=_result)
