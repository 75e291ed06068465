"""``draco top``'s tables, in kubectl's manner (upper-case headers, columns three spaces
apart, ``<none>`` for nothing; a long message left whole at the end of its line, on one
line).

Four tables: the pools per node (devices, allocated, available, unavailable, unhealthy,
partitions that still fit, shared capacity left); the devices that are held or tainted,
one line per holder (free, untainted devices are only counted: ``-o json`` lists every
device); the DeviceClasses; the waiting pods, longest first.
"""

from __future__ import annotations

from collections.abc import Sequence

from draco.allocator.poolstatus import PoolStatus
from draco.tools.top.view import DeviceUse, Holder, Top

__all__ = ["duration", "render"]

_NONE = "<none>"


def duration(seconds: float) -> str:
    """kubectl's short age: ``45s``, ``3m20s``, ``2h5m``, ``3d4h``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header) - 1)]
    return [
        "   ".join(
            [*(str(cell).ljust(w) for cell, w in zip(row[:-1], widths, strict=True)), str(row[-1])]
        ).rstrip()
        for row in (header, *rows)
    ]


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _partitions(pool: PoolStatus) -> str:
    return ",".join(f"{p.type}:{p.allocatable}/{p.total}" for p in pool.partition_summary) or _NONE


def _shared(pool: PoolStatus) -> str:
    summary = pool.shareable_summary
    if summary is None or not summary.capacity:
        return _NONE
    return ",".join(f"{c.name}:{c.available.to_json()}/{c.total.to_json()}" for c in summary.capacity)


def _state(device: DeviceUse) -> str:
    extra = ["unhealthy"] if device.unhealthy else ["tainted"] if device.blocked else []
    return ",".join([device.state, *extra])


def _holder(holder: Holder) -> str:
    whom = ", ".join(
        f"{name} [{','.join(containers)}]" if containers else name for name, containers in holder.reserved_for
    )
    parts = [whom or "(reserved for nobody)", f"claim {holder.claim}", f"request {holder.request}"]
    parts.extend(f"{name}={amount}" for name, amount in holder.consumed)
    if holder.admin_access:
        parts.append("admin access")
    return "; ".join(parts)


def render(top: Top) -> str:
    lines: list[str] = []
    pools = [
        [
            node.name or _NONE,
            pool.driver,
            pool.pool_name,
            _count(pool.total_devices),
            _count(pool.allocated_devices),
            _count(pool.available_devices),
            _count(pool.unavailable_devices),
            _count(pool.unhealthy_devices),
            _partitions(pool),
            _shared(pool),
            pool.validation_error or "",
        ]
        for node in top.nodes
        for pool in node.pools
    ]
    header = ["NODE", "DRIVER", "POOL", "DEVICES", "ALLOCATED", "AVAILABLE", "UNAVAILABLE", "UNHEALTHY"]
    lines += _table([*header, "PARTITIONS FREE", "SHARED LEFT", "ERROR"], pools) if pools else ["No pools."]
    devices = [
        [
            node.name or _NONE,
            f"{d.driver}/{d.pool}/{d.name}",
            _state(d),
            _holder(h) if h else " ".join(d.taints),
        ]
        for node in top.nodes
        for d in node.devices
        if d.holders or d.taints
        for h in (d.holders or (None,))
    ]
    if devices:
        lines += ["", *_table(["NODE", "DEVICE", "STATE", "HELD BY / TAINTS"], devices)]
    classes = [
        [c.name, _count(c.selected), _count(c.allocated), c.valid or "-", str(c.waiting_pods)]
        for c in top.classes
    ]
    if classes:
        lines += ["", *_table(["DEVICECLASS", "SELECTED", "ALLOCATED", "VALID", "WAITING PODS"], classes)]
    waiting = [
        [
            w.pod,
            duration(w.waited_s),
            ",".join(w.classes) or _NONE,
            w.group or _NONE,
            f"{w.reason}: {' '.join(w.message.split())}" if w.reason else "(not tried yet)",
        ]
        for w in top.waiting
    ]
    lines += (
        ["", *_table(["WAITING POD", "FOR", "CLASSES", "GROUP", "WHY"], waiting)]
        if waiting
        else ["", "No pod waits for devices."]
    )
    return "\n".join(lines) + "\n"
