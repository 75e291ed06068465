"""The structural pass: every field known, every value of the right JSON type.

kube-apiserver decodes a request into Go structs before any rule runs, and with strict
field validation (kubectl's default) an unknown field fails the request; a wrong type
(`count: "two"`) fails decoding. Admission hands draco the raw JSON, so this module checks
the raw dict against the `resource.k8s.io/v1` shape (see `shapes`) and reports each problem
as a field error. The rules in the other modules run only on objects that pass, so they can
trust the types.

`null` is accepted anywhere and means "unset", as Go's decoder treats it; `strip_nulls`
returns the object without them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from draco.errors import FieldError
from draco.validation.fielderrors import NO_VALUE, FieldPath, invalid

__all__ = [
    "BOOL",
    "INT",
    "QUANTITY",
    "RAW",
    "STRING",
    "TIME",
    "ListOf",
    "MapOf",
    "Node",
    "Obj",
    "Scalar",
    "check_shape",
    "strip_nulls",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")


@dataclass(frozen=True)
class Scalar:
    """A leaf: string, int64, bool, quantity, RFC 3339 time, or any JSON (`raw`)."""

    kind: str


STRING = Scalar("string")
INT = Scalar("int64")
BOOL = Scalar("boolean")
QUANTITY = Scalar("quantity")
TIME = Scalar("time")
RAW = Scalar("raw")


@dataclass(frozen=True)
class ListOf:
    item: Node


@dataclass(frozen=True)
class MapOf:
    value: Node


@dataclass(frozen=True)
class Obj:
    """A struct: its known fields. `name` is the Go type, for messages."""

    name: str
    fields: Mapping[str, Node] = field(default_factory=dict)


Node = Scalar | ListOf | MapOf | Obj


def _type_word(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _quantity_ok(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    if not isinstance(value, str) or not _QUANTITY.match(value.strip()):
        return False
    from draco.api.quantity import Quantity

    try:
        Quantity.parse(value)
    except (ValueError, ArithmeticError):
        return False
    return True


def _time_ok(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value


def _check_scalar(node: Scalar, value: Any, path: FieldPath) -> list[FieldError]:
    ok: bool
    if node.kind == "string":
        ok = isinstance(value, str)
    elif node.kind == "int64":
        ok = isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX
    elif node.kind == "boolean":
        ok = isinstance(value, bool)
    elif node.kind == "quantity":
        if not _quantity_ok(value):
            return [
                invalid(
                    path,
                    value,
                    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                )
            ]
        return []
    elif node.kind == "time":
        ok = _time_ok(value)
        if not ok:
            return [invalid(path, value, "must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")]
        return []
    else:
        return []
    if ok:
        return []
    return [invalid(path, value, f"cannot decode {_type_word(value)} into a field of type {node.kind}")]


def check_shape(node: Node, value: Any, path: FieldPath) -> list[FieldError]:
    """Unknown fields and wrong JSON types under `value`, as field errors."""
    if value is None:
        return []
    if isinstance(node, Scalar):
        return _check_scalar(node, value, path)
    if isinstance(node, ListOf):
        if not isinstance(value, list):
            return [invalid(path, NO_VALUE, f"cannot decode {_type_word(value)} into a list")]
        errs: list[FieldError] = []
        for i, item in enumerate(value):
            errs.extend(check_shape(node.item, item, path.index(i)))
        return errs
    if isinstance(node, MapOf):
        if not isinstance(value, dict):
            return [invalid(path, NO_VALUE, f"cannot decode {_type_word(value)} into a map")]
        errs = []
        for k, item in value.items():
            errs.extend(check_shape(node.value, item, path.key(str(k))))
        return errs
    if not isinstance(value, dict):
        return [
            invalid(path, NO_VALUE, f"cannot decode {_type_word(value)} into an object of type {node.name}")
        ]
    errs = []
    for k, item in value.items():
        sub = node.fields.get(k)
        if sub is None:
            errs.append(invalid(path.child(k), NO_VALUE, f'unknown field "{path.child(k)}"'))
            continue
        errs.extend(check_shape(sub, item, path.child(k)))
    return errs


def strip_nulls(value: Any) -> Any:
    """A copy of `value` without `null` map entries (Go's decoder leaves those unset)."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value
