"""CEL runtime values and the operations on them, on plain Python objects.

Values are native Python objects so that device data needs no wrapping per evaluation:
`int` (int64), `UInt`, `float`, `bool`, `str`, `bytes`, `None` (null), lists (list or
tuple), maps (dict), `Quantity`, `SemVer` and `OptionalValue`. Python's `bool` is an
`int`, so every operation here checks exact types where CEL keeps them apart
(`true == 1` is false in CEL, and `true + 1` is an error).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from draco.cel.netlib import CIDR, IP
from draco.cel.semver import SemVer
from draco.quantity import Quantity

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "UINT64_MAX",
    "EvalError",
    "OptionalValue",
    "UInt",
    "cel_compare",
    "cel_equal",
    "check_int",
    "is_list",
    "is_map",
    "type_name",
]

INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)
UINT64_MAX: Final = 2**64 - 1


class EvalError(Exception):
    """A CEL evaluation error (no such key, no such overload, overflow...).

    `&&`, `||` and the `all`/`exists` macros absorb it when the other side decides the
    result, as CEL specifies; anything else makes the whole evaluation fail.
    """


class UInt(int):
    """A CEL `uint`, distinct from `int` (`1u == 1` is still true: numbers compare by value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class OptionalValue:
    """A CEL `optional(T)`: a value or none, from `.?`, `[?k]` and `optional.of()`."""

    __slots__ = ("value",)
    _MISSING: Final = object()

    def __init__(self, value: Any = _MISSING) -> None:
        self.value = value

    @property
    def has_value(self) -> bool:
        return self.value is not OptionalValue._MISSING

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.has_value else "optional.none()"


OPTIONAL_NONE: Final = OptionalValue()


def check_int(value: int) -> int:
    if value > INT64_MAX or value < INT64_MIN:
        raise EvalError("return error for overflow")
    return value


def check_uint(value: int) -> UInt:
    if value > UINT64_MAX or value < 0:
        raise EvalError("return error for overflow")
    return UInt(value)


def is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def is_map(value: Any) -> bool:
    return isinstance(value, Mapping)


def type_name(value: Any) -> str:
    """The CEL type name of a runtime value, for error messages."""
    if value is None:
        return "null_type"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, UInt):
        return "uint"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if is_list(value):
        return "list"
    if is_map(value):
        return "map"
    if isinstance(value, Quantity):
        return "kubernetes.Quantity"
    if isinstance(value, SemVer):
        return "kubernetes.Semver"
    if isinstance(value, OptionalValue):
        return "optional_type"
    if isinstance(value, IP):
        return "net.IP"
    if isinstance(value, CIDR):
        return "net.CIDR"
    kind = type(value).__name__
    if kind in ("Duration", "Timestamp"):
        return f"google.protobuf.{kind}"
    return kind


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def cel_equal(left: Any, right: Any) -> bool:
    """CEL's heterogeneous equality: values of different kinds are unequal, not an error."""
    left_type = type(left)
    if left_type is type(right) and left_type in (str, int, bool, bytes):
        return bool(left == right)
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if isinstance(left, bool) or isinstance(right, bool):
        return left_type is type(right) and left == right
    if isinstance(left, str) or isinstance(right, str) or isinstance(left, bytes) or isinstance(right, bytes):
        return left_type is type(right) and bool(left == right)
    if left is None or right is None:
        return left is right
    if is_list(left) and is_list(right):
        return len(left) == len(right) and all(cel_equal(a, b) for a, b in zip(left, right, strict=True))
    if is_map(left) and is_map(right):
        if len(left) != len(right):
            return False
        for key, value in left.items():
            other = _map_get(right, key)
            if other is _ABSENT or not cel_equal(value, other):
                return False
        return True
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        return left.compare(right) == 0
    if isinstance(left, SemVer) and isinstance(right, SemVer):
        return left.compare(right) == 0
    if isinstance(left, (IP, CIDR)) and type(left) is type(right):
        return left == right
    if type(left).__name__ in ("Duration", "Timestamp") and type(left) is type(right):
        return bool(left == right)
    if isinstance(left, OptionalValue) and isinstance(right, OptionalValue):
        if left.has_value and right.has_value:
            return cel_equal(left.value, right.value)
        return left.has_value == right.has_value
    return False


_ABSENT: Final = object()


def _map_get(mapping: Mapping[Any, Any], key: Any) -> Any:
    for candidate, value in mapping.items():
        if cel_equal(candidate, key):
            return value
    return _ABSENT


def cel_compare(left: Any, right: Any, op: str) -> int:
    """-1, 0 or 1 for the ordering operators; EvalError where CEL has no such overload."""
    if _is_number(left) and _is_number(right):
        if left != left or right != right:  # NaN: every ordering is false
            return 2
        return -1 if left < right else (1 if left > right else 0)
    left_type = type(left)
    if left_type is type(right) and left_type in (str, bytes, bool):
        return -1 if left < right else (1 if left > right else 0)
    if left_type is type(right) and left_type.__name__ in ("Duration", "Timestamp"):
        a, b = left.nanos, right.nanos
        return -1 if a < b else (1 if a > b else 0)
    raise EvalError(f"no such overload: {type_name(left)} {op} {type_name(right)}")


class DomainMap(dict[str, Any]):
    """`device.attributes` / `device.capacity`: an unknown domain reads as an empty map.

    Upstream gives every domain a map so `device.attributes["other.example.com"]` is
    `{}` rather than an error; `in` and iteration still see only the domains present.
    """

    __slots__ = ()

    def __missing__(self, key: str) -> Mapping[str, Any]:
        return EMPTY_MAP


EMPTY_MAP: Final[Mapping[str, Any]] = MappingProxyType({})
