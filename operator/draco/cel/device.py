"""The `device` variable of a DRA selector, built once per device.

A ResourceSlice lists attributes and capacities under names that are qualified
(`gpu.example.com/model`) or not (`model`, which belongs to the driver's domain). CEL sees
them grouped by domain — `device.attributes["gpu.example.com"].model` — so the view
regroups them once, when it is built, and every selector evaluated on the device reuses
the same plain dictionaries. Versions arrive as `SemVer` values so selectors can call
`.isGreaterThan()` on them.

A view is built from an API `Device` model (`from_device`) or from the device's published
JSON (`from_wire`): the operator's CEL worker process gets the JSON and imports no API
model, and so no pydantic, which keeps that process small.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from draco.cel.semver import SemVer, SemVerError
from draco.cel.values import DomainMap
from draco.quantity import Quantity

if TYPE_CHECKING:
    from draco.api import Device

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
    # the qualified one, as Kubernetes 1.38 does (1.37 picked by Go's map order).
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
        attributes = ((name, attr.kind, attr.value) for name, attr in (device.attributes or {}).items())
        return cls._build(
            driver,
            pool,
            device.name,
            attributes,
            {name: cap.value for name, cap in (device.capacity or {}).items()},
            bool(device.allow_multiple_allocations),
        )

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any], *, driver: str, pool: str = "") -> DeviceView:
        """The view of a device as published (its JSON shape: ``attributes``,
        ``capacity``, ``allowMultipleAllocations``), the same as `from_device` of the
        `Device` built from it, without building that model."""
        attributes = ((name, *_wire_attribute(attr)) for name, attr in (raw.get("attributes") or {}).items())
        capacity = {
            name: Quantity.from_json(cap["value"]) for name, cap in (raw.get("capacity") or {}).items()
        }
        return cls._build(
            driver,
            pool,
            raw.get("name", ""),
            attributes,
            capacity,
            bool(raw.get("allowMultipleAllocations")),
        )

    @classmethod
    def _build(
        cls,
        driver: str,
        pool: str,
        name: str,
        attributes: Iterable[tuple[str, str | None, Any]],
        capacity: Mapping[str, Quantity],
        allow_multiple_allocations: bool,
    ) -> DeviceView:
        values: dict[str, AttrValue] = {}
        unusable: str | None = None
        for attribute, kind, value in attributes:
            try:
                values[attribute] = _attribute_value(kind, value)
            except _UnusableAttribute as err:
                unusable = unusable or f"attribute {attribute}: {err}"
        return cls(
            driver, values, capacity, allow_multiple_allocations, name=name, pool=pool, unusable=unusable
        )


#: A DeviceAttribute's JSON keys, in the order its value is looked for.
_ATTRIBUTE_KINDS: Final = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")


def _wire_attribute(attribute: Mapping[str, Any]) -> tuple[str | None, Any]:
    """(kind, value) of the first value a published DeviceAttribute sets; (None, None) if none."""
    for kind in _ATTRIBUTE_KINDS:
        value = attribute.get(kind)
        if value is not None:
            return kind, value
    return None, None


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


def _attribute_value(kind: str | None, value: Any) -> AttrValue:
    """The CEL value of an attribute of `kind` (int, bool, string, version or their lists)."""
    if kind in ("int", "bool", "string"):
        return value  # type: ignore[no-any-return]
    if kind == "version":
        return _version(value)
    if kind in ("ints", "bools", "strings"):
        return tuple(value)
    if kind == "versions":
        return tuple(_version(v) for v in value)
    raise _UnusableAttribute("unsupported attribute value")
