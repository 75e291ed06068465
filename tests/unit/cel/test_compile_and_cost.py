"""Compile-time checks, the compile cache and the cost bounds (estimated and at run time)."""

from __future__ import annotations

from typing import Any

import pytest

from draco.cel import (
    MAX_ESTIMATED_COST,
    SelectorCostError,
    SelectorRuntimeError,
    compile_selector,
    estimate_cost,
)
from draco.errors import CELCompileError, CELCostError, CELRuntimeError
from tests.unit.cel.kit import gpu

ATTRS = 'device.attributes["gpu.example.com"]'


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("device.driver ==", "Syntax error"),
        ('device.driver == "a" &&& true', "Syntax error"),
        ("device.model", "undefined field 'model'"),
        ("gpu.driver", "undeclared reference to 'gpu'"),
        ('device.driver.lower() == "x"', "undeclared reference to 'lower'"),
        ("device.driver == 1", "no matching overload for '_==_' applied to '(string, int)'"),
        ("device.driver", "must evaluate to bool or the unknown type, not string"),
        ("1 + 1", "must evaluate to bool"),
        ("device.driver.major() == 1", "no matching overload for 'major'"),
        ('quantity(1) == quantity("1")', "no matching overload for 'quantity'"),
        ('semver("1.0.0").isGreaterThan(quantity("1"))', "no matching overload for 'isGreaterThan'"),
        ('device.capacity["a"].x < quantity("1")', "no matching overload for '_<_'"),
        ('device.driver.matches("[")', "invalid regular expression"),
        ("has(device)", "invalid argument to has() macro"),
        ("9223372036854775808 > 0", "out of the int64 range"),
        ("Msg{a: 1}", "message construction is not supported"),
    ],
)
def test_compile_errors_say_what_and_where(expression: str, message: str) -> None:
    with pytest.raises(CELCompileError, match="ERROR: <input>") as caught:
        compile_selector(expression)
    assert message in str(caught.value)


def test_syntax_errors_point_at_the_column() -> None:
    with pytest.raises(CELCompileError) as caught:
        compile_selector('device.driver == "a" ) ')
    assert "<input>:1:22" in str(caught.value)
    assert "^" in str(caught.value)


def test_too_long_expressions_are_not_compiled() -> None:
    expression = "true || " * 1400 + "true"
    assert len(expression) > 10240
    with pytest.raises(CELCompileError, match="too long"):
        compile_selector(expression)


def test_compiled_selectors_are_cached() -> None:
    first = compile_selector('device.driver == "cached.example.com"')
    assert compile_selector('device.driver == "cached.example.com"') is first
    assert first.expression == 'device.driver == "cached.example.com"'
    with pytest.raises(CELCompileError) as one:
        compile_selector("device.nope")
    with pytest.raises(CELCompileError) as two:
        compile_selector("device.nope")
    assert str(one.value) == str(two.value)


def test_typical_selectors_are_cheap() -> None:
    assert estimate_cost('device.driver == "gpu.example.com"') < 10
    assert compile_selector(f"{ATTRS}.all(k, k.size() < 20)").estimated_cost < 1000


def test_a_too_costly_expression_is_rejected_at_compile_time() -> None:
    # Four nested loops over attribute maps: 32**4 iterations in the worst case.
    expression = f'{ATTRS}.all(a, {ATTRS}.all(b, {ATTRS}.all(c, {ATTRS}.all(d, a + b + c + d != ""))))'
    assert estimate_cost(expression) > MAX_ESTIMATED_COST
    with pytest.raises(CELCostError, match="too complex, exceeds cost limit"):
        compile_selector(expression)
    # A stored expression is not re-judged by its estimate; the runtime limit still holds.
    assert compile_selector(expression, stored=True).matches(gpu())


def test_the_estimate_sees_strings_doubled_through_bind() -> None:
    expression = '"seed"'
    for _ in range(40):
        expression = f"cel.bind(x, {expression}, x + x)"
    with pytest.raises(CELCostError, match="too complex, exceeds cost limit"):
        compile_selector(f"{expression}.size() > 0")


def test_data_larger_than_the_estimate_assumed_is_cut_off_at_run_time() -> None:
    # The estimate assumes at most 32 attributes per domain; a device built without API
    # validation can carry more, and the runtime counter stops the evaluation.
    expression = f'{ATTRS}.all(a, {ATTRS}.all(b, {ATTRS}.all(c, a != b || b != c || c != "")))'
    selector = compile_selector(expression)
    assert selector.estimated_cost <= MAX_ESTIMATED_COST
    assert selector.matches(gpu())
    huge = gpu(attributes={f"a{i}": i for i in range(300)})
    with pytest.raises(SelectorCostError, match="cost limit exceeded") as caught:
        selector.matches(huge, context='class "gpu" selector #0')
    assert isinstance(caught.value, CELRuntimeError)
    assert isinstance(caught.value, CELCostError)
    assert 'class "gpu" selector #0' in str(caught.value)


def test_runtime_cost_counts_loop_iterations() -> None:
    many = ", ".join(str(i) for i in range(48))
    expression = f"[{many}].all(a, [{many}].all(b, [{many}].all(c, a + b + c >= 0)))"
    selector = compile_selector(expression)
    assert selector.matches(gpu())
    assert selector.estimated_cost < MAX_ESTIMATED_COST


def test_runtime_errors_are_not_swallowed_by_comprehension_bodies() -> None:
    with pytest.raises(SelectorRuntimeError, match="no such key: vendor"):
        compile_selector(f"[1].map(x, {ATTRS}.vendor).size() == 1").matches(gpu())


@pytest.mark.parametrize(
    "expression",
    [
        "010 == 10 && -0x10 == -16 && 0x1F == 31",
        '"\\u00e9" == "é" && "\\x41" == "A" && "\\101" == "A"',
        'b"\\xff".size() == 1',
        'r"\\d" == "\\\\d"',
        '"""a\nb""".size() == 3',
        "'single' == \"single\"",
    ],
)
def test_literals(expression: str) -> None:
    assert compile_selector(expression).matches(gpu())


def test_long_chains_and_deep_parentheses_compile() -> None:
    chain = "&&".join(["true"] * 1700)
    assert compile_selector(chain).matches(gpu())
    assert compile_selector("(" * 249 + "true" + ")" * 249).matches(gpu())
    # Runs of `!` and `-` are one node upstream, whatever their length.
    assert compile_selector("!" * 8000 + "true").matches(gpu())
    assert compile_selector("-" * 8001 + "1 == -1").matches(gpu())


# cel-go's parser limits, as kube-apiserver 1.37.1 applies them (each pair: the longest
# accepted, then the shortest rejected, found by dry runs against it).
_NESTING = [
    (
        "parentheses",
        lambda n: "(" * n + "1" + ")" * n + " == 1",
        249,
        "expression recursion limit exceeded: 250",
    ),
    ("negated parentheses", lambda n: "-(" * n + "1" + ")" * n + " != 0", 249, "recursion limit exceeded"),
    ("list literals", lambda n: "[" * n + "1" + "]" * n + ".size() == 1", 249, "recursion limit exceeded"),
    ("right-nested sums", lambda n: "1 + (" * n + "1" + ")" * n + " > 0", 124, "recursion limit exceeded"),
    ("a chain of sums", lambda n: "1" + " + 1" * n + " > 0", 249, "max recursion depth exceeded"),
    ("a chain of comparisons", lambda n: "1 < 2" + " == true" * n, 249, "max recursion depth exceeded"),
    ("a chain of selections", lambda n: 'device.attributes["d"]' + ".a" * n + " == 1", 247, "max recursion"),
]


@pytest.mark.parametrize(("what", "make", "longest", "message"), _NESTING, ids=[n[0] for n in _NESTING])
def test_nesting_limits_are_cel_gos(what: str, make: Any, longest: int, message: str) -> None:
    compile_selector(make(longest))
    with pytest.raises(CELCompileError, match=message):
        compile_selector(make(longest + 1))


def test_brackets_inside_string_literals_do_not_nest() -> None:
    for quote in ('"', "'", '"""', "r'"):
        close = quote[-1] * (3 if len(quote) == 3 else 1)
        assert compile_selector(f"{quote}{'(' * 300}{close}.size() == 300").matches(gpu())


def test_pathological_nesting_is_a_compile_error_not_a_crash() -> None:
    with pytest.raises(CELCompileError):
        compile_selector("+".join(["1"] * 3000) + " > 0")
    with pytest.raises(CELCompileError, match="recursion limit"):
        compile_selector("(" * 2000 + "1" + ")" * 2000 + " == 1")
    with pytest.raises(CELCompileError, match="invalid literal"):
        compile_selector('"\\xZZ" == "a"')


def test_deeply_nested_loops_exceed_both_limits() -> None:
    # Seven nested loops over ten elements: ten million iterations in the worst case.
    ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    expression = "int('1'.find('[0-9]*')) < 100"
    for variable in ("z5", "z4", "z3", "z2", "z", "y", "x"):
        expression = f"{ten}.all({variable}, {expression})"
    assert estimate_cost(expression) > 10_000_000
    with pytest.raises(CELCostError, match="too complex, exceeds cost limit"):
        compile_selector(expression)
    with pytest.raises(SelectorCostError, match="actual cost limit exceeded"):
        compile_selector(expression, stored=True).matches(gpu())


def test_iterating_a_scalar_is_a_runtime_error() -> None:
    with pytest.raises(SelectorRuntimeError, match="got 'int', expected iterable type"):
        compile_selector(f"{ATTRS}.index.exists(x, x > 0)").matches(gpu())
