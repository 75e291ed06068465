"""Kubernetes resource quantities (``40Gi``, ``500m``, ``1e3``), exact.

Capacities, counters and consumed amounts in the DRA API are ``resource.Quantity``
values. The allocator sums and compares them, the CEL environment exposes them, and the
API must round-trip them losslessly, so this is an exact re-implementation of upstream's
semantics (``k8s.io/apimachinery/pkg/api/resource``), never floats:

- The value is held as an integer number of nano-units. Parsing rounds anything finer
  than ``1n`` *away from zero* to the next nano-unit, as upstream does ("if you ask for
  some resources you get some"). A BinarySI value above ``2**63 - 1`` saturates there.
- The format (BinarySI for ``Ki``..``Ei``, DecimalExponent for ``e``/``E``, DecimalSI
  otherwise) picks the canonical spelling that :meth:`Quantity.__str__` produces:
  the largest suffix that keeps the mantissa an integer (``1024Mi`` -> ``1Gi``,
  ``0.5`` -> ``500m``, ``1e3`` stays ``1e3`` as upstream; a BinarySI value below 1024 or
  with a fraction is written in DecimalSI).
- The text a quantity was parsed from is kept (:attr:`Quantity.original`) and is what a
  model serializes, so an object read from the API server dumps back unchanged.
- Equality, ordering and hashing go by value: ``Quantity("1Gi") == Quantity("1024Mi")``.

It is a top-level module, not part of :mod:`draco.api`, and imports no pydantic: the CEL
layer works with quantities too, and the operator's CEL worker process should load the
CEL evaluator alone, not every API model (importing any ``draco.api`` module loads them
all). Its pydantic hooks import pydantic when pydantic calls them, that is when a model
using it is built. :mod:`draco.api.quantity` re-exports it, the name the API uses.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import core_schema

__all__ = ["QUANTITY_PATTERN", "Quantity", "QuantityFormat"]

QuantityFormat = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

_NANO: Final = 10**9
_MAX_INT64: Final = 2**63 - 1
#: Exponents beyond this are rejected instead of building astronomically large integers;
#: upstream's decimal type cannot hold them either.
_MAX_EXPONENT: Final = 100

_BINARY_SUFFIXES: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_BY_POWER: Final = {power: suffix for suffix, power in _BINARY_SUFFIXES.items()}
_DECIMAL_BY_EXPONENT: Final = {exponent: suffix for suffix, exponent in _DECIMAL_SUFFIXES.items()}

_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)

#: The grammar, for error messages and JSON schemas.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$"
)


def _divide_away_from_zero(numerator: int, denominator: int) -> int:
    """Integer division that rounds any remainder away from zero (upstream's RoundUp)."""
    quotient, remainder = divmod(abs(numerator), denominator)
    if remainder:
        quotient += 1
    return quotient if numerator >= 0 else -quotient


def _canonical(nanos: int, fmt: QuantityFormat) -> str:
    if nanos == 0:
        return "0"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)
    if fmt == "BinarySI":
        if magnitude >= 1024 * _NANO and magnitude % _NANO == 0:
            mantissa = magnitude // _NANO
            power = 0
            while power < 6 and mantissa % 1024 == 0:
                mantissa //= 1024
                power += 1
            return f"{sign}{mantissa}{_BINARY_BY_POWER.get(power, '')}"
        fmt = "DecimalSI"
    mantissa, exponent = magnitude, -9
    while mantissa % 1000 == 0:
        mantissa //= 1000
        exponent += 3
    if fmt == "DecimalExponent" or exponent not in _DECIMAL_BY_EXPONENT:
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
    return f"{sign}{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[int, QuantityFormat]:
    # Cached: slices repeat the same few capacity strings thousands of times.
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"quantity {text!r} is not valid: expected a number with an optional suffix "
            "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3), "
            "for example '40Gi', '500m', '1.5' or '1e3'"
        )
    whole, _, fraction = match["number"].partition(".")
    # value = digits / 10**len(fraction) * multiplier; in nanos, with integers only.
    numerator = int((whole or "0") + fraction) * _NANO
    denominator = 10 ** len(fraction)
    fmt: QuantityFormat
    if match["binary"]:
        fmt = "BinarySI"
        numerator *= 1024 ** _BINARY_SUFFIXES[match["binary"]]
    else:
        if match["exponent"] is not None:
            fmt = "DecimalExponent"
            exponent = int(match["exponent"])
            if abs(exponent) > _MAX_EXPONENT:
                raise ValueError(f"quantity {text!r} is not valid: the exponent is out of range")
        else:
            fmt = "DecimalSI"
            exponent = _DECIMAL_SUFFIXES[match["decimal"]]
        if exponent >= 0:
            numerator *= 10**exponent
        else:
            denominator *= 10**-exponent
    nanos = _divide_away_from_zero(numerator, denominator)
    if fmt == "BinarySI" and nanos > _MAX_INT64 * _NANO:
        nanos = _MAX_INT64 * _NANO
    if match["sign"] == "-":
        nanos = -nanos
    return nanos, fmt


class Quantity:
    """An exact, immutable Kubernetes resource quantity.

    ``Quantity("40Gi")``, ``Quantity(8)``, ``Quantity.parse("500m")``. Arithmetic keeps the
    left operand's format (a zero left operand takes the right one's, as upstream does)
    and produces quantities without original text.
    """

    __slots__ = ("_format", "_nanos", "_original")

    _nanos: int
    _format: QuantityFormat
    _original: str | None

    def __init__(self, value: str | int | Quantity = 0) -> None:
        if isinstance(value, Quantity):
            nanos, fmt, original = value._nanos, value._format, value._original
        elif isinstance(value, bool):
            raise TypeError(f"a quantity cannot be made from the boolean {value!r}")
        elif isinstance(value, int):
            nanos, fmt, original = value * _NANO, "DecimalSI", None
        elif isinstance(value, str):
            nanos, fmt = _parse(value)
            original = value
        else:
            raise TypeError(f"a quantity is made from a string or an int, not {type(value).__name__}")
        object.__setattr__(self, "_nanos", nanos)
        object.__setattr__(self, "_format", fmt)
        object.__setattr__(self, "_original", original)

    # --- construction ------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse upstream's quantity syntax; raises ``ValueError`` naming the text."""
        return cls(text)

    @classmethod
    def from_json(cls, value: object) -> Quantity:
        """What JSON or YAML hold for an int-or-string quantity (``"40Gi"``, ``8``, and
        ``1.5``, which YAML makes a float); raises ``ValueError`` for anything else."""
        if isinstance(value, Quantity):
            return value
        if isinstance(value, str | int) and not isinstance(value, bool):
            return cls(value)
        if isinstance(value, float) and math.isfinite(value):
            # YAML turns `1.5` into a float; its shortest repr is the text the user wrote.
            return cls(repr(value))
        raise ValueError(f"a quantity must be a string or an integer, not {value!r}")

    @classmethod
    def from_nanos(cls, nanos: int, *, fmt: QuantityFormat = "DecimalSI") -> Quantity:
        """A quantity of ``nanos`` nano-units (``from_nanos(5)`` is ``5n``)."""
        quantity = cls.__new__(cls)
        object.__setattr__(quantity, "_nanos", int(nanos))
        object.__setattr__(quantity, "_format", fmt)
        object.__setattr__(quantity, "_original", None)
        return quantity

    @classmethod
    def from_milli(cls, milli: int, *, fmt: QuantityFormat = "DecimalSI") -> Quantity:
        """A quantity of ``milli`` thousandths (``from_milli(1500)`` is ``1500m``)."""
        return cls.from_nanos(milli * 10**6, fmt=fmt)

    @classmethod
    def from_fraction(cls, value: Fraction | int, *, fmt: QuantityFormat = "DecimalSI") -> Quantity:
        """The quantity nearest ``value``, rounding sub-nano parts away from zero."""
        scaled = Fraction(value) * _NANO
        return cls.from_nanos(_divide_away_from_zero(scaled.numerator, scaled.denominator), fmt=fmt)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self._nanos, self._format, self._original))

    # --- views -------------------------------------------------------------------------

    @property
    def format(self) -> QuantityFormat:
        """``BinarySI``, ``DecimalSI`` or ``DecimalExponent`` (from the suffix it was parsed with)."""
        return self._format

    @property
    def original(self) -> str | None:
        """The text this quantity was parsed from; ``None`` for computed quantities."""
        return self._original

    @property
    def nanos(self) -> int:
        """The exact value in nano-units."""
        return self._nanos

    def to_json(self) -> str:
        """What a model serializes: the original text if any, else the canonical form."""
        return self._original if self._original is not None else str(self)

    def as_fraction(self) -> Fraction:
        return Fraction(self._nanos, _NANO)

    def scaled_value(self, scale: int) -> int:
        """The value in units of ``10**scale``, rounded away from zero (upstream ScaledValue)."""
        exponent = scale + 9
        if exponent >= 0:
            return _divide_away_from_zero(self._nanos, 10**exponent)
        return self._nanos * int(10 ** (-exponent))

    def value(self) -> int:
        """The value as an integer, rounded away from zero (upstream ``Value()``)."""
        return self.scaled_value(0)

    def as_integer(self) -> int:
        """Same as :meth:`value`: the integer value, fractions rounded away from zero."""
        return self.value()

    def milli_value(self) -> int:
        """The value in thousandths, rounded away from zero (upstream ``MilliValue()``)."""
        return self.scaled_value(-3)

    def as_int64(self) -> int | None:
        """The value if it is an integer within int64, else ``None`` (upstream ``AsInt64``)."""
        if not self.is_integer():
            return None
        value = self._nanos // _NANO
        return value if -(2**63) <= value <= _MAX_INT64 else None

    def is_integer(self) -> bool:
        return self._nanos % _NANO == 0

    def is_zero(self) -> bool:
        return self._nanos == 0

    def sign(self) -> int:
        return (self._nanos > 0) - (self._nanos < 0)

    def as_approximate_float(self) -> float:
        return self._nanos / _NANO

    def compare(self, other: Quantity | int | str) -> int:
        """-1, 0 or 1 as ``self`` is less than, equal to or greater than ``other``."""
        theirs = _coerce(other)
        return (self._nanos > theirs._nanos) - (self._nanos < theirs._nanos)

    # --- arithmetic --------------------------------------------------------------------

    def _result(self, nanos: int, other: Quantity | None = None) -> Quantity:
        fmt = other._format if other is not None and self._nanos == 0 else self._format
        return Quantity.from_nanos(nanos, fmt=fmt)

    def __add__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._result(self._nanos + other._nanos, other)

    def __sub__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._result(self._nanos - other._nanos, other)

    def __mul__(self, other: object) -> Quantity:
        if isinstance(other, bool) or not isinstance(other, int):
            return NotImplemented
        return self._result(self._nanos * other)

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> Quantity:
        """Division by an int, rounding sub-nano remainders away from zero."""
        if isinstance(other, bool) or not isinstance(other, int):
            return NotImplemented
        if other == 0:
            raise ZeroDivisionError("quantity division by zero")
        quotient = _divide_away_from_zero(self._nanos, abs(other))
        return self._result(quotient if other > 0 else -quotient)

    def __floordiv__(self, other: object) -> Any:
        """``q // n`` (int): a quantity, floored to the nano-unit; ``q // q2``: an int."""
        if isinstance(other, Quantity):
            return self._nanos // other._nanos
        if isinstance(other, bool) or not isinstance(other, int):
            return NotImplemented
        return self._result(self._nanos // other)

    def __mod__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._result(self._nanos % other._nanos)

    def __neg__(self) -> Quantity:
        return self._result(-self._nanos)

    def __pos__(self) -> Quantity:
        return self

    def __abs__(self) -> Quantity:
        return self._result(abs(self._nanos))

    def __bool__(self) -> bool:
        return self._nanos != 0

    # --- comparison --------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self._nanos == other._nanos
        if isinstance(other, int) and not isinstance(other, bool):
            return self._nanos == other * _NANO
        return NotImplemented

    def __hash__(self) -> int:
        return hash(Fraction(self._nanos, _NANO))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity | int) or isinstance(other, bool):
            return NotImplemented
        return self.compare(other) < 0

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Quantity | int) or isinstance(other, bool):
            return NotImplemented
        return self.compare(other) <= 0

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Quantity | int) or isinstance(other, bool):
            return NotImplemented
        return self.compare(other) > 0

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Quantity | int) or isinstance(other, bool):
            return NotImplemented
        return self.compare(other) >= 0

    # --- text --------------------------------------------------------------------------

    def __str__(self) -> str:
        return _canonical(self._nanos, self._format)

    def __repr__(self) -> str:
        return f"Quantity({self.to_json()!r})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    # --- pydantic ----------------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            Quantity.from_json,
            serialization=core_schema.plain_serializer_function_ser_schema(
                Quantity.to_json, return_schema=core_schema.str_schema()
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string", "pattern": QUANTITY_PATTERN}],
            "x-kubernetes-int-or-string": True,
        }


def _restore(nanos: int, fmt: QuantityFormat, original: str | None) -> Quantity:
    quantity = Quantity.from_nanos(nanos, fmt=fmt)
    object.__setattr__(quantity, "_original", original)
    return quantity


def _coerce(value: Quantity | int | str) -> Quantity:
    return value if isinstance(value, Quantity) else Quantity(value)
