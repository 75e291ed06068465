"""Device quota as metrics, computed when scraped from the ResourceQuotas the operator
watches: ``draco_resourcequota{namespace, resourcequota, resource, deviceclass, type}``
(``type`` ``hard`` or ``used``), kube-state-metrics' ``kube_resourcequota`` with the class
the entry is about, for the entries device quota counts only (the per-class ones and the
shared ``requests.*`` ones; one series per quota entry, not per claim).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from draco.api.bodies import meta_of
from draco.api.quota import QuotaNames, draco_usage

__all__ = ["QuotaCollector"]


class QuotaCollector(Collector):
    """``quotas()``: the ResourceQuotas of the namespaces this operator serves; ``names()``:
    the extended resources the DeviceClasses name."""

    def __init__(
        self, quotas: Callable[[], Iterable[Mapping[str, Any]]], *, names: Callable[[], QuotaNames]
    ) -> None:
        self.quotas = quotas
        self.names = names

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "draco_resourcequota",
            "Device quota: the hard limit and the usage of draco's entries of ResourceQuotas.",
            labels=["namespace", "resourcequota", "resource", "deviceclass", "type"],
        )
        names = self.names()
        for quota in list(self.quotas()):
            meta = meta_of(quota)
            for entry, device_class, hard, used in draco_usage(quota, names):
                labels = [str(meta.get("namespace") or ""), str(meta.get("name") or ""), entry, device_class]
                family.add_metric([*labels, "hard"], float(hard))
                family.add_metric([*labels, "used"], float(used))
        yield family
