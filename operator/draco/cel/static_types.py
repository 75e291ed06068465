"""The static types the DRA CEL compiler reasons with, for compile-time errors.

Upstream type-checks selectors: `device.driver == 1` or `device.model` are rejected when a
class is created, not when the allocator first meets a device. This is a small checker,
enough for DRA: a type is a kind plus, for lists and maps, the element type; `dyn`
(attribute values, whose type depends on the device) is accepted wherever a value is.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BOOL",
    "BYTES",
    "CIDR",
    "DEVICE",
    "DOUBLE",
    "DURATION",
    "DYN",
    "INT",
    "IP",
    "NULL",
    "QUANTITY",
    "SEMVER",
    "STRING",
    "TIMESTAMP",
    "UINT",
    "CelType",
    "list_of",
    "map_of",
    "optional_of",
]


@dataclass(frozen=True, slots=True)
class CelType:
    kind: str
    elem: CelType | None = None

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list({self.elem})"
        if self.kind == "map":
            return f"map(string, {self.elem})"
        if self.kind == "optional":
            return f"optional_type({self.elem})"
        return self.kind

    @property
    def is_dyn(self) -> bool:
        return self.kind == "dyn"

    def accepts(self, *kinds: str) -> bool:
        """Whether a value of this type may be one of `kinds` (dyn may be anything)."""
        return self.kind == "dyn" or self.kind in kinds

    @property
    def element(self) -> CelType:
        return self.elem if self.elem is not None else DYN


BOOL = CelType("bool")
INT = CelType("int")
UINT = CelType("uint")
DOUBLE = CelType("double")
STRING = CelType("string")
BYTES = CelType("bytes")
NULL = CelType("null_type")
DYN = CelType("dyn")
QUANTITY = CelType("kubernetes.Quantity")
SEMVER = CelType("kubernetes.Semver")
DEVICE = CelType("kubernetes.DRADevice")
IP = CelType("net.IP")
CIDR = CelType("net.CIDR")
DURATION = CelType("google.protobuf.Duration")
TIMESTAMP = CelType("google.protobuf.Timestamp")
NUMERIC_KINDS = ("int", "uint", "double")


def list_of(elem: CelType) -> CelType:
    return CelType("list", elem)


def map_of(elem: CelType) -> CelType:
    return CelType("map", elem)


def optional_of(elem: CelType) -> CelType:
    return CelType("optional", elem)
