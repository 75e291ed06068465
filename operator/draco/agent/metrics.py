"""Prometheus metrics of the agent, shaped like dra-example-driver's.

Counters by `result` (success | error) are created at zero for both results, so a
dashboard's `rate()` works before the first failure ever happens. Served on
`--metrics-port` (off when 0).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["AgentMetrics"]

RESULTS: Final = ("success", "error")
_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.prepare_total = Counter(
            "draco_agent_prepare_claims_total", "Claims prepared, by result.", ["result"], registry=r
        )
        self.unprepare_total = Counter(
            "draco_agent_unprepare_claims_total", "Claims unprepared, by result.", ["result"], registry=r
        )
        self.prepare_seconds = Histogram(
            "draco_agent_prepare_claim_duration_seconds",
            "Time to prepare one claim (files and status), by result.",
            ["result"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.unprepare_seconds = Histogram(
            "draco_agent_unprepare_claim_duration_seconds",
            "Time to unprepare one claim, by result.",
            ["result"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.slice_writes_total = Counter(
            "draco_agent_resourceslice_writes_total",
            "ResourceSlice writes, by operation (create, update, delete).",
            ["operation"],
            registry=r,
        )
        self.published_devices = Gauge(
            "draco_agent_published_devices", "Devices published, by driver.", ["driver"], registry=r
        )
        self.prepared_claims = Gauge(
            "draco_agent_prepared_claims", "Claims currently prepared on the agent's nodes.", registry=r
        )
        self.nri_adjustments_total = Counter(
            "draco_agent_nri_container_adjustments_total",
            "Containers the runtime asked about over NRI, by result (injected, none, error).",
            ["result"],
            registry=r,
        )
        self.nri_connected = Gauge(
            "draco_agent_nri_connected", "1 while the agent is registered with the runtime's NRI.", registry=r
        )
        for result in ("injected", "none", "error"):
            self.nri_adjustments_total.labels(result=result)
        for result in RESULTS:
            self.prepare_total.labels(result=result)
            self.unprepare_total.labels(result=result)
            self.prepare_seconds.labels(result=result)
            self.unprepare_seconds.labels(result=result)
        for operation in ("create", "update", "delete"):
            self.slice_writes_total.labels(operation=operation)

    def serve(self, port: int, *, address: str = "0.0.0.0") -> None:
        start_http_server(port, addr=address, registry=self.registry)
