"""DeviceClass status as metrics, computed when scraped from the classes the operator
watches (the counts this controller writes): ``draco_deviceclass_selected_devices`` and
``draco_deviceclass_allocated_devices`` ``{deviceclass}`` (``status.selectedDevices``,
``status.allocatedDevices``; a class with neither counted yet is left out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from draco.api.bodies import meta_of

__all__ = ["ClassCollector"]


class ClassCollector(Collector):
    """``classes()``: the DeviceClasses as the informer holds them."""

    def __init__(self, classes: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self.classes = classes

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        selected = GaugeMetricFamily(
            "draco_deviceclass_selected_devices",
            "Published devices the DeviceClass's selectors select (status.selectedDevices).",
            labels=["deviceclass"],
        )
        allocated = GaugeMetricFamily(
            "draco_deviceclass_allocated_devices",
            "Of those, the devices an allocated claim holds (status.allocatedDevices).",
            labels=["deviceclass"],
        )
        for device_class in sorted(self.classes(), key=lambda c: str(meta_of(c).get("name") or "")):
            status = device_class.get("status") or {}
            if status.get("selectedDevices") is None:
                continue
            name = [str(meta_of(device_class).get("name") or "")]
            selected.add_metric(name, float(status["selectedDevices"]))
            allocated.add_metric(name, float(status.get("allocatedDevices") or 0))
        yield selected
        yield allocated
