"""The functions of the environment: quantity, semver, strings, lists, regex, macros, bind."""

from __future__ import annotations

import pytest

from draco.cel import SelectorRuntimeError
from draco.errors import CELCompileError
from tests.unit.cel.kit import evaluate, gpu

CAP = 'device.capacity["gpu.example.com"]'
ATTR = 'device.attributes["gpu.example.com"]'


@pytest.mark.parametrize(
    "expression",
    [
        f'{CAP}.memory.compareTo(quantity("40Gi")) >= 0',
        f'{CAP}.memory.compareTo(quantity("80Gi")) == 0',
        f'{CAP}.memory.compareTo(quantity("81920Mi")) == 0',
        f'{CAP}.memory.compareTo(quantity("100Gi")) == -1',
        f'{CAP}.memory.isGreaterThan(quantity("40Gi"))',
        f'!{CAP}.memory.isGreaterThan(quantity("80Gi"))',
        f'{CAP}.memory.isLessThan(quantity("1Ti"))',
        f'{CAP}.memory == quantity("81920Mi")',
        f'{CAP}.cores.add(2) == quantity("110")',
        f'{CAP}.cores.add(quantity("500m")).isInteger() == false',
        f'{CAP}.cores.sub(quantity("8")).asInteger() == 100',
        f'{CAP}.cores.sub(8) == quantity("100") && {CAP}.cores.sub(quantity("200m")).isInteger() == false',
        f"{CAP}.memory.asInteger() == 85899345920",
        f"{CAP}.cores.asApproximateFloat() == 108.0",
        f"{CAP}.cores.sign() == 1",
        'quantity("-3").sign() == -1 && quantity("0").sign() == 0',
        f"{CAP}.cores.isInteger()",
        'isQuantity("40Gi") && !isQuantity("40 Gi") && !isQuantity("")',
        'quantity("1.5").isGreaterThan(quantity("1500m")) == false',
    ],
)
def test_quantity_library(expression: str) -> None:
    assert evaluate(expression)


def test_quantity_errors() -> None:
    with pytest.raises(SelectorRuntimeError, match="cannot convert value to integer"):
        evaluate('quantity("1500m").asInteger() == 1')
    with pytest.raises(SelectorRuntimeError, match="not valid"):
        evaluate(f'{CAP}.memory.isGreaterThan(quantity("lots"))')


@pytest.mark.parametrize(
    "expression",
    [
        f'{ATTR}.driverVersion.isGreaterThan(semver("1.2.0"))',
        f'{ATTR}.driverVersion.isLessThan(semver("1.10.0"))',
        f'{ATTR}.driverVersion.compareTo(semver("1.3.0")) == 0',
        f'{ATTR}.driverVersion.compareTo(semver("1.3.0-rc.1")) == 1',
        f'{ATTR}.driverVersion == semver("1.3.0")',
        f"{ATTR}.driverVersion.major() == 1 && {ATTR}.driverVersion.minor() == 3",
        f"{ATTR}.driverVersion.patch() == 0",
        'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))',
        'isSemver("1.2.3") && !isSemver("1.2") && !isSemver("v1.2.3")',
        'isSemver("v1.2", true) && semver("v1.2", true) == semver("1.2.0")',
    ],
)
def test_semver_library(expression: str) -> None:
    assert evaluate(expression)


def test_semver_errors() -> None:
    with pytest.raises(SelectorRuntimeError, match="invalid semver"):
        evaluate(f'{ATTR}.driverVersion.isGreaterThan(semver("1.2"))')
    with pytest.raises(SelectorRuntimeError, match="no such overload"):
        evaluate(f'{ATTR}.model.isGreaterThan(semver("1.2.0"))')


@pytest.mark.parametrize(
    "expression",
    [
        f'{ATTR}.model.startsWith("a1")',
        f'{ATTR}.model.endsWith("100")',
        f'{ATTR}.model.contains("10")',
        f'{ATTR}.model.matches("^a[0-9]+$")',
        f'matches({ATTR}.model, "a1")',
        f"{ATTR}.model.size() == 4 && size({ATTR}.model) == 4",
        f'{ATTR}.uuid.lowerAscii() == "gpu-0f3e" && {ATTR}.uuid.upperAscii() == "GPU-0F3E"',
        f'{ATTR}.model.charAt(0) == "a"',
        f'{ATTR}.model.indexOf("1") == 1 && {ATTR}.model.lastIndexOf("0") == 3',
        f'{ATTR}.model.replace("a", "h") == "h100"',
        f'{ATTR}.uuid.split("-") == ["GPU", "0f3e"]',
        f'{ATTR}.uuid.substring(4) == "0f3e" && {ATTR}.uuid.substring(0, 3) == "GPU"',
        '"  x ".trim() == "x"',
        f'{ATTR}.tags.join(",") == "training,fast"',
        f'{ATTR}.uuid.find("[0-9]+") == "0"',
        f'{ATTR}.uuid.findAll("[a-f]") == ["f", "e"]',
        '"a" + "b" == "ab" && "b" > "a"',
        'string(1) == "1" && int("42") == 42 && double(1) == 1.0 && uint(3) == 3u',
        'bool("true") && bytes("a") == b"a"',
    ],
)
def test_string_functions(expression: str) -> None:
    assert evaluate(expression)


@pytest.mark.parametrize(
    "expression",
    [
        f"{ATTR}.tags.size() == 2",
        "[1, 2, 3].all(x, x > 0)",
        "[1, 2, 3].exists(x, x == 2)",
        "[1, 2, 3].exists_one(x, x > 2)",
        "[1, 2, 3].map(x, x * 2) == [2, 4, 6]",
        "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]",
        "[1, 2, 3].filter(x, x % 2 == 1) == [1, 3]",
        f'{ATTR}.exists(k, k == "model")',
        f"{ATTR}.all(k, k.size() < 20)",
        'device.attributes.exists(d, d.endsWith("example.com"))',
        "[3, 1, 2].sum() == 6 && [3, 1, 2].min() == 1 && [3, 1, 2].max() == 3",
        "[1, 2, 3].isSorted() && ![2, 1].isSorted()",
        "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2",
        "[1] + [2] == [1, 2] && 2 in [1, 2]",
        '{"a": 1}["a"] == 1 && "a" in {"a": 1}',
        "[[1, 2], [3]].exists(l, l.exists(x, x == 3))",
        f'cel.bind(gpu, {ATTR}, gpu.index < 4 && gpu.model == "a100")',
        "cel.bind(x, 2, cel.bind(y, x * 3, y == 6))",
        "optional.of(1).value() == 1 && !optional.none().hasValue()",
        "optional.none().or(optional.of(2)).value() == 2",
        "optional.ofNonZeroValue(0).orValue(5) == 5",
    ],
)
def test_lists_maps_macros_and_bind(expression: str) -> None:
    assert evaluate(expression)


@pytest.mark.parametrize(
    "expression",
    [
        "1 + 2 * 3 == 7 && 7 / 2 == 3 && -7 / 2 == -3 && -7 % 3 == -1",
        "1.5 + 1.5 == 3.0 && 2u * 2u == 4u",
        "1 == 1.0 && 1u == 1 && 2 > 1.5",
        "true ? true : false",
        "!false",
        "1 != 2",
        "null == null",
        f"{ATTR}.index in [1, 2] ? true : false",
    ],
)
def test_operators(expression: str) -> None:
    assert evaluate(expression)


def test_int64_overflow_is_an_error() -> None:
    with pytest.raises(SelectorRuntimeError, match="overflow"):
        evaluate("9223372036854775807 + 1 > 0")
    with pytest.raises(SelectorRuntimeError, match="overflow"):
        evaluate("-9223372036854775807 - 2 < 0")
    with pytest.raises(SelectorRuntimeError, match="division by zero"):
        evaluate(f"1 / ({ATTR}.index - 2) == 0")


def test_logical_operators_absorb_errors_as_cel_does() -> None:
    missing = f'{ATTR}.vendor == "acme"'
    assert not evaluate(f"false && {missing}")
    assert not evaluate(f"{missing} && false")
    assert evaluate(f"true || {missing}")
    assert evaluate(f"{missing} || true")
    assert not evaluate(f'[1, 2].all(x, x == 2 && {ATTR}.vendor == "x")')
    assert evaluate(f'[1, 2].exists(x, x == 1 || {ATTR}.vendor == "x")')
    with pytest.raises(SelectorRuntimeError, match="no such key: vendor"):
        evaluate(f"true && {missing}")
    with pytest.raises(SelectorRuntimeError, match="no such key: vendor"):
        evaluate(f"{missing} || false")


def test_regexes_are_re2_so_backtracking_cannot_stall() -> None:
    hostile = '"' + "a" * 5000 + '!".matches("(a+)+$")'
    assert not evaluate(hostile)
    assert evaluate(f'{ATTR}.model.matches("a[[:digit:]]+")')


def test_patterns_re2_rejects_are_compile_errors() -> None:
    with pytest.raises(CELCompileError, match="invalid regular expression"):
        evaluate(f'{ATTR}.model.matches("(a)\\\\1")')
    with pytest.raises(SelectorRuntimeError, match="invalid regular expression"):
        evaluate(f'{ATTR}.model.matches({ATTR}.model + "(?=x)")')


@pytest.mark.parametrize(
    "expression",
    [
        "[10, 20].all(i, v, v == (i + 1) * 10)",
        f'{ATTR}.exists(k, v, k == "index" && v == 2)',
        "[1, 2, 3].existsOne(i, v, v > 2) && [1, 2, 3].exists_one(i, v, i == 0)",
        "[1, 2].transformList(i, v, i + v) == [1, 3]",
        "[1, 2, 3].transformList(i, v, v > 1, v * i) == [2, 6]",
        '{"a": 1, "b": 2}.transformMap(k, v, v * 10) == {"a": 10, "b": 20}',
        '{"a": 1, "b": 2}.transformMap(k, v, k == "b", v) == {"b": 2}',
        "sets.contains([1, 2, 3], [3, 1]) && !sets.contains([1], [2])",
        "sets.equivalent([1, 2, 2], [2, 1]) && sets.intersects([1, 2], [2, 9]) && !sets.intersects([1], [])",
        f'sets.intersects({ATTR}.tags, ["fast", "cheap"])',
    ],
)
def test_two_variable_comprehensions_and_sets(expression: str) -> None:
    assert evaluate(expression)


def test_two_variable_comprehensions_check_their_arguments() -> None:
    with pytest.raises(CELCompileError, match="two different variable names"):
        evaluate("[1].all(x, x, x > 0)")
    with pytest.raises(CELCompileError, match="transformList"):
        evaluate("[1].transformList(x, x > 0).size() == 1")
    with pytest.raises(CELCompileError, match=r"undeclared reference to 'sets\.union'"):
        evaluate("sets.union([1], [2]).size() == 2")


@pytest.mark.parametrize(
    "expression",
    [
        'ip("10.1.2.3").family() == 4 && ip("fd00::1").family() == 6',
        'isIP("10.1.2.3") && !isIP("010.1.2.3") && !isIP("fe80::1%eth0") && !isIP("::ffff:10.0.0.1")',
        'ip.isCanonical("fd00::1") && !ip.isCanonical("fd00:0::1")',
        'ip("127.0.0.1").isLoopback() && ip("0.0.0.0").isUnspecified() && ip("169.254.1.1").isLinkLocalUnicast()',
        'ip("224.0.0.1").isLinkLocalMulticast() && ip("10.0.0.1").isGlobalUnicast() && !ip("255.255.255.255").isGlobalUnicast()',
        'ip("10.0.0.1") == ip("10.0.0.1") && string(ip("fd00:0::1")) == "fd00::1"',
        'cidr("10.0.0.0/8").containsIP(ip("10.1.2.3")) && cidr("10.0.0.0/8").containsIP("10.1.2.3")',
        'cidr("10.0.0.0/8").containsCIDR("10.1.0.0/16") && !cidr("10.1.0.0/16").containsCIDR(cidr("10.0.0.0/8"))',
        'cidr("10.1.2.3/8").ip() == ip("10.1.2.3") && cidr("10.1.2.3/8").masked() == cidr("10.0.0.0/8")',
        'cidr("fd00::/64").prefixLength() == 64 && isCIDR("10.0.0.0/8") && !isCIDR("10.0.0.0/08") && !isCIDR("10.0.0.0")',
        f'cidr("192.168.0.0/16").containsIP({ATTR}.address)',
    ],
)
def test_ip_and_cidr_libraries(expression: str) -> None:
    assert evaluate(expression, gpu(attributes={"address": "192.168.7.9"}))


def test_ip_parse_errors_are_runtime_errors() -> None:
    with pytest.raises(SelectorRuntimeError, match="parse error"):
        evaluate('ip("10.0.0.256").family() == 4')


# duration() and timestamp(), as cel-go and Go's time package have them (issue 16).
@pytest.mark.parametrize(
    "expression",
    [
        'duration("1s") < duration("2s")',
        'duration("1h30m") == duration("90m")',
        'duration("1.5s") == duration("1500ms")',
        'duration("-1.5h").getMinutes() == -90',
        'duration("1h").getHours() == 1 && duration("61s").getMinutes() == 1',
        'duration("2500ms").getSeconds() == 2 && duration("2500ms").getMilliseconds() == 2500',
        'duration("1us") == duration("1000ns") && duration("1µs") == duration("1us")',
        'string(duration("1.5s")) == "1.5s" && string(duration("1h")) == "3600s"',
        'int(duration("1s")) == 1000000000',
        'timestamp("2024-01-01T00:00:00Z") < timestamp("2024-01-01T00:00:00.000000001Z")',
        'timestamp("2024-01-01T01:00:00+01:00") == timestamp("2024-01-01T00:00:00Z")',
        'timestamp("2024-01-02T00:00:00Z") - timestamp("2024-01-01T00:00:00Z") == duration("24h")',
        'timestamp("2024-01-01T00:00:00Z") + duration("1h") == timestamp("2024-01-01T01:00:00Z")',
        'duration("1h") + timestamp("2024-01-01T00:00:00Z") == timestamp("2024-01-01T01:00:00Z")',
        'timestamp("2024-03-05T10:20:30.5Z").getMilliseconds() == 500',
        'timestamp("2024-03-05T10:20:30Z").getFullYear() == 2024 && timestamp("2024-03-05T10:20:30Z").getMonth() == 2',
        'timestamp("2024-03-05T10:20:30Z").getDate() == 5 && timestamp("2024-03-05T10:20:30Z").getDayOfMonth() == 4',
        'timestamp("2024-01-01T00:00:00Z").getDayOfWeek() == 1 && timestamp("2024-01-01T00:00:00Z").getDayOfYear() == 0',
        'timestamp("2024-01-01T00:00:00Z").getHours("-02:30") == 21',
        'timestamp("2024-01-01T00:00:00Z").getDayOfWeek("America/New_York") == 0',
        'int(timestamp("1970-01-01T00:01:00Z")) == 60 && timestamp(60) == timestamp("1970-01-01T00:01:00Z")',
        'string(timestamp("2024-01-01T00:00:00.120Z")) == "2024-01-01T00:00:00.12Z"',
    ],
)
def test_durations_and_timestamps(expression: str) -> None:
    assert evaluate(expression)


@pytest.mark.parametrize(
    "expression",
    [
        'duration("1d") > duration("1s")',  # no day unit in Go
        'duration("") < duration("1s")',
        'duration("1") < duration("1s")',  # a number needs a unit (but "0" alone is fine)
        'timestamp("2024-13-01T00:00:00Z") < timestamp("2025-01-01T00:00:00Z")',
        'timestamp("2024-01-01 00:00:00Z") < timestamp("2025-01-01T00:00:00Z")',
        'timestamp("2024-01-01T00:00:00") < timestamp("2025-01-01T00:00:00Z")',
        'duration("1s") + 1 == duration("1s")',
        '-duration("1s") < duration("0s")',
    ],
)
def test_duration_and_timestamp_compile_errors(expression: str) -> None:
    with pytest.raises(CELCompileError):
        evaluate(expression)


def test_duration_overflow_and_timestamp_range_are_runtime_errors() -> None:
    with pytest.raises(SelectorRuntimeError, match="overflow"):
        evaluate('duration("2562047h") + duration("2562047h") > duration("0s")')
    with pytest.raises(SelectorRuntimeError, match="out of range"):
        evaluate('timestamp("9999-12-31T23:59:59Z") + duration("1s") > timestamp(0)')
    assert evaluate('duration("0") == duration("0s")')
