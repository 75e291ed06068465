"""The functions of the DRA CEL environment: CEL's standard ones that DRA selectors use,
the Kubernetes string, list, regex, quantity and semver libraries, optionals, and DRA's
`includes()`.

Each entry pairs a runtime implementation on plain values (see `values`) with the static
facts the compiler checks: which receiver kinds a method applies to, how many arguments
it takes and of what kinds, and the type of its result. An argument of the wrong kind at
run time is an `EvalError` ("no such overload"), as in cel-go.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from draco.cel import netlib, regex, timelib
from draco.cel.regex import Regex
from draco.cel.semver import SemVer, SemVerError
from draco.cel.static_types import (
    BOOL,
    BYTES,
    CIDR,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    IP,
    QUANTITY,
    SEMVER,
    STRING,
    TIMESTAMP,
    UINT,
    CelType,
    list_of,
)
from draco.cel.values import (
    INT64_MIN,
    OPTIONAL_NONE,
    EvalError,
    OptionalValue,
    UInt,
    cel_compare,
    cel_equal,
    check_int,
    check_uint,
    is_list,
    is_map,
    type_name,
)
from draco.quantity import Quantity

__all__ = ["GLOBAL_FUNCTIONS", "MEMBER_FUNCTIONS", "NAMESPACES", "Function", "compile_regex"]

# The most entries `includes()` accepts, like upstream's list-attribute limit.
MAX_INCLUDES_LIST = 48

ResultType = CelType | Callable[[CelType, Sequence[CelType]], CelType]


@dataclass(frozen=True, slots=True)
class Function:
    """One function or method, with every overload folded into one implementation.

    `receivers` lists the receiver kinds of a method (None for a global function);
    `params` maps an argument count to the kinds each argument may have ("*" for any).
    `linear` marks functions whose cost grows with the length of their string or list
    operands; the evaluator charges those by length.
    """

    name: str
    impl: Callable[..., Any]
    params: dict[int, tuple[tuple[str, ...], ...]]
    result: ResultType
    receivers: tuple[str, ...] | None = None
    linear: bool = False

    def result_type(self, receiver: CelType, args: Sequence[CelType]) -> CelType:
        return self.result if isinstance(self.result, CelType) else self.result(receiver, args)


def _overload(name: str, *values: Any) -> EvalError:
    return EvalError(f"no such overload: {name}({', '.join(type_name(v) for v in values)})")


def _expect_str(name: str, value: Any) -> str:
    if type(value) is not str:
        raise _overload(name, value)
    return value


def _expect_int(name: str, value: Any) -> int:
    if type(value) is not int:
        raise _overload(name, value)
    return value


# --- conversions and size -------------------------------------------------------------


def _size(value: Any) -> int:
    if isinstance(value, (str, bytes)) or is_list(value) or is_map(value):
        return len(value)
    raise _overload("size", value)


# Python's int() also accepts spaces and underscores; CEL's (Go's ParseInt) does not.
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+\Z")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _overload("int", value)
    if isinstance(value, timelib.Timestamp):
        return value.unix_seconds
    if isinstance(value, timelib.Duration):
        return value.nanos
    if isinstance(value, int):
        return check_int(int(value))
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or not (INT64_MIN <= value < 2.0**63):
            raise EvalError("int() range error")
        return int(value)
    if isinstance(value, str):
        if not _INTEGER_TEXT.match(value):
            raise EvalError(f"int() cannot parse {value!r}")
        return check_int(int(value, 10))
    raise _overload("int", value)


def _to_uint(value: Any) -> UInt:
    if isinstance(value, bool):
        raise _overload("uint", value)
    if isinstance(value, int):
        return check_uint(int(value))
    if isinstance(value, float):
        if math.isnan(value) or not (0 <= value < 2.0**64):
            raise EvalError("uint() range error")
        return UInt(int(value))
    if isinstance(value, str):
        if not _INTEGER_TEXT.match(value) or value.startswith("-"):
            raise EvalError(f"uint() cannot parse {value!r}")
        return check_uint(int(value, 10))
    raise _overload("uint", value)


def _to_double(value: Any) -> float:
    if isinstance(value, bool):
        raise _overload("double", value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise EvalError(f"double() cannot parse {value!r}") from None
    raise _overload("double", value)


def _to_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(int(value)) if isinstance(value, int) else str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise EvalError("string() invalid UTF-8 bytes") from None
    if isinstance(value, (Quantity, SemVer, netlib.IP, netlib.CIDR, timelib.Duration, timelib.Timestamp)):
        return str(value)
    raise _overload("string", value)


_BOOL_STRINGS = {"1": True, "t": True, "true": True, "TRUE": True, "True": True, "0": False, "f": False}
_BOOL_STRINGS |= {"false": False, "FALSE": False, "False": False}


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _BOOL_STRINGS:
        return _BOOL_STRINGS[value]
    raise EvalError(f"bool() cannot convert {type_name(value)} {value!r}")


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise _overload("bytes", value)


# --- strings ---------------------------------------------------------------------------


def compile_regex(pattern: str) -> Regex:
    """A compiled RE2 regular expression; EvalError for an invalid one."""
    try:
        return regex.compile_regex(pattern)
    except regex.RegexError as err:
        raise EvalError(str(err)) from None


def _matches(text: Any, pattern: Any) -> bool:
    return compile_regex(_expect_str("matches", pattern)).search(_expect_str("matches", text))


def _contains(text: Any, sub: Any) -> bool:
    return _expect_str("contains", sub) in _expect_str("contains", text)


def _starts_with(text: Any, prefix: Any) -> bool:
    return _expect_str("startsWith", text).startswith(_expect_str("startsWith", prefix))


def _ends_with(text: Any, suffix: Any) -> bool:
    return _expect_str("endsWith", text).endswith(_expect_str("endsWith", suffix))


def _char_at(text: Any, index: Any) -> str:
    chars, at = _expect_str("charAt", text), _expect_int("charAt", index)
    if at < 0 or at > len(chars):
        raise EvalError(f"index out of range: {at}")
    return chars[at : at + 1]


def _index_of(receiver: Any, item: Any, *start: Any) -> int:
    if is_list(receiver):
        if start:
            raise _overload("indexOf", receiver, item, *start)
        return next((i for i, v in enumerate(receiver) if cel_equal(v, item)), -1)
    text, sub = _expect_str("indexOf", receiver), _expect_str("indexOf", item)
    offset = _expect_int("indexOf", start[0]) if start else 0
    if offset < 0 or offset > len(text):
        raise EvalError(f"index out of range: {offset}")
    return text.find(sub, offset)


def _last_index_of(receiver: Any, item: Any, *end: Any) -> int:
    if is_list(receiver):
        if end:
            raise _overload("lastIndexOf", receiver, item, *end)
        found = [i for i, v in enumerate(receiver) if cel_equal(v, item)]
        return found[-1] if found else -1
    text, sub = _expect_str("lastIndexOf", receiver), _expect_str("lastIndexOf", item)
    if not end:
        return text.rfind(sub)
    offset = _expect_int("lastIndexOf", end[0])
    if offset < 0 or offset >= max(len(text), 1):
        raise EvalError(f"index out of range: {offset}")
    return text.rfind(sub, 0, offset + len(sub))


def _ascii_case(name: str, upper: bool) -> Callable[[Any], str]:
    source, target = "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    table = str.maketrans(source, target) if upper else str.maketrans(target, source)

    def convert(text: Any) -> str:
        return _expect_str(name, text).translate(table)

    return convert


def _replace(text: Any, old: Any, new: Any, *limit: Any) -> str:
    count = _expect_int("replace", limit[0]) if limit else -1
    return _expect_str("replace", text).replace(
        _expect_str("replace", old), _expect_str("replace", new), count
    )


def _split(value: Any, separator: Any, *limit: Any) -> list[str]:
    text, sep = _expect_str("split", value), _expect_str("split", separator)
    count = _expect_int("split", limit[0]) if limit else -1
    if count == 0:
        return []
    if sep == "":
        chars = list(text)
        if count > 0 and len(chars) > count:
            chars = [*chars[: count - 1], "".join(chars[count - 1 :])]
        return chars
    return text.split(sep, count - 1 if count > 0 else -1)


def _substring(value: Any, start: Any, *end: Any) -> str:
    text = _expect_str("substring", value)
    begin = _expect_int("substring", start)
    stop = _expect_int("substring", end[0]) if end else len(text)
    if begin < 0 or begin > len(text) or stop < begin or stop > len(text):
        raise EvalError(f"substring out of range: [{begin}:{stop}] of a string of length {len(text)}")
    return text[begin:stop]


def _trim(text: Any) -> str:
    return _expect_str("trim", text).strip()


def _join(items: Any, *sep: Any) -> str:
    if not is_list(items) or any(type(i) is not str for i in items):
        raise _overload("join", items, *sep)
    return (_expect_str("join", sep[0]) if sep else "").join(items)


def _find(text: Any, pattern: Any) -> str:
    return compile_regex(_expect_str("find", pattern)).find(_expect_str("find", text))


def _find_all(text: Any, pattern: Any, *limit: Any) -> list[str]:
    count = _expect_int("findAll", limit[0]) if limit else -1
    if count == 0:
        return []
    found = compile_regex(_expect_str("findAll", pattern)).find_all(_expect_str("findAll", text))
    return found[:count] if count > 0 else found


# --- lists -----------------------------------------------------------------------------


def _expect_list(name: str, value: Any) -> Sequence[Any]:
    if not is_list(value):
        raise _overload(name, value)
    return value  # type: ignore[no-any-return]


def _is_sorted(items: Any) -> bool:
    items = _expect_list("isSorted", items)
    return all(cel_compare(a, b, "<=") <= 0 for a, b in itertools.pairwise(items))


def _sum(items: Any) -> Any:
    items = _expect_list("sum", items)
    if not items:
        return 0
    kind = type(items[0])
    if kind not in (int, UInt, float) or any(type(i) is not kind for i in items):
        raise _overload("sum", items)
    total = sum(items)
    if kind is int:
        return check_int(total)
    if kind is UInt:
        return check_uint(total)
    return float(total)


def _extreme(name: str, pick: int) -> Callable[[Any], Any]:
    def extreme(items: Any) -> Any:
        items = _expect_list(name, items)
        if not items:
            raise EvalError(f"{name} called on empty list")
        best = items[0]
        for item in items[1:]:
            if cel_compare(item, best, "<") == pick:
                best = item
        return best

    return extreme


def _includes(receiver: Any, value: Any) -> bool:
    if is_list(receiver):
        if len(receiver) > MAX_INCLUDES_LIST:
            raise EvalError(
                f"'includes' function cannot be applied to lists longer than {MAX_INCLUDES_LIST} values"
            )
        return any(cel_equal(item, value) for item in receiver)
    return cel_equal(receiver, value)


# --- quantities ------------------------------------------------------------------------


def _quantity(text: Any) -> Quantity:
    try:
        return Quantity.parse(_expect_str("quantity", text))
    except ValueError as err:
        raise EvalError(str(err)) from None


def _is_quantity(text: Any) -> bool:
    try:
        Quantity.parse(_expect_str("isQuantity", text))
    except ValueError:
        return False
    return True


def _expect_quantity(name: str, value: Any) -> Quantity:
    if not isinstance(value, Quantity):
        raise _overload(name, value)
    return value


def _quantity_operand(name: str, value: Any) -> Quantity:
    if type(value) is int:
        return Quantity(value)
    return _expect_quantity(name, value)


def _q_add(q: Any, other: Any) -> Quantity:
    return _expect_quantity("add", q) + _quantity_operand("add", other)


def _q_sub(q: Any, other: Any) -> Quantity:
    return _expect_quantity("sub", q) - _quantity_operand("sub", other)


def _q_as_integer(q: Any) -> int:
    value = _expect_quantity("asInteger", q).as_int64()
    if value is None:
        raise EvalError(f"cannot convert value to integer: {q}")
    return value


def _q_is_integer(q: Any) -> bool:
    return _expect_quantity("isInteger", q).as_int64() is not None


def _q_sign(q: Any) -> int:
    return _expect_quantity("sign", q).sign()


def _q_as_float(q: Any) -> float:
    return _expect_quantity("asApproximateFloat", q).as_approximate_float()


# --- semantic versions -----------------------------------------------------------------


def _semver(text: Any, *normalize: Any) -> SemVer:
    lenient = bool(normalize and normalize[0] is True)
    if normalize and type(normalize[0]) is not bool:
        raise _overload("semver", text, *normalize)
    try:
        return SemVer.parse(_expect_str("semver", text), normalize=lenient)
    except SemVerError as err:
        raise EvalError(str(err)) from None


def _is_semver(text: Any, *normalize: Any) -> bool:
    try:
        _semver(text, *normalize)
    except EvalError:
        return False
    return True


def _expect_semver(name: str, value: Any) -> SemVer:
    if not isinstance(value, SemVer):
        raise _overload(name, value)
    return value


def _version_part(name: str) -> Callable[[Any], int]:
    def part(version: Any) -> int:
        number: int = getattr(_expect_semver(name, version), name)
        return check_int(number)

    return part


# --- ordering shared by quantities and versions ----------------------------------------


def _compare_to(left: Any, right: Any) -> int:
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        return left.compare(right)
    if isinstance(left, SemVer) and isinstance(right, SemVer):
        return left.compare(right)
    raise _overload("compareTo", left, right)


def _is_greater_than(left: Any, right: Any) -> bool:
    return _compare_to(left, right) > 0


def _is_less_than(left: Any, right: Any) -> bool:
    return _compare_to(left, right) < 0


# --- optionals -------------------------------------------------------------------------


def _expect_optional(name: str, value: Any) -> OptionalValue:
    if not isinstance(value, OptionalValue):
        raise _overload(name, value)
    return value


def _has_value(opt: Any) -> bool:
    return _expect_optional("hasValue", opt).has_value


def _value(opt: Any) -> Any:
    opt = _expect_optional("value", opt)
    if not opt.has_value:
        raise EvalError("optional.none() dereference")
    return opt.value


def _or_value(opt: Any, default: Any) -> Any:
    opt = _expect_optional("orValue", opt)
    return opt.value if opt.has_value else default


def _or(opt: Any, other: Any) -> Any:
    opt = _expect_optional("or", opt)
    return opt if opt.has_value else _expect_optional("or", other)


def _optional_of(value: Any) -> OptionalValue:
    return OptionalValue(value)


def _optional_none() -> OptionalValue:
    return OPTIONAL_NONE


def _optional_of_non_zero(value: Any) -> OptionalValue:
    if value is None or (type(value) in (int, UInt, float, str, bytes, bool) and not value):
        return OPTIONAL_NONE
    if (is_list(value) or is_map(value)) and not value:
        return OPTIONAL_NONE
    return OptionalValue(value)


# --- IP addresses and CIDRs (Kubernetes ip and cidr libraries) -------------------------


def _ip(text: Any) -> netlib.IP:
    try:
        return netlib.parse_ip(_expect_str("ip", text))
    except netlib.NetError as err:
        raise EvalError(str(err)) from None


def _is_ip(text: Any) -> bool:
    try:
        netlib.parse_ip(_expect_str("isIP", text))
    except netlib.NetError:
        return False
    return True


def _ip_is_canonical(text: Any) -> bool:
    return str(_ip(text)) == _expect_str("ip.isCanonical", text)


def _cidr(text: Any) -> netlib.CIDR:
    try:
        return netlib.parse_cidr(_expect_str("cidr", text))
    except netlib.NetError as err:
        raise EvalError(str(err)) from None


def _is_cidr(text: Any) -> bool:
    try:
        netlib.parse_cidr(_expect_str("isCIDR", text))
    except netlib.NetError:
        return False
    return True


def _expect_ip(name: str, value: Any) -> netlib.IP:
    if isinstance(value, str):
        return _ip(value)
    if not isinstance(value, netlib.IP):
        raise _overload(name, value)
    return value


def _expect_cidr(name: str, value: Any) -> netlib.CIDR:
    if isinstance(value, str) and name != "cidr-receiver":
        return _cidr(value)
    if not isinstance(value, netlib.CIDR):
        raise _overload(name, value)
    return value


def _ip_property(name: str) -> Callable[[Any], Any]:
    attribute = {
        "family": "family",
        "isUnspecified": "is_unspecified",
        "isLoopback": "is_loopback",
        "isLinkLocalMulticast": "is_link_local_multicast",
        "isLinkLocalUnicast": "is_link_local",
        "isGlobalUnicast": "is_global_unicast",
    }[name]

    def read(value: Any) -> Any:
        if not isinstance(value, netlib.IP):
            raise _overload(name, value)
        source = (
            value
            if attribute in ("family", "is_global_unicast", "is_link_local_multicast")
            else value.address
        )
        return getattr(source, attribute)

    return read


def _contains_ip(cidr: Any, address: Any) -> bool:
    return _expect_cidr("cidr-receiver", cidr).contains_ip(_expect_ip("containsIP", address))


def _contains_cidr(cidr: Any, other: Any) -> bool:
    return _expect_cidr("cidr-receiver", cidr).contains_cidr(_expect_cidr("containsCIDR", other))


def _cidr_ip(cidr: Any) -> netlib.IP:
    return _expect_cidr("cidr-receiver", cidr).ip


def _cidr_masked(cidr: Any) -> netlib.CIDR:
    return _expect_cidr("cidr-receiver", cidr).masked


def _cidr_prefix_length(cidr: Any) -> int:
    return _expect_cidr("cidr-receiver", cidr).prefix_length


# --- sets (cel-go's sets extension) ----------------------------------------------------


def _sets_contains(items: Any, subset: Any) -> bool:
    items, subset = _expect_list("sets.contains", items), _expect_list("sets.contains", subset)
    return all(any(cel_equal(a, b) for a in items) for b in subset)


def _sets_equivalent(left: Any, right: Any) -> bool:
    return _sets_contains(left, right) and _sets_contains(right, left)


def _sets_intersects(left: Any, right: Any) -> bool:
    left, right = _expect_list("sets.intersects", left), _expect_list("sets.intersects", right)
    return any(any(cel_equal(a, b) for a in left) for b in right)


# --- static result types ---------------------------------------------------------------


def _element(receiver: CelType, _: Sequence[CelType]) -> CelType:
    return receiver.element


def _same_as_receiver(receiver: CelType, _: Sequence[CelType]) -> CelType:
    return receiver


def _optional_value_type(receiver: CelType, _: Sequence[CelType]) -> CelType:
    return receiver.element if receiver.kind == "optional" else DYN


_ANY = ("*",)
_STR = ("string",)
_INT = ("int",)
_BOOL = ("bool",)
_Q_OR_INT = ("kubernetes.Quantity", "int")
_ORDERED = ("kubernetes.Quantity", "kubernetes.Semver")
_TEXT_OR_LIST = ("string", "list")
_SIZED = ("string", "bytes", "list", "map")


def _functions(*entries: Function) -> dict[str, Function]:
    return {entry.name: entry for entry in entries}


def _duration(value: Any) -> timelib.Duration:
    if isinstance(value, timelib.Duration):
        return value
    if isinstance(value, str):
        return timelib.parse_duration(value)
    raise _overload("duration", value)


def _timestamp(value: Any) -> timelib.Timestamp:
    if isinstance(value, timelib.Timestamp):
        return value
    if isinstance(value, str):
        return timelib.parse_timestamp(value)
    if isinstance(value, int) and not isinstance(value, (bool, UInt)):
        return timelib.timestamp_from_unix(value)
    raise _overload("timestamp", value)


def _time_part(name: str) -> Callable[..., int]:
    def part(value: Any, *zone: Any) -> int:
        if isinstance(value, timelib.Timestamp):
            if zone and not isinstance(zone[0], str):
                raise _overload(name, value, *zone)
            return timelib.timestamp_part(name, value, zone[0] if zone else None)
        if isinstance(value, timelib.Duration) and not zone:
            return timelib.duration_part(name, value)
        raise _overload(name, value, *zone)

    return part


_TIME_KINDS = ("google.protobuf.Duration", "google.protobuf.Timestamp")
_TIMESTAMP_KINDS = ("google.protobuf.Timestamp",)
_TIME_PARTS = tuple(
    Function(name, _time_part(name), {0: (), 1: (_STR,)}, INT, receivers=_TIME_KINDS)
    for name in ("getHours", "getMinutes", "getSeconds", "getMilliseconds")
) + tuple(
    Function(name, _time_part(name), {0: (), 1: (_STR,)}, INT, receivers=_TIMESTAMP_KINDS)
    for name in ("getFullYear", "getMonth", "getDayOfYear", "getDate", "getDayOfMonth", "getDayOfWeek")
)

GLOBAL_FUNCTIONS: dict[str, Function] = _functions(
    Function("size", _size, {1: (_SIZED,)}, INT),
    Function("duration", _duration, {1: (("string", "google.protobuf.Duration"),)}, DURATION),
    Function("timestamp", _timestamp, {1: (("string", "int", "google.protobuf.Timestamp"),)}, TIMESTAMP),
    Function(
        "int",
        _to_int,
        {1: (("int", "uint", "double", "string", *_TIMESTAMP_KINDS, "google.protobuf.Duration"),)},
        INT,
    ),
    Function("uint", _to_uint, {1: (("int", "uint", "double", "string"),)}, UINT),
    Function("double", _to_double, {1: (("int", "uint", "double", "string"),)}, DOUBLE),
    Function("string", _to_string, {1: (_ANY,)}, STRING),
    Function("bool", _to_bool, {1: (("bool", "string"),)}, BOOL),
    Function("bytes", _to_bytes, {1: (("bytes", "string"),)}, BYTES),
    Function("dyn", lambda value: value, {1: (_ANY,)}, DYN),
    Function("matches", _matches, {2: (_STR, _STR)}, BOOL, linear=True),
    Function("quantity", _quantity, {1: (_STR,)}, QUANTITY),
    Function("isQuantity", _is_quantity, {1: (_STR,)}, BOOL),
    Function("semver", _semver, {1: (_STR,), 2: (_STR, _BOOL)}, SEMVER),
    Function("ip", _ip, {1: (_STR,)}, IP),
    Function("isIP", _is_ip, {1: (_STR,)}, BOOL),
    Function("cidr", _cidr, {1: (_STR,)}, CIDR),
    Function("isCIDR", _is_cidr, {1: (_STR,)}, BOOL),
    Function("isSemver", _is_semver, {1: (_STR,), 2: (_STR, _BOOL)}, BOOL),
)

# `optional.of(x)` and friends: namespaced global functions.
OPTIONAL_FUNCTIONS: dict[str, Function] = _functions(
    Function("of", _optional_of, {1: (_ANY,)}, lambda _, args: CelType("optional", args[0])),
    Function("none", _optional_none, {0: ()}, CelType("optional", DYN)),
    Function(
        "ofNonZeroValue", _optional_of_non_zero, {1: (_ANY,)}, lambda _, args: CelType("optional", args[0])
    ),
)

_LISTS = ("list",)
SETS_FUNCTIONS: dict[str, Function] = {
    entry.name.removeprefix("sets."): entry
    for entry in (
        Function("sets.contains", _sets_contains, {2: (_LISTS, _LISTS)}, BOOL, linear=True),
        Function("sets.equivalent", _sets_equivalent, {2: (_LISTS, _LISTS)}, BOOL, linear=True),
        Function("sets.intersects", _sets_intersects, {2: (_LISTS, _LISTS)}, BOOL, linear=True),
    )
}

IP_FUNCTIONS: dict[str, Function] = {
    "isCanonical": Function("ip.isCanonical", _ip_is_canonical, {1: (_STR,)}, BOOL),
}

# Functions called through a namespace: `optional.of(x)`, `sets.contains(a, b)`.
NAMESPACES: dict[str, dict[str, Function]] = {
    "optional": OPTIONAL_FUNCTIONS,
    "sets": SETS_FUNCTIONS,
    "ip": IP_FUNCTIONS,
}

MEMBER_FUNCTIONS: dict[str, Function] = _functions(
    Function("size", _size, {0: ()}, INT, receivers=_SIZED),
    Function("contains", _contains, {1: (_STR,)}, BOOL, receivers=_STR, linear=True),
    Function("startsWith", _starts_with, {1: (_STR,)}, BOOL, receivers=_STR, linear=True),
    Function("endsWith", _ends_with, {1: (_STR,)}, BOOL, receivers=_STR, linear=True),
    Function("matches", _matches, {1: (_STR,)}, BOOL, receivers=_STR, linear=True),
    Function("charAt", _char_at, {1: (_INT,)}, STRING, receivers=_STR),
    Function("indexOf", _index_of, {1: (_ANY,), 2: (_STR, _INT)}, INT, receivers=_TEXT_OR_LIST, linear=True),
    Function(
        "lastIndexOf",
        _last_index_of,
        {1: (_ANY,), 2: (_STR, _INT)},
        INT,
        receivers=_TEXT_OR_LIST,
        linear=True,
    ),
    Function(
        "lowerAscii", _ascii_case("lowerAscii", upper=False), {0: ()}, STRING, receivers=_STR, linear=True
    ),
    Function(
        "upperAscii", _ascii_case("upperAscii", upper=True), {0: ()}, STRING, receivers=_STR, linear=True
    ),
    Function(
        "replace", _replace, {2: (_STR, _STR), 3: (_STR, _STR, _INT)}, STRING, receivers=_STR, linear=True
    ),
    Function("split", _split, {1: (_STR,), 2: (_STR, _INT)}, list_of(STRING), receivers=_STR, linear=True),
    Function("substring", _substring, {1: (_INT,), 2: (_INT, _INT)}, STRING, receivers=_STR, linear=True),
    Function("trim", _trim, {0: ()}, STRING, receivers=_STR, linear=True),
    Function("join", _join, {0: (), 1: (_STR,)}, STRING, receivers=("list",), linear=True),
    Function("find", _find, {1: (_STR,)}, STRING, receivers=_STR, linear=True),
    Function(
        "findAll", _find_all, {1: (_STR,), 2: (_STR, _INT)}, list_of(STRING), receivers=_STR, linear=True
    ),
    Function("isSorted", _is_sorted, {0: ()}, BOOL, receivers=("list",), linear=True),
    Function("sum", _sum, {0: ()}, _element, receivers=("list",), linear=True),
    Function("min", _extreme("min", -1), {0: ()}, _element, receivers=("list",), linear=True),
    Function("max", _extreme("max", 1), {0: ()}, _element, receivers=("list",), linear=True),
    Function("includes", _includes, {1: (_ANY,)}, BOOL, receivers=("*",), linear=True),
    Function("compareTo", _compare_to, {1: (_ORDERED,)}, INT, receivers=_ORDERED),
    Function("isGreaterThan", _is_greater_than, {1: (_ORDERED,)}, BOOL, receivers=_ORDERED),
    Function("isLessThan", _is_less_than, {1: (_ORDERED,)}, BOOL, receivers=_ORDERED),
    Function("add", _q_add, {1: (_Q_OR_INT,)}, QUANTITY, receivers=("kubernetes.Quantity",)),
    Function("sub", _q_sub, {1: (_Q_OR_INT,)}, QUANTITY, receivers=("kubernetes.Quantity",)),
    Function("asInteger", _q_as_integer, {0: ()}, INT, receivers=("kubernetes.Quantity",)),
    Function("asApproximateFloat", _q_as_float, {0: ()}, DOUBLE, receivers=("kubernetes.Quantity",)),
    Function("sign", _q_sign, {0: ()}, INT, receivers=("kubernetes.Quantity",)),
    Function("isInteger", _q_is_integer, {0: ()}, BOOL, receivers=("kubernetes.Quantity",)),
    Function("major", _version_part("major"), {0: ()}, INT, receivers=("kubernetes.Semver",)),
    Function("minor", _version_part("minor"), {0: ()}, INT, receivers=("kubernetes.Semver",)),
    Function("patch", _version_part("patch"), {0: ()}, INT, receivers=("kubernetes.Semver",)),
    Function("family", _ip_property("family"), {0: ()}, INT, receivers=("net.IP",)),
    Function("isUnspecified", _ip_property("isUnspecified"), {0: ()}, BOOL, receivers=("net.IP",)),
    Function("isLoopback", _ip_property("isLoopback"), {0: ()}, BOOL, receivers=("net.IP",)),
    Function(
        "isLinkLocalMulticast", _ip_property("isLinkLocalMulticast"), {0: ()}, BOOL, receivers=("net.IP",)
    ),
    Function("isLinkLocalUnicast", _ip_property("isLinkLocalUnicast"), {0: ()}, BOOL, receivers=("net.IP",)),
    Function("isGlobalUnicast", _ip_property("isGlobalUnicast"), {0: ()}, BOOL, receivers=("net.IP",)),
    Function("containsIP", _contains_ip, {1: (("net.IP", "string"),)}, BOOL, receivers=("net.CIDR",)),
    Function("containsCIDR", _contains_cidr, {1: (("net.CIDR", "string"),)}, BOOL, receivers=("net.CIDR",)),
    Function("ip", _cidr_ip, {0: ()}, IP, receivers=("net.CIDR",)),
    Function("masked", _cidr_masked, {0: ()}, CIDR, receivers=("net.CIDR",)),
    Function("prefixLength", _cidr_prefix_length, {0: ()}, INT, receivers=("net.CIDR",)),
    Function("hasValue", _has_value, {0: ()}, BOOL, receivers=("optional",)),
    Function("value", _value, {0: ()}, _optional_value_type, receivers=("optional",)),
    Function("orValue", _or_value, {1: (_ANY,)}, _optional_value_type, receivers=("optional",)),
    Function("or", _or, {1: (("optional",),)}, _same_as_receiver, receivers=("optional",)),
    *_TIME_PARTS,
)
