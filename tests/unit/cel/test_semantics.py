"""CEL semantics at the edges: errors of the standard functions, numbers, optionals, and
properties checked against Python's exact arithmetic and the SemVer type."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draco.api.quantity import Quantity
from draco.cel import SelectorRuntimeError, SemVer, compile_selector
from tests.unit.cel.kit import evaluate, gpu

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('"abc".charAt(4) == ""', "index out of range"),
        ('"abc".substring(2, 1) == ""', "substring out of range"),
        ('"abc".indexOf("a", 9) == 0', "index out of range"),
        ("[].min() == 0", "min called on empty list"),
        ("[dyn(1), dyn(2.0)].sum() == 3", "no such overload"),
        ('int("x") == 0', "cannot parse"),
        ('int("1_000") == 1000', "cannot parse"),
        ('uint("-1") == 1u', "cannot parse"),
        ("int(1e30) == 0", "range error"),
        ('{"a": 1, "a": 2}.size() == 1', "repeated key"),
        ("[1, 2][2] == 0", "index out of range"),
        ("[1, 2].exists_one(x, x / 0 == 1)", "division by zero"),
        ("[1].map(x, x > 0, x).size() == 1 && [1].filter(x, x / 0 > 0).size() == 0", "division by zero"),
        ("optional.none().value() == 1", "optional.none() dereference"),
        ("5 % 0 == 0", "modulus by zero"),
        ("0u - 1u == 0u", "overflow"),
        ('dyn("a") < dyn(1)', "no such overload"),
        ('dyn("a") + dyn(1) == 1', "no such overload"),
        ("!dyn(1)", "no such overload"),
    ],
)
def test_runtime_errors(expression: str, message: str) -> None:
    with pytest.raises(SelectorRuntimeError, match=re.escape(message)):
        evaluate(expression)


@pytest.mark.parametrize(
    "expression",
    [
        '"a,b,c".split(",", 2) == ["a", "b,c"] && "a,b".split(",", 0) == []',
        '"aaa".replace("a", "b", 2) == "bba"',
        '"abcabc".indexOf("c", 3) == 5 && "abcabc".lastIndexOf("a", 2) == 0',
        '"a" < "b" && b"a" < b"b" && false < true',
        "1.0 / 0.0 > 1e308 && -1.0 / 0.0 < -1e308",
        "2u + 3u == 5u && 7u / 2u == 3u && 7u % 2u == 1u",
        "-(-3) == 3 && -1.5 < 0.0",
        "[1, 2][?5].orValue(0) == 0 && [1, 2][?1].orValue(0) == 2",
        '{"a": {"b": 1}}.?a.?b.orValue(0) == 1 && {"a": {"b": 1}}.?a.c.orValue(7) == 7',
        '{1: "one"}[1] == "one" && 1 in {1: "one"} && !(true in {1: "one"})',
        "[1, 2] == [1, 2] && [1, 2] != [2, 1] && {'a': 1} == {'a': 1}",
        "dyn(null) != 1 && [null] == [null] && null == null",
        '[["a"], ["b", "c"]].map(l, l.size()) == [1, 2]',
        "[1, 2, 3].all(x, [4, 5].exists(y, x < y))",
        "cel.bind(x, 1, [2].all(x, x == 2) && x == 1)",
        "size([1, 2]) == 2 && size({'a': 1}) == 1 && size(b'ab') == 2 && 'é'.size() == 1",
        "string(true) == 'true' && string(12) == '12' && string(b'x') == 'x' && uint('7') == 7u",
        "double('1.5') == 1.5 && int(2.9) == 2 && int(-2.9) == -2 && bool('false') == false",
        "[1, 2].isSorted() && ['b', 'a'].isSorted() == false && [1.5, 0.5].max() == 1.5",
        "['a', 'b'].indexOf('b') == 1 && ['a'].lastIndexOf('z') == -1",
        "optional.of(1).or(optional.of(2)).value() == 1 && optional.of(1).hasValue()",
    ],
)
def test_edges(expression: str) -> None:
    assert evaluate(expression)


def test_comprehension_variables_do_not_leak() -> None:
    with pytest.raises(Exception, match="undeclared reference to 'x'"):
        compile_selector("[1].all(x, x > 0) && x > 0")


@given(INT64, INT64)
def test_int_arithmetic_is_exact_or_an_overflow_error(a: int, b: int) -> None:
    for op, exact in (("+", a + b), ("-", a - b), ("*", a * b)):
        in_range = -(2**63) <= exact <= 2**63 - 1
        expected = exact if in_range else 0
        selector = compile_selector(f"cel.bind(a, {a}, cel.bind(b, {b}, a {op} b == {expected}))")
        if in_range:
            assert selector.matches(gpu())
        else:
            with pytest.raises(SelectorRuntimeError, match="overflow"):
                selector.matches(gpu())


@given(INT64, INT64.filter(lambda b: b != 0))
def test_int_division_truncates_toward_zero(a: int, b: int) -> None:
    quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
    remainder = a - quotient * b
    if -(2**63) <= quotient <= 2**63 - 1:
        assert evaluate(f"{a} / {b} == {quotient} && {a} % {b} == {remainder}")


_versions = st.builds(
    lambda major, minor, patch, pre: f"{major}.{minor}.{patch}" + (f"-{pre}" if pre else ""),
    st.integers(0, 20),
    st.integers(0, 20),
    st.integers(0, 20),
    st.sampled_from(["", "alpha", "alpha.1", "beta.2", "rc.1", "1", "x-y"]),
)


@given(_versions, _versions)
def test_semver_comparisons_agree_with_the_semver_type(left: str, right: str) -> None:
    expected = SemVer.parse(left).compare(SemVer.parse(right))
    assert evaluate(f'semver("{left}").compareTo(semver("{right}")) == {expected}')
    assert evaluate(f'semver("{left}").isGreaterThan(semver("{right}")) == {str(expected > 0).lower()}')
    assert evaluate(f'semver("{left}").isLessThan(semver("{right}")) == {str(expected < 0).lower()}')


_quantities = st.builds(
    lambda number, suffix: f"{number}{suffix}",
    st.integers(-5000, 5000),
    st.sampled_from(["", "m", "k", "Ki", "M", "Mi", "Gi", "G", "e3", "n"]),
)


@given(_quantities, _quantities)
def test_quantity_comparisons_agree_with_the_quantity_type(left: str, right: str) -> None:
    expected = Quantity(left).compare(Quantity(right))
    assert evaluate(f'quantity("{left}").compareTo(quantity("{right}")) == {expected}')
    assert evaluate(f'quantity("{left}").isGreaterThan(quantity("{right}")) == {str(expected > 0).lower()}')
    total = Quantity(left) + Quantity(right)
    assert evaluate(f'quantity("{left}").add(quantity("{right}")) == quantity("{total}")')
    assert evaluate(
        f'quantity("{left}").sub(quantity("{right}")).add(quantity("{right}")) == quantity("{left}")'
    )
