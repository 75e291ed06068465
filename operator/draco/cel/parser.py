"""Parsing CEL text into a syntax tree, with cel-python's grammar plus optional syntax.

cel-python (0.5) ships a Lark grammar for CEL but not the optional-value syntax that
Kubernetes enables (`a.?b`, `a[?k]`), and the upstream scheduler's hint for missing keys
tells users to write exactly that. So the grammar is read from the installed cel-python
package and extended by two rules before Lark builds an LALR parser from it; everything
else — precedence, literals, escapes — stays cel-python's. The parser is built once per
process (building it takes a few hundred milliseconds).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import celpy.celparser
import lark
from lark.exceptions import LarkError, UnexpectedInput

from draco.errors import CELCompileError

__all__ = ["located_message", "parse"]

# `member_dot_opt` must come before `member_dot` so `.?` lexes as one token; Lark's
# contextual lexer prefers the longer literal anyway.
_OPTIONAL_RULES = """
member_dot_opt : member ".?" IDENT
member_index_opt : member "[" "?" expr "]"
"""
_MEMBER_RULE = "member         : member_dot | member_dot_arg | member_index | member_object | primary"
_MEMBER_RULE_WITH_OPTIONALS = (
    "member         : member_dot | member_dot_arg | member_index | member_object"
    " | member_dot_opt | member_index_opt | primary"
)


def _grammar() -> str:
    text = (Path(celpy.celparser.__file__).parent / "cel.lark").read_text()
    if _MEMBER_RULE not in text:
        raise RuntimeError("the installed cel-python grammar has an unexpected member rule")
    return text.replace(_MEMBER_RULE, _MEMBER_RULE_WITH_OPTIONALS + "\n" + _OPTIONAL_RULES)


def _keyword_literals(token: lark.Token) -> lark.Token:
    # The grammar lexes `true`/`false` as identifiers; turn them back into literals.
    if token.value in ("true", "false"):
        return lark.Token("BOOL_LIT", token.value)
    return token


@cache
def _parser() -> Any:
    return lark.Lark(
        _grammar(),
        parser="lalr",
        start="expr",
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": _keyword_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
    )


def parse(expression: str) -> Any:
    """The Lark tree of `expression`, or CELCompileError saying what is wrong and where."""
    try:
        return _parser().parse(expression)
    except UnexpectedInput as err:
        message = f"Syntax error: {_describe(err)}"
        raise CELCompileError(
            located_message(expression, message, line=err.line, column=err.column)
        ) from None
    except LarkError as err:
        raise CELCompileError(f"ERROR: <input>: Syntax error: {err}") from None


def located_message(text: str, message: str, *, line: int | None, column: int | None) -> str:
    """`ERROR: <input>:line:col: message` and the source line with a caret, like cel-go."""
    lines = text.splitlines() or [""]
    if line is None or column is None or not 1 <= line <= len(lines):
        return f"ERROR: <input>: {message}"
    return f"ERROR: <input>:{line}:{column}: {message}\n | {lines[line - 1]}\n | {'.' * (column - 1)}^"


def _describe(err: UnexpectedInput) -> str:
    token = getattr(err, "token", None)
    if token is not None:
        if token.type == "$END":
            return "unexpected end of expression"
        return f"unexpected {token.value!r}"
    char = getattr(err, "char", None)
    if char is not None:
        return f"unexpected character {char!r}"
    return "invalid expression"
