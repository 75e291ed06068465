"""Field paths and field errors worded the way kube-apiserver words them.

Every rule in this package reports a `draco.errors.FieldError` whose `type` is the API
server's vocabulary (Required, Invalid, TooLong, TooMany, Duplicate, NotSupported,
Forbidden, Internal). `render` turns one into the line kubectl would print, e.g.
``spec.devices.requests[0].name: Invalid value: "GPU": a lowercase RFC 1123 label ...``,
so a user of draco reads the same sentences as a user of the native API.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from draco.errors import FieldError

__all__ = [
    "NO_VALUE",
    "FieldPath",
    "duplicate",
    "forbidden",
    "internal",
    "invalid",
    "not_supported",
    "render",
    "render_all",
    "required",
    "too_long",
    "too_many",
]


class _NoValue:
    """Marks an Invalid error whose value is not worth printing (unknown fields, blobs)."""

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE = _NoValue()


@dataclass(frozen=True, slots=True)
class FieldPath:
    """An immutable path into an object: `spec.devices.requests[0].name`."""

    text: str = ""

    def child(self, *names: str) -> FieldPath:
        text = self.text
        for name in names:
            text = f"{text}.{name}" if text else name
        return FieldPath(text)

    def index(self, i: int) -> FieldPath:
        return FieldPath(f"{self.text}[{i}]")

    def key(self, k: str) -> FieldPath:
        return FieldPath(f"{self.text}[{k}]")

    def __str__(self) -> str:
        return self.text


def required(path: FieldPath, detail: str = "") -> FieldError:
    return FieldError(str(path), "Required", detail)


def invalid(path: FieldPath, value: object, detail: str) -> FieldError:
    return FieldError(str(path), "Invalid", detail, value)


def forbidden(path: FieldPath, detail: str) -> FieldError:
    return FieldError(str(path), "Forbidden", detail)


def internal(path: FieldPath, detail: str) -> FieldError:
    return FieldError(str(path), "Internal", detail)


def too_long(path: FieldPath, max_length: int) -> FieldError:
    return FieldError(str(path), "TooLong", f"may not be more than {max_length} bytes", max_length)


def too_many(path: FieldPath, actual: int, max_items: int) -> FieldError:
    return FieldError(str(path), "TooMany", f"must have at most {max_items} items", actual)


def duplicate(path: FieldPath, value: object) -> FieldError:
    return FieldError(str(path), "Duplicate", "", value)


def not_supported(path: FieldPath, value: object, supported: Sequence[str]) -> FieldError:
    listed = ", ".join(json.dumps(s) for s in supported)
    return FieldError(str(path), "NotSupported", f"supported values: {listed}", value)


_TYPE_WORDS = {
    "Required": "Required value",
    "Invalid": "Invalid value",
    "TooLong": "Too long",
    "TooMany": "Too many",
    "Duplicate": "Duplicate value",
    "NotSupported": "Unsupported value",
    "Forbidden": "Forbidden",
    "Internal": "Internal error",
}
# Types whose rendering shows the offending value, as apimachinery's field.Error does.
_SHOWS_VALUE = {"Invalid", "TooMany", "Duplicate", "NotSupported"}


def _show(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return "null"
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def render(error: FieldError) -> str:
    """One error as kube-apiserver prints it: ``<path>: <Type words>[: <value>][: <detail>]``."""
    body = _TYPE_WORDS.get(error.type, error.type)
    if error.type in _SHOWS_VALUE and error.value is not NO_VALUE:
        body = f"{body}: {_show(error.value)}"
    if error.detail:
        body = f"{body}: {error.detail}"
    return f"{error.path}: {body}" if error.path else body


def render_all(errors: Iterable[FieldError]) -> str:
    """Several errors joined like the API server's aggregate: ``[a, b]`` when more than one."""
    lines = [render(e) for e in errors]
    if len(lines) == 1:
        return lines[0]
    return "[" + ", ".join(lines) + "]"
