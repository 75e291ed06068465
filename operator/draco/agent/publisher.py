"""ResourceSlice publishing: one pool per node and driver, kept equal to the inventory.

The pool of driver D on node N is named N and cut into slices with fixed names
`<N>-<D>-<i>` (devices, at most 128 per slice, 64 when a device has taints or consumes
counters) and `<N>-<D>-counters-<i>` (shared counters, at most 8 sets per slice, never
mixed with devices, as the API requires). Fixed names make republishing idempotent: a
second agent start, or a retry after a lost reply, finds its own slices by name.

`plan_pool` compares what should be published with what is, and decides:

- everything there and equal: nothing to do;
- equal but some slices missing (someone deleted them): recreate those, same generation;
- anything else (devices changed, a slice edited, extra slices): a new generation,
  every slice rewritten with it and the right `resourceSliceCount`, extra slices deleted.

Equality is "every field we publish has the value we publish": fields the API server
adds (defaults) do not count as changes, so the agent never fights the server. What the
agent stops publishing on a device does count (`dropped_device_fields`): a taint that went
(the device recovered), an attribute, a capacity or a request policy that went, shares or
binding conditions turned off.
Taints keep the `timeAdded` already published for them, so a restart does not move it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from draco.agent.drivers.base import Inventory
from draco.api.constants import (
    API_VERSION,
    KIND_RESOURCE_SLICE,
    RESOURCE_SLICE_MAX_DEVICES,
    RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS,
    SHARED_COUNTERS_MAX,
)
from draco.api.meta import format_time

__all__ = [
    "MANAGED_BY_LABEL",
    "MANAGED_BY_VALUE",
    "PoolPlan",
    "desired_slices",
    "dropped_device_fields",
    "plan_pool",
    "slice_name",
    "spec_matches",
]

#: Device fields only the agent writes: one published that the device no longer has is a change.
_OWNED_DEVICE_FIELDS: Final = (
    "taints",
    "bindingConditions",
    "bindingFailureConditions",
    "allowMultipleAllocations",
    "consumesCounters",
)

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "draco-agent"
_NAME_MAX: Final = 253


def slice_name(node: str, driver: str, suffix: str) -> str:
    name = f"{node}-{driver}-{suffix}"
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(f"{node}/{driver}".encode()).hexdigest()[:10]
    return f"{name[: _NAME_MAX - len(suffix) - 12].rstrip('-.')}-{digest}-{suffix}"


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _with_time_added(
    inventory: Inventory, *, published: Mapping[str, Mapping[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    stamp = format_time(now.replace(microsecond=0))
    devices = []
    for device in inventory.devices:
        body = device.to_api()
        if body.get("taints"):
            old_taints = published.get(device.name, {}).get("taints") or []
            for taint in body["taints"]:
                if "timeAdded" in taint:
                    continue
                same = next(
                    (
                        t
                        for t in old_taints
                        if (t.get("key"), t.get("value"), t.get("effect"))
                        == (taint.get("key"), taint.get("value"), taint.get("effect"))
                    ),
                    None,
                )
                taint["timeAdded"] = same.get("timeAdded", stamp) if same else stamp
        devices.append(body)
    return devices


def desired_slices(
    *,
    driver: str,
    node: str,
    inventory: Inventory,
    published: Mapping[str, Mapping[str, Any]] | None = None,
    now: datetime,
) -> list[tuple[str, dict[str, Any]]]:
    """(name, spec) of every slice of the pool, without generation and slice count.

    `published` maps device names to the devices as published now (for `timeAdded`).
    """
    devices = _with_time_added(inventory, published=published or {}, now=now)
    limit = (
        RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS
        if any(d.needs_small_slices for d in inventory.devices)
        else RESOURCE_SLICE_MAX_DEVICES
    )
    base = {"driver": driver, "pool": {"name": node}, "nodeName": node}
    out: list[tuple[str, dict[str, Any]]] = []
    for i, chunk in enumerate(_chunks([dict(c) for c in inventory.shared_counters], SHARED_COUNTERS_MAX)):
        out.append((slice_name(node, driver, f"counters-{i}"), {**base, "sharedCounters": list(chunk)}))
    device_chunks = _chunks(devices, limit) or [[]]
    for i, chunk in enumerate(device_chunks):
        spec = {**base, "devices": list(chunk)}
        if inventory.partition_type_attribute and any(d.get("consumesCounters") for d in chunk):
            # Only where devices consume counters: upstream refuses it on any other slice.
            spec["partitionTypeAttribute"] = inventory.partition_type_attribute
        out.append((slice_name(node, driver, str(i)), spec))
    return out


def spec_matches(desired: Any, actual: Any) -> bool:
    """Every field of `desired` is in `actual` with the same value (lists: same length,
    element by element). Fields only `actual` has are defaults the server added."""
    if isinstance(desired, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and spec_matches(v, actual[k]) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(desired) == len(actual)
            and all(spec_matches(d, a) for d, a in zip(desired, actual, strict=True))
        )
    if isinstance(desired, bool) or isinstance(actual, bool):
        return desired is actual
    if isinstance(desired, (int, float)) and isinstance(actual, (int, float)):
        return desired == actual
    return bool(desired == actual)


def dropped_device_fields(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Whether a device of `actual` (a published slice spec) has something of the agent's
    that the same device of `desired` no longer has (see the module docstring)."""
    for want, have in zip(desired.get("devices") or [], actual.get("devices") or [], strict=False):
        if any(have.get(f) and not want.get(f) for f in _OWNED_DEVICE_FIELDS):
            return True
        for part in ("attributes", "capacity"):
            if set(have.get(part) or {}) != set(want.get(part) or {}):
                return True
        for name, capacity in (have.get("capacity") or {}).items():
            if capacity.get("requestPolicy") and not (want.get("capacity") or {}).get(name, {}).get(
                "requestPolicy"
            ):
                return True
    return False


@dataclass
class PoolPlan:
    """What to write so that the pool becomes the desired one."""

    generation: int
    create: list[dict[str, Any]] = field(default_factory=list)
    #: Full objects with the resourceVersion they replace.
    update: list[dict[str, Any]] = field(default_factory=list)
    #: (name, resourceVersion) of slices to delete.
    delete: list[tuple[str, str]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def _generation(obj: Mapping[str, Any]) -> int:
    return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)


def published_devices(existing: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Device name -> device body across the existing slices of a pool."""
    return {
        str(d.get("name")): d
        for obj in existing
        for d in ((obj.get("spec") or {}).get("devices") or [])
        if isinstance(d, Mapping)
    }


def plan_pool(
    desired: Sequence[tuple[str, Mapping[str, Any]]],
    existing: Sequence[Mapping[str, Any]],
    *,
    labels: Mapping[str, str],
    owner: Mapping[str, Any] | None = None,
) -> PoolPlan:
    """Compare `desired` (from `desired_slices`) with the pool's `existing` slices."""
    by_name = {str(obj["metadata"]["name"]): obj for obj in existing}
    wanted = {name for name, _ in desired}
    count = len(desired)
    generations = {_generation(obj) for obj in existing}
    current = max(generations, default=0)
    extra = sorted(set(by_name) - wanted)
    present_equal = all(
        spec_matches(spec, (by_name[name].get("spec") or {}))
        and not dropped_device_fields(spec, by_name[name].get("spec") or {})
        and int(by_name[name]["spec"]["pool"].get("resourceSliceCount") or 0) == count
        for name, spec in desired
        if name in by_name
    )
    if present_equal and not extra and len(generations) <= 1 and existing:
        generation = current
    else:
        generation = current + 1
    plan = PoolPlan(generation=generation)

    def full(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        body = {**spec, "pool": {**spec["pool"], "generation": generation, "resourceSliceCount": count}}
        metadata: dict[str, Any] = {"name": name, "labels": dict(labels)}
        if owner:
            metadata["ownerReferences"] = [dict(owner)]
        return {"apiVersion": API_VERSION, "kind": KIND_RESOURCE_SLICE, "metadata": metadata, "spec": body}

    for name, spec in desired:
        old = by_name.get(name)
        if old is None:
            plan.create.append(full(name, spec))
        elif generation != current:
            obj = full(name, spec)
            obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            plan.update.append(obj)
    plan.delete = [(name, str(by_name[name]["metadata"]["resourceVersion"])) for name in extra]
    return plan
