"""Whatever text arrives, compiling and evaluating it ends in a bool or a CELError.

Selectors come from users; a webhook or the allocator must never see an unexpected
Python exception from them.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from draco.cel import compile_selector
from draco.errors import CELError
from tests.unit.cel.kit import gpu

TOKENS = [
    "device",
    ".",
    ".?",
    "driver",
    "attributes",
    "capacity",
    '["gpu.example.com"]',
    '["other.example.com"]',
    "model",
    "index",
    "tags",
    "driverVersion",
    "memory",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "?",
    "==",
    "!=",
    "<",
    ">=",
    "&&",
    "||",
    "!",
    "-",
    "+",
    "*",
    "/",
    "%",
    " in ",
    "1",
    "0",
    "2.5",
    "3u",
    '"a100"',
    "''",
    "b'x'",
    "true",
    "null",
    "x",
    "all(x, ",
    "exists(x, ",
    "map(x, ",
    "size()",
    "orValue(",
    "quantity('1Gi')",
    "semver('1.2.3')",
    "compareTo(",
    "isGreaterThan(",
    "matches('a.*')",
    "has(",
    "cel.bind(x, ",
    "optional.of(",
    "9223372036854775807",
    "-9223372036854775808",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14))
def test_any_token_soup_compiles_and_evaluates_or_fails_cleanly(tokens: list[str]) -> None:
    expression = "".join(tokens)
    try:
        selector = compile_selector(expression)
    except CELError:
        return
    try:
        result = selector.matches(gpu())
    except CELError:
        return
    assert result is True or result is False


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_fails_cleanly(expression: str) -> None:
    try:
        selector = compile_selector(expression)
    except CELError:
        return
    try:
        selector.matches(gpu())
    except CELError:
        return
