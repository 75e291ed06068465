"""Compact per-device records, flattened from ResourceSlices once per inventory.

The search touches devices millions of times; walking pydantic models or nested dicts
there would dominate its cost. Each published device becomes one :class:`DeviceRecord`
with an integer index, attribute values already normalised for constraints, capacities
and counters as exact nano-unit integers, and its taints (slice taints plus matching
DeviceTaintRules) resolved.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from draco.quantity import Quantity

__all__ = [
    "AttrSet",
    "CapacityRecord",
    "DeviceRecord",
    "Taint",
    "attribute_set",
    "cel_fingerprint",
    "qualify",
]

#: An attribute as a constraint compares it: a type tag and the set of its values.
#: A scalar is a one-element set; list attributes (``ints`` ...) have several.
AttrSet = tuple[str, frozenset[Any]]

#: Distinct attribute values kept for sharing (see :func:`attribute_set`) before starting over.
_SHARED_ATTR_SETS_MAX = 100_000
_shared_attr_sets: dict[AttrSet, AttrSet] = {}

_SCALAR_TAGS = {"int": "int", "bool": "bool", "string": "string", "version": "version"}
_LIST_TAGS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str
    #: Where the taint comes from: ``slice`` or ``rule <name>``, for explanations.
    source: str

    def describe(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class CapacityRecord:
    value: Quantity
    #: ``requestPolicy`` as published (plain dict in the JSON shape), or None.
    policy: Mapping[str, Any] | None


@dataclass(slots=True, eq=False)
class DeviceRecord:
    """One device of one slice, with everything the allocator asks about it."""

    index: int
    driver: str
    pool: str
    name: str
    slice_name: str
    #: The device as published (JSON shape), for CEL and for nothing on the hot path.
    raw: Mapping[str, Any]
    #: Attributes by fully qualified name (``driver/model`` also for an unqualified ``model``).
    attrs: dict[str, AttrSet]
    capacity: dict[str, CapacityRecord]
    allow_multiple: bool
    #: ``((counterSet, ((counter, nanos), ...)), ...)``
    consumes: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    taints: tuple[Taint, ...]
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    binds_to_node: bool
    #: Node selection that applies to this device (the slice's, or its own with
    #: ``perDeviceNodeSelection``): exactly one of these is set.
    node_name: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    #: The pool generation the device was published at.
    generation: int = 0
    #: Interned id of what CEL can see (driver, attributes, capacity, multi-allocation):
    #: devices with equal content share selector results.
    cel_key: int = -1
    #: ``(driver, pool, name)``, what the allocated state is indexed by; kept, not
    #: rebuilt, since every plan asks it of every device of the node.
    key: tuple[str, str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.driver, self.pool, self.name)

    def describe(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


def qualify(name: str, driver: str) -> str:
    """An attribute or capacity name as a fully qualified name (domain defaults to the driver);
    interned, since every device of a driver has the same few."""
    return name if "/" in name else sys.intern(f"{driver}/{name}")


def attribute_set(attribute: Mapping[str, Any]) -> AttrSet | None:
    """The constraint view of one ``DeviceAttribute``; ``None`` if no known field is set.

    Equal values are one shared object: a cluster's devices repeat a few models, indexes
    and versions, and a one-element frozenset costs ten times its value."""
    for name, tag in _SCALAR_TAGS.items():
        value = attribute.get(name)
        if value is not None:
            return _shared((tag, frozenset((value,))))
    for name, tag in _LIST_TAGS.items():
        values = attribute.get(name)
        if values:
            return _shared((tag, frozenset(values)))
    return None


def _shared(value: AttrSet) -> AttrSet:
    found = _shared_attr_sets.get(value)
    if found is None:
        if len(_shared_attr_sets) >= _SHARED_ATTR_SETS_MAX:
            _shared_attr_sets.clear()
        found = _shared_attr_sets[value] = value
    return found


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    if isinstance(value, Mapping):
        return tuple(sorted((key, _freeze(item)) for key, item in value.items()))
    return value


def cel_fingerprint(
    driver: str, raw: Mapping[str, Any], capacity: Mapping[str, CapacityRecord], allow_multiple: bool
) -> bytes:
    """What a CEL selector can observe of a device, as a 128-bit digest: the selector
    cache keeps one per distinct device, and the frozen content itself cost over 1 KB a
    device (a cluster of 40,000 devices that differ by a node attribute: 50 MB)."""
    attributes = raw.get("attributes") or {}
    content = (
        driver,
        _freeze(attributes),
        tuple(sorted((name, cap.value.nanos) for name, cap in capacity.items())),
        allow_multiple,
    )
    return hashlib.blake2b(repr(content).encode(), digest_size=16).digest()
