"""Parsing CEL text into a syntax tree, with cel-python's grammar plus optional syntax.

cel-python (0.5) ships a Lark grammar for CEL but not the optional-value syntax that
Kubernetes enables (`a.?b`, `a[?k]`), and the upstream scheduler's hint for missing keys
tells users to write exactly that. So the grammar is read from the installed cel-python
package (found, not imported: cel-python's own evaluator is never used and costs memory
in every process that evaluates selectors) and extended by two rules before Lark builds
an LALR parser from it; everything else — precedence, literals, escapes — stays
cel-python's. The parser is built once per process (building it takes a few hundred
milliseconds).

cel-go's parser limits apply too, as Kubernetes keeps their defaults: a grammar rule may
nest at most 250 times within itself (`expression recursion limit exceeded: 250`: 250
nested parentheses, list literals or call arguments), and building the syntax tree may
nest at most 250 operators, selections, calls and indexes (`max recursion depth
exceeded`: a chain of 250 `+`). Long `&&`/`||` chains and runs of `!` or `-` are not
nested, there or here.
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any, Final

import lark
from lark.exceptions import LarkError, UnexpectedInput

from draco.errors import CELCompileError

__all__ = ["MAX_RECURSION_DEPTH", "MAX_RULE_DEPTH", "located_message", "parse"]

#: cel-go's default limits (parser.MaxRecursionDepth; the ANTLR rule listener shares it).
MAX_RULE_DEPTH = 250
MAX_RECURSION_DEPTH = 250

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


def _grammar_path() -> Path:
    """cel-python's `cel.lark`, located without executing the `celpy` package."""
    spec = importlib.util.find_spec("celpy")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / "cel.lark"
        if path.is_file():
            return path
    raise ModuleNotFoundError(
        "draco's CEL parser reads its grammar from the cel-python package (`celpy`), which is "
        "not installed or has no cel.lark: install draco's dependencies (cel-python)",
        name="celpy",
    )


#: Resolved on import, so a missing cel-python fails as loudly as a missing import would.
_GRAMMAR_PATH: Final = _grammar_path()


def _grammar() -> str:
    text = _GRAMMAR_PATH.read_text()
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
    if _brackets_too_deep(expression):
        # Certain to exceed the rule limit below; parsing thousands of nested brackets
        # first would cost seconds.
        raise CELCompileError(f"ERROR: <input>:-1:0: expression recursion limit exceeded: {MAX_RULE_DEPTH}")
    try:
        tree = _parser().parse(expression)
    except UnexpectedInput as err:
        message = f"Syntax error: {_describe(err)}"
        raise CELCompileError(
            located_message(expression, message, line=err.line, column=err.column)
        ) from None
    except LarkError as err:
        raise CELCompileError(f"ERROR: <input>: Syntax error: {err}") from None
    limit = _rule_depth_exceeded(tree) or _recursion_depth_exceeded(tree)
    if limit is not None:
        raise CELCompileError(f"ERROR: <input>:-1:0: {limit}")
    return tree


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


# --- cel-go's nesting limits ------------------------------------------------------------
#
# cel-go parses with ANTLR, whose listener counts, per grammar rule, how many contexts of
# that rule enclose the current one; the Lark tree here is shaped differently (binary
# chains, wrapper rules), so the walk below re-creates the ANTLR contexts: every `expr`
# position (the whole expression, parentheses, arguments, list and map entries, indexes,
# the else branch of `?:`) enters expr, conditionalOr, conditionalAnd, relation, calc,
# unary, member and primary once; the right operand of a relation or arithmetic operator
# is a nested relation or calc; left-recursive chains (`a + b + c`, `a.b.c`) and runs of
# `!`/`-` do not nest. Iterative, so that deep input cannot exhaust Python's stack.


def _brackets_too_deep(text: str) -> bool:
    """Whether a bracket opens inside 250 others (string literals skipped): every bracket
    level holds an `expr`, so with the whole expression that is more than 250."""
    depth = 0
    index, end = 0, len(text)
    while index < end:
        char = text[index]
        if char in "([{":
            if depth >= MAX_RULE_DEPTH:
                return True
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char in "'\"":
            raw = index > 0 and text[index - 1] in "rR"
            quote = text[index : index + 3] if text[index : index + 3] == char * 3 else char
            index += len(quote)
            while index < end and not text.startswith(quote, index):
                if text[index] == "\\" and not raw:
                    index += 1
                index += 1
            index += len(quote)
            continue
        index += 1
    return False


def _flatten(tree: Any, rule: str, op_child: bool) -> tuple[Any, list[Any]]:
    """The leftmost operand and the right operands of a left-recursive binary chain."""
    rights: list[Any] = []
    node = tree
    while len(node.children) == 2:
        rights.append(node.children[1])
        inner = node.children[0]
        node = inner.children[0] if op_child else inner
    rights.reverse()
    return node.children[0], rights


_MEMBER_OPS = frozenset(
    {"member_dot", "member_dot_opt", "member_dot_arg", "member_index", "member_index_opt", "member_object"}
)


def _rule_tasks(kind: str, tree: Any) -> tuple[tuple[str, ...], list[tuple[str, Any]]]:
    """The ANTLR rules entered for one task and the tasks for what lies inside."""
    if kind == "expr":
        if len(tree.children) == 3:
            return ("expr",), [("or", tree.children[0]), ("or", tree.children[1]), ("expr", tree.children[2])]
        return ("expr",), [("or", tree.children[0])]
    if kind == "or":
        first, rights = _flatten(tree, "conditionalor", False)
        return ("conditionalOr",), [("and", t) for t in (first, *rights)]
    if kind == "and":
        first, rights = _flatten(tree, "conditionaland", False)
        return ("conditionalAnd",), [("relation", t) for t in (first, *rights)]
    if kind == "relation":
        first, rights = _flatten(tree, "relation", True)
        return ("relation",), [("calc", first), *(("relation_right", t) for t in rights)]
    if kind == "relation_right":
        return ("relation",), [("calc", tree)]
    if kind == "calc":
        first, rights = _flatten(tree, "addition", True)
        return ("calc",), [("mult_inline", first), *(("calc_right_mult", t) for t in rights)]
    if kind == "calc_right_mult":
        return ("calc",), [("mult_inline", tree)]
    if kind == "mult_inline":
        first, rights = _flatten(tree, "multiplication", True)
        return (), [("unary", first), *(("calc_right_unary", t) for t in rights)]
    if kind == "calc_right_unary":
        return ("calc",), [("unary", tree)]
    if kind == "unary":
        node = tree
        while len(node.children) == 2:  # `!`/`-` runs are one context
            node = node.children[1]
        return ("unary",), [("member", node.children[0])]
    if kind == "member":
        tasks: list[tuple[str, Any]] = []
        node = tree
        while getattr(node.children[0], "data", None) in _MEMBER_OPS:
            op = node.children[0]
            for child in op.children[1:]:
                data = getattr(child, "data", None)
                if data == "exprlist":
                    tasks.append(("exprlist", child))
                elif data == "expr":
                    tasks.append(("expr", child))
                elif data == "fieldinits":
                    tasks.extend(("expr", c) for c in child.children if getattr(c, "data", None) == "expr")
            node = op.children[0]
        tasks.append(("primary", node.children[0]))
        return ("member",), tasks
    if kind == "primary":
        inner = tree.children[0]
        data = getattr(inner, "data", None)
        if data == "paren_expr":
            return ("primary",), [("expr", inner.children[0])]
        if data in ("list_lit", "map_lit") and inner.children:
            return ("primary",), [(data, inner.children[0])]
        if data in ("ident_arg", "dot_ident_arg"):
            return ("primary",), [
                ("exprlist", c) for c in inner.children if getattr(c, "data", None) == "exprlist"
            ]
        if data == "literal":
            return ("primary", "literal"), []
        return ("primary",), []
    if kind == "list_lit":
        return ("listInit",), [("optexpr", c) for c in tree.children]
    if kind == "map_lit":
        entries = tree.children
        tasks = []
        for index, child in enumerate(entries):
            tasks.append(("optexpr" if index % 2 == 0 else "expr", child))
        return ("mapInitializerList",), tasks
    if kind == "optexpr":
        return ("optExpr",), [("expr", tree)]
    if kind == "exprlist":
        return ("exprList",), [("expr", c) for c in tree.children]
    raise AssertionError(kind)


def _rule_depth_exceeded(tree: Any) -> str | None:
    depth: Counter[str] = Counter()
    stack: list[tuple[str, Any]] = [("expr", tree)]
    while stack:
        kind, node = stack.pop()
        if kind == "undo":
            depth.subtract(node)
            continue
        rules, tasks = _rule_tasks(kind, node)
        for rule in rules:
            depth[rule] += 1
            if depth[rule] > MAX_RULE_DEPTH:
                return f"expression recursion limit exceeded: {MAX_RULE_DEPTH}"
        stack.append(("undo", rules))
        stack.extend(reversed(tasks))
    return None


def _counted(node: Any) -> bool:
    """The syntax cel-go's tree builder recurses into with its depth counter."""
    data = node.data
    if data in ("relation", "addition", "multiplication"):
        return len(node.children) == 2
    if data == "expr":
        return len(node.children) == 3
    return data in _MEMBER_OPS and data != "member_object"


def _recursion_depth_exceeded(tree: Any) -> str | None:
    stack: list[tuple[Any, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if _counted(node):
            depth += 1
            if depth > MAX_RECURSION_DEPTH:
                return "max recursion depth exceeded"
        stack.extend((child, depth) for child in node.children if isinstance(child, lark.Tree))
    return None
