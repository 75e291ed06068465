"""The runtime half of the DRA CEL evaluator: evaluation state, cost counting, indexing,
arithmetic and the comprehension loops that compiled closures call.

Kept apart from the translation (`compiler`) so what runs per device is easy to read and
to measure: nothing here looks at syntax, and every error is an `EvalError` (or a
`CostLimitExceeded`, which nothing absorbs).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, Final

from draco.cel import timelib
from draco.cel.values import (
    EvalError,
    UInt,
    cel_equal,
    check_int,
    check_uint,
    is_list,
    is_map,
    type_name,
)

__all__ = [
    "ARITHMETIC",
    "UNSET",
    "Activation",
    "CostLimitExceeded",
    "Fn",
    "MissingKey",
    "call_function",
    "index_value",
]

Fn = Callable[["Activation"], Any]


class CostLimitExceeded(Exception):
    """The runtime cost counter passed its limit; never absorbed by `&&`, `||` or macros."""


class Activation:
    """The state of one evaluation: variable values and the cost spent so far."""

    __slots__ = ("cost", "limit", "vars")

    def __init__(self, variables: dict[str, Any], *, limit: int) -> None:
        self.vars = variables
        self.cost = 0
        self.limit = limit

    def charge(self, amount: int) -> None:
        self.cost += amount
        if self.cost > self.limit:
            raise CostLimitExceeded(f"operation cancelled: actual cost limit exceeded ({self.limit})")


UNSET: Final = object()


class MissingKey(EvalError):
    pass


def index_value(container: Any, key: Any) -> Any:
    if is_map(container):
        if type(key) is str:
            try:
                return container[key]
            except KeyError:
                raise MissingKey(f"no such key: {key}") from None
        for candidate, value in container.items():
            if cel_equal(candidate, key):
                return value
        raise MissingKey(f"no such key: {key}")
    if is_list(container):
        if type(key) is float and key.is_integer():
            key = int(key)
        if type(key) not in (int, UInt):
            raise EvalError(f"no such overload: list[{type_name(key)}]")
        if key < 0 or key >= len(container):
            raise MissingKey(f"index out of range: {key}")
        return container[key]
    raise EvalError(f"no such overload: {type_name(container)}[{type_name(key)}]")


def call_function(impl: Callable[..., Any], name: str, values: list[Any]) -> Any:
    try:
        return impl(*values)
    except EvalError:
        raise
    except (TypeError, ValueError, ArithmeticError) as err:
        raise EvalError(f"{name}: {err}") from None


def _int_div(a: int, b: int) -> int:
    if b == 0:
        raise EvalError("division by zero")
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _int_mod(a: int, b: int) -> int:
    if b == 0:
        raise EvalError("modulus by zero")
    remainder = abs(a) % abs(b)
    return remainder if a >= 0 else -remainder


def _numeric(
    op: Callable[[Any, Any], Any], *, int_op: Callable[[int, int], int] | None = None
) -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        kind = type(a)
        if kind is int:
            return check_int((int_op or op)(a, b))
        if kind is UInt:
            return check_uint((int_op or op)(int(a), int(b)))
        if kind is float:
            try:
                return float(op(a, b))
            except ZeroDivisionError:
                if a == 0 or a != a:
                    return math.nan
                return math.copysign(math.inf, a) * math.copysign(1.0, b)
        raise EvalError(f"no such overload: {type_name(a)} arithmetic {type_name(b)}")

    return apply


_numeric_add = _numeric(operator.add)
_numeric_mod = _numeric(_int_mod)


def _add(a: Any, b: Any) -> Any:
    kind = type(a)
    if kind in (str, bytes):
        return a + b
    if kind in (list, tuple):
        return [*a, *b]
    if isinstance(a, (timelib.Duration, timelib.Timestamp)):
        return timelib.add(a, b)
    return _numeric_add(a, b)


_numeric_sub = _numeric(operator.sub)


def _sub(a: Any, b: Any) -> Any:
    if isinstance(a, (timelib.Duration, timelib.Timestamp)):
        return timelib.subtract(a, b)
    return _numeric_sub(a, b)


def _mod(a: Any, b: Any) -> Any:
    if type(a) is float:
        raise EvalError("no such overload: double % double")
    return _numeric_mod(a, b)


ARITHMETIC: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "add": _add,
    "sub": _sub,
    "mul": _numeric(operator.mul),
    "div": _numeric(operator.truediv, int_op=_int_div),
    "mod": _mod,
}
