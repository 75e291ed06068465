"""What is free in each resource pool, as metrics computed when scraped: the numbers of a
ResourcePoolStatusRequest's answer (`draco.allocator.poolstatus`, KEP-5677's fields), per
pool, from the allocation's inventory as it stands:

- ``draco_resourcepool_devices``, ``..._allocated_devices``, ``..._available_devices``,
  ``..._unavailable_devices`` ``{driver, pool, node}`` (``totalDevices``,
  ``allocatedDevices``, ``availableDevices``, ``unavailableDevices``: a device tainted
  ``NoSchedule`` or ``NoExecute`` is unavailable, whether unhealthy or tainted by an admin);
- ``draco_resourcepool_unhealthy_devices{driver, pool, node}``: the devices a node agent
  reports unhealthy (its ``draco.dev/unhealthy`` taint, whatever the effect);
- ``draco_resourcepool_partition_devices`` and ``..._partition_allocatable_devices``
  ``{driver, pool, attribute, type}`` (``partitionSummary``: per MIG profile, how many
  partitions there are and how many more still fit);
- ``draco_resourcepool_shareable_capacity`` and ``..._shareable_capacity_consumed``
  ``{driver, pool, capacity}`` (``shareableSummary.capacity``: a shared GPU's memory);
- ``draco_resourcepool_invalid{driver, pool, reason}``: 1 for a pool with a
  ``validationError``, its prefix as ``reason`` (``PoolIncomplete`` while it is published).

One series per pool and state, never per pod or claim: 5,000 nodes of one pool each are
25,000 series, a 2.5 MB scrape (`benchmarks/metrics.py`).
The inventory is never built here: while it is stale (a slice changed and no allocation
has asked for it since) the last answer is served again and a rebuild is asked of the loop
(``refresh``), so the next scrape sees the change; while nothing was allocated or released
since the last scrape (`Inventory.changes`), the last answer is served too. Computed in
the metrics server's thread while the loop may mark an allocation; a read that meets a
change half done is abandoned for the last answer too.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from draco.allocator.inventory import Inventory
from draco.allocator.poolstatus import PoolStatus, pool_statuses

__all__ = ["PoolCollector"]

_POOL: Final = ["driver", "pool", "node"]
_COUNTS: Final = (
    ("draco_resourcepool_devices", "Devices a pool publishes (totalDevices).", "total_devices"),
    (
        "draco_resourcepool_allocated_devices",
        "Devices of a pool that allocated claims hold; a shared device counts once (allocatedDevices).",
        "allocated_devices",
    ),
    (
        "draco_resourcepool_available_devices",
        "Devices of a pool that are neither allocated nor tainted NoSchedule/NoExecute (availableDevices).",
        "available_devices",
    ),
    (
        "draco_resourcepool_unavailable_devices",
        "Devices of a pool tainted NoSchedule or NoExecute, unhealthy ones included (unavailableDevices).",
        "unavailable_devices",
    ),
    (
        "draco_resourcepool_unhealthy_devices",
        "Devices of a pool its node agent reports unhealthy (the draco.dev/unhealthy taint).",
        "unhealthy_devices",
    ),
)


class PoolCollector(Collector):
    """See the module docstring. ``inventory()`` is the allocation's inventory when it is
    current (None while stale)."""

    def __init__(self, inventory: Callable[[], Inventory | None], *, refresh: Callable[[], None]) -> None:
        self.inventory = inventory
        self.refresh = refresh
        self._last: list[PoolStatus] = []
        #: The inventory (weakly: a replaced one is not kept) and its `Inventory.changes`
        #: the last answer was computed from.
        self._from: tuple[weakref.ref[Inventory] | None, int] = (None, -1)

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def _pools(self) -> list[PoolStatus]:
        inventory = self.inventory()
        if inventory is None:
            self.refresh()
            return self._last
        changes = inventory.changes  # (read first: a change during the computation is seen next time)
        computed_from, computed_at = self._from
        if computed_from is None or computed_from() is not inventory or computed_at != changes:
            # A dict that changed size under the read: the last answer is served.
            with contextlib.suppress(RuntimeError):
                self._last = pool_statuses(inventory)
                self._from = (weakref.ref(inventory), changes)
        return self._last

    def collect(self) -> Iterator[Metric]:
        pools = self._pools()
        counts = {name: GaugeMetricFamily(name, text, labels=_POOL) for name, text, _ in _COUNTS}
        partitions = GaugeMetricFamily(
            "draco_resourcepool_partition_devices",
            "Partitions of a type in a partitionable pool (partitionSummary.total).",
            labels=["driver", "pool", "attribute", "type"],
        )
        allocatable = GaugeMetricFamily(
            "draco_resourcepool_partition_allocatable_devices",
            "How many more partitions of a type still fit the pool's counters; the types are "
            "alternatives, not to be added up (partitionSummary.allocatable).",
            labels=["driver", "pool", "attribute", "type"],
        )
        capacity = GaugeMetricFamily(
            "draco_resourcepool_shareable_capacity",
            "A capacity summed over a pool's shareable devices (shareableSummary.capacity.total).",
            labels=["driver", "pool", "capacity"],
        )
        consumed = GaugeMetricFamily(
            "draco_resourcepool_shareable_capacity_consumed",
            "What allocated shares consume of it (shareableSummary.capacity.consumed).",
            labels=["driver", "pool", "capacity"],
        )
        invalid = GaugeMetricFamily(
            "draco_resourcepool_invalid",
            "1 for a pool whose status has a validationError, by its prefix.",
            labels=["driver", "pool", "reason"],
        )
        for pool in pools:
            labels = [pool.driver, pool.pool_name, pool.node_name or ""]
            for name, _, attribute in _COUNTS:
                value = getattr(pool, attribute)
                if value is not None:
                    counts[name].add_metric(labels, value)
            for partition in pool.partition_summary:
                key = [pool.driver, pool.pool_name, partition.attribute, partition.type]
                partitions.add_metric(key, partition.total)
                allocatable.add_metric(key, partition.allocatable)
            for shared in pool.shareable_summary.capacity if pool.shareable_summary else ():
                key = [pool.driver, pool.pool_name, shared.name]
                capacity.add_metric(key, shared.total.as_approximate_float())
                consumed.add_metric(key, shared.consumed.as_approximate_float())
            if pool.validation_error:
                invalid.add_metric([pool.driver, pool.pool_name, pool.validation_error.split(":", 1)[0]], 1)
        yield from counts.values()
        yield from (partitions, allocatable, capacity, consumed, invalid)
