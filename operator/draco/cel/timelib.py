"""CEL's `google.protobuf.Duration` and `google.protobuf.Timestamp`, as cel-go has them.

Upstream's DRA environment is the Kubernetes CEL base environment, which declares
`duration()` and `timestamp()` with their arithmetic, comparisons and accessors; a valid
selector such as `duration("1s") < duration("2s")` must compile here too. Devices carry
no times, so in a selector these are constant computations, but they follow cel-go:
durations are int64 nanoseconds parsed like Go's `time.ParseDuration`, timestamps are
RFC 3339 instants between years 1 and 9999 (kept in UTC, as Kubernetes sets
`DefaultUTCTimeZone`), arithmetic overflow is an error, and the accessors take an optional
time zone (an IANA name or `±HH:MM`).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Final

from draco.cel.values import INT64_MAX, INT64_MIN, EvalError

__all__ = ["Duration", "Timestamp", "parse_duration", "parse_timestamp"]

_NANOS: Final = 10**9
#: cel-go's bounds: 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z (in Unix seconds).
MIN_UNIX: Final = -62135596800
MAX_UNIX: Final = 253402300799
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class Duration:
    """A signed span of time in int64 nanoseconds."""

    __slots__ = ("nanos",)

    def __init__(self, nanos: int) -> None:
        if not INT64_MIN <= nanos <= INT64_MAX:
            raise EvalError("integer overflow")
        self.nanos = nanos

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other.nanos == self.nanos

    def __hash__(self) -> int:
        return hash(("duration", self.nanos))

    def __repr__(self) -> str:
        return f'duration("{self}")'

    def __str__(self) -> str:
        # cel-go: strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
        seconds = self.nanos // _NANOS if self.nanos >= 0 else -((-self.nanos) // _NANOS)
        rest = self.nanos - seconds * _NANOS
        value = float(seconds) + float(rest) / 1e9
        text = repr(value)
        if "e" in text or "E" in text:
            text = format(value, "f").rstrip("0").rstrip(".")
        elif text.endswith(".0"):
            text = text[:-2]
        return f"{text}s"


class Timestamp:
    """An instant in UTC, in nanoseconds since the Unix epoch."""

    __slots__ = ("nanos",)

    def __init__(self, nanos: int) -> None:
        if not MIN_UNIX * _NANOS <= nanos < (MAX_UNIX + 1) * _NANOS:
            raise EvalError("timestamp out of range")
        self.nanos = nanos

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Timestamp) and other.nanos == self.nanos

    def __hash__(self) -> int:
        return hash(("timestamp", self.nanos))

    def __repr__(self) -> str:
        return f'timestamp("{self}")'

    def datetime(self, zone: dt.tzinfo = dt.UTC) -> dt.datetime:
        seconds, nanos = divmod(self.nanos, _NANOS)
        moment = dt.datetime(1, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds - MIN_UNIX)
        return moment.astimezone(zone).replace(microsecond=0) + dt.timedelta(microseconds=nanos // 1000)

    @property
    def subsecond_nanos(self) -> int:
        return self.nanos % _NANOS

    def __str__(self) -> str:
        # cel-go: t.Format(time.RFC3339Nano), trailing zeros of the fraction dropped.
        moment = self.datetime()
        text = moment.strftime("%Y-%m-%dT%H:%M:%S")
        fraction = f"{self.subsecond_nanos:09d}".rstrip("0")
        return f"{text}.{fraction}Z" if fraction else f"{text}Z"

    @property
    def unix_seconds(self) -> int:
        return self.nanos // _NANOS


# --- parsing ---------------------------------------------------------------------------

_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # µ (micro sign)
    "\u03bcs": 1_000,  # μ (Greek mu)
    "ms": 1_000_000,
    "s": _NANOS,
    "m": 60 * _NANOS,
    "h": 3600 * _NANOS,
}
_LEADING: Final = re.compile(r"[0-9]*")
_UNIT: Final = re.compile(r"[^0-9.]*")


def parse_duration(text: str) -> Duration:
    """Go's `time.ParseDuration`: `[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`, e.g. `1h30m`, `-1.5s`."""
    original, rest, negative = text, text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return Duration(0)
    if not rest:
        raise EvalError(f'time: invalid duration "{original}"')
    total = 0
    while rest:
        digits = _LEADING.match(rest)
        assert digits is not None
        whole_text, rest = digits.group(), rest[digits.end() :]
        fraction_text = ""
        if rest.startswith("."):
            fraction = _LEADING.match(rest, 1)
            assert fraction is not None
            fraction_text, rest = fraction.group(), rest[fraction.end() :]
            had_fraction = True
        else:
            had_fraction = False
        if not whole_text and not fraction_text:
            raise EvalError(f'time: invalid duration "{original}"')
        unit_match = _UNIT.match(rest)
        assert unit_match is not None
        unit_text, rest = unit_match.group(), rest[unit_match.end() :]
        if not unit_text:
            raise EvalError(f'time: missing unit in duration "{original}"')
        if unit_text not in _UNITS:
            raise EvalError(f'time: unknown unit "{unit_text}" in duration "{original}"')
        unit = _UNITS[unit_text]
        whole = int(whole_text or "0")
        if whole > (1 << 63) // unit:
            raise EvalError(f'time: invalid duration "{original}"')
        value = whole * unit
        if had_fraction and fraction_text:
            # Go adds the fraction through a float64, truncating.
            value += int(float(int(fraction_text)) * (float(unit) / float(10 ** len(fraction_text))))
            if value > 1 << 63:
                raise EvalError(f'time: invalid duration "{original}"')
        total += value
        if total > 1 << 63:
            raise EvalError(f'time: invalid duration "{original}"')
    if negative:
        return Duration(-total)
    if total > INT64_MAX:
        raise EvalError(f'time: invalid duration "{original}"')
    return Duration(total)


_RFC3339: Final = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})T"
    r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?:[.,](?P<fraction>[0-9]+))?"
    r"(?P<zone>Z|[+-][0-9]{2}:[0-9]{2})"
)


def parse_timestamp(text: str) -> Timestamp:
    """Go's `time.Parse(time.RFC3339, text)`, e.g. `2024-01-01T00:00:00Z`."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise EvalError(f'parsing time "{text}" as RFC 3339: cannot parse')
    parts = {name: int(match.group(name)) for name in ("year", "month", "day", "hour", "minute", "second")}
    zone = match.group("zone")
    offset = 0
    if zone != "Z":
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise EvalError(f'parsing time "{text}": time zone offset out of range')
        offset = (hours * 60 + minutes) * 60 * (-1 if zone[0] == "-" else 1)
    try:
        moment = dt.datetime(
            parts["year"],
            parts["month"],
            parts["day"],
            parts["hour"],
            parts["minute"],
            parts["second"],
            tzinfo=dt.UTC,
        )
    except ValueError as err:
        raise EvalError(f'parsing time "{text}": {err}') from None
    fraction = (match.group("fraction") or "")[:9].ljust(9, "0")
    seconds = (moment - dt.datetime(1, 1, 1, tzinfo=dt.UTC)).days * 86400 + moment.hour * 3600
    seconds += moment.minute * 60 + moment.second + MIN_UNIX - offset
    return Timestamp(seconds * _NANOS + int(fraction))


def timestamp_from_unix(seconds: int) -> Timestamp:
    return Timestamp(seconds * _NANOS)


# --- arithmetic --------------------------------------------------------------------------


def add(a: Any, b: Any) -> Any:
    if isinstance(a, Duration) and isinstance(b, Duration):
        return Duration(a.nanos + b.nanos)
    if isinstance(a, Timestamp) and isinstance(b, Duration):
        return Timestamp(a.nanos + b.nanos)
    if isinstance(a, Duration) and isinstance(b, Timestamp):
        return Timestamp(a.nanos + b.nanos)
    raise EvalError(f"no such overload: {type(a).__name__} + {type(b).__name__}")


def subtract(a: Any, b: Any) -> Any:
    if isinstance(a, Duration) and isinstance(b, Duration):
        return Duration(a.nanos - b.nanos)
    if isinstance(a, Timestamp) and isinstance(b, Duration):
        return Timestamp(a.nanos - b.nanos)
    if isinstance(a, Timestamp) and isinstance(b, Timestamp):
        return Duration(a.nanos - b.nanos)
    raise EvalError(f"no such overload: {type(a).__name__} - {type(b).__name__}")


# --- accessors ---------------------------------------------------------------------------


def _zone(name: str) -> dt.tzinfo:
    if ":" not in name:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            return ZoneInfo(name) if name not in ("", "UTC") else dt.UTC
        except (ZoneInfoNotFoundError, ValueError):
            raise EvalError(f"unknown time zone {name}") from None
    hours_text, minutes_text = name.split(":", 1)
    try:
        hours, minutes = int(hours_text), int(minutes_text)
    except ValueError:
        raise EvalError(f"invalid time zone offset {name}") from None
    if not 0 <= minutes <= 59:
        raise EvalError(f"timezone offset minutes out of range [0, 59]: {name}")
    offset = hours * 60 - minutes if name.startswith("-") else hours * 60 + minutes
    try:
        return dt.timezone(dt.timedelta(minutes=offset))
    except ValueError:
        raise EvalError(f"invalid time zone offset {name}") from None


def _local(value: Timestamp, zone: str | None) -> dt.datetime:
    return value.datetime(_zone(zone) if zone is not None else dt.UTC)


def timestamp_part(name: str, value: Timestamp, zone: str | None = None) -> int:
    moment = _local(value, zone)
    if name == "getFullYear":
        return moment.year
    if name == "getMonth":
        return moment.month - 1
    if name == "getDayOfYear":
        return moment.timetuple().tm_yday - 1
    if name == "getDate":
        return moment.day
    if name == "getDayOfMonth":
        return moment.day - 1
    if name == "getDayOfWeek":
        return (moment.weekday() + 1) % 7  # Sunday is 0
    if name == "getHours":
        return moment.hour
    if name == "getMinutes":
        return moment.minute
    if name == "getSeconds":
        return moment.second
    if name == "getMilliseconds":
        return value.subsecond_nanos // 1_000_000
    raise EvalError(f"no such overload: {name}")


def duration_part(name: str, value: Duration) -> int:
    def truncate(unit: int) -> int:
        quotient = abs(value.nanos) // unit
        return quotient if value.nanos >= 0 else -quotient

    units = {
        "getHours": 3600 * _NANOS,
        "getMinutes": 60 * _NANOS,
        "getSeconds": _NANOS,
        "getMilliseconds": 10**6,
    }
    if name not in units:
        raise EvalError(f"no such overload: google.protobuf.Duration.{name}()")
    return truncate(units[name])
