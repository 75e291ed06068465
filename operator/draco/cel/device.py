"""The `device` variable of a DRA selector, built once per device.

A ResourceSlice lists attributes and capacities under names that are qualified
(`gpu.example.com/model`) or not (`model`, which belongs to the driver's domain). CEL sees
them grouped by domain — `device.attributes["gpu.example.com"].model` — so the view
regroups them once, when it is built, and every selector evaluated on the device reuses
the same plain dictionaries. Versions arrive as `SemVer` values so selectors can call
`.isGreaterThan()` on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeAlias

from draco.api import Device, DeviceAttribute
from draco.api.quantity import Quantity
from draco.cel.semver import SemVer, SemVerError
from draco.cel.values import DomainMap

__all__ = ["AttrValue", "DeviceView", "split_qualified_name"]

Scalar: TypeAlias = int | bool | str | SemVer
AttrValue: TypeAlias = Scalar | Sequence[Scalar]


def split_qualified_name(name: str, *, driver: str) -> tuple[str, str]:
    """(domain, id) of an attribute or capacity name; unqualified names are the driver's."""
    domain, slash, ident = name.partition("/")
    return (domain, ident) if slash else (driver, name)


def _grouped(values: Mapping[str, Any], *, driver: str) -> DomainMap:
    grouped = DomainMap()
    # Qualified names last: a device publishing both `model` and `<driver>/model` shows
    # the qualified one (upstream's choice depends on Go's map order).
    for name, value in sorted(values.items(), key=lambda item: "/" in item[0]):
        domain, ident = split_qualified_name(name, driver=driver)
        if isinstance(value, list):
            value = tuple(value)
        grouped.setdefault(domain, {})[ident] = value
    return grouped


class DeviceView:
    """One device as CEL sees it; immutable once built, safe to share across evaluations."""

    __slots__ = (
        "allow_multiple_allocations",
        "attributes",
        "capacity",
        "cel_value",
        "driver",
        "name",
        "pool",
        "unusable",
    )

    def __init__(
        self,
        driver: str,
        attributes: Mapping[str, AttrValue],
        capacity: Mapping[str, Quantity],
        allow_multiple_allocations: bool,
        name: str = "",
        pool: str = "",
        *,
        unusable: str | None = None,
    ) -> None:
        self.driver = driver
        # Why CEL cannot see this device as published (an unparsable version): every
        # selector evaluated on it fails with this reason, as upstream's DeviceMatches does.
        self.unusable = unusable
        self.name = name
        self.pool = pool
        self.attributes = dict(attributes)
        self.capacity = dict(capacity)
        self.allow_multiple_allocations = bool(allow_multiple_allocations)
        self.cel_value: dict[str, Any] = {
            "driver": driver,
            "attributes": _grouped(self.attributes, driver=driver),
            "capacity": _grouped(self.capacity, driver=driver),
            "allowMultipleAllocations": self.allow_multiple_allocations,
        }

    @property
    def id(self) -> str:
        """`driver/pool/device`, how error messages name the device."""
        return f"{self.driver}/{self.pool}/{self.name}"

    def __repr__(self) -> str:
        return f"DeviceView({self.id!r})"

    @classmethod
    def from_device(cls, device: Device, *, driver: str, pool: str = "") -> DeviceView:
        """The view of an API `Device` published by `driver` in `pool`.

        `version` attributes become SemVer values. An attribute without a usable value (a
        version that does not parse; API validation keeps them out) makes the view
        `unusable`: selectors then fail on this device with the reason, like upstream.
        """
        attributes: dict[str, AttrValue] = {}
        unusable: str | None = None
        for name, attribute in (device.attributes or {}).items():
            try:
                attributes[name] = _attribute_value(attribute)
            except _UnusableAttribute as err:
                unusable = unusable or f"attribute {name}: {err}"
        capacity = {name: cap.value for name, cap in (device.capacity or {}).items()}
        return cls(
            driver,
            attributes,
            capacity,
            bool(device.allow_multiple_allocations),
            name=device.name,
            pool=pool,
            unusable=unusable,
        )


class _UnusableAttribute(Exception):
    """An attribute sets no value CEL can represent."""


@lru_cache(maxsize=4096)
def _parse_version(text: str) -> SemVer:
    # Devices of one driver share a handful of versions; SemVer values are immutable.
    return SemVer.parse(text)


def _version(text: str) -> SemVer:
    try:
        return _parse_version(text)
    except SemVerError as err:
        raise _UnusableAttribute(f"parse semantic version: {err}") from None


def _attribute_value(attribute: DeviceAttribute) -> AttrValue:
    """The one value a DeviceAttribute sets (int, bool, string, version or their lists)."""
    if attribute.int_ is not None:
        return attribute.int_
    if attribute.bool_ is not None:
        return attribute.bool_
    if attribute.string is not None:
        return attribute.string
    if attribute.version is not None:
        return _version(attribute.version)
    if attribute.ints is not None:
        return tuple(attribute.ints)
    if attribute.bools is not None:
        return tuple(attribute.bools)
    if attribute.strings is not None:
        return tuple(attribute.strings)
    if attribute.versions is not None:
        return tuple(_version(v) for v in attribute.versions)
    raise _UnusableAttribute("unsupported attribute value")
