"""Translating a parsed CEL expression into a tree of Python closures, once.

cel-python's own evaluator walks the Lark tree on every evaluation and wraps every value,
which costs 100-400 µs per device; the allocator evaluates class selectors on thousands
of devices. So the tree is translated at compile time into nested closures over plain
Python values (see `values`): evaluating a typical selector is a handful of function
calls. The translation also type-checks the expression (unknown fields, functions and
overloads are compile errors, as upstream's checker reports them), estimates its worst
case cost, and records what each comprehension iteration must charge to the runtime cost
counter so a hostile expression is cut off instead of stalling the operator.

Covered: literals, identifiers, `.`/`[]` access and their optional forms `.?`/`[?]`,
`has()`, `in`, `&&`/`||` (absorbing errors as CEL does), `!`, `?:`, arithmetic with int64
overflow errors, comparisons, list and map literals, the macros `all`, `exists`,
`exists_one`, `map`, `filter`, `cel.bind`, `optional.*` and the functions in `functions`.
Anything else (message construction, `type()`, timestamps) is rejected with a compile
error that names it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from lark import Token

from draco.cel import functions as library
from draco.cel.literals import decode_string
from draco.cel.loops import LOOPS
from draco.cel.parser import located_message
from draco.cel.runtime import (
    ARITHMETIC,
    UNSET,
    Activation,
    Fn,
    MissingKey,
    call_function,
    index_value,
)
from draco.cel.static_types import (
    BOOL,
    BYTES,
    DEVICE,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    NUMERIC_KINDS,
    QUANTITY,
    STRING,
    TIMESTAMP,
    UINT,
    CelType,
    list_of,
    map_of,
    optional_of,
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
from draco.errors import CELCompileError

__all__ = ["CompiledExpression", "compile_tree"]


# Size bounds of device data (upstream's cost estimator makes the same assumptions).
MAX_MAP_ENTRIES: Final = 32
MAX_STRING_SIZE: Final = 64
MAX_LIST_SIZE: Final = 48
MAX_DRIVER_NAME: Final = 63
# An attribute value is a string, a version or a list of at most 48 of them.
DYN_SIZE: Final = 64
#: The size of a value upstream's cost estimator cannot bound (cel-go's MaxUint64): what
#: optional chaining (`.?x`, `[?k]`) yields, and what calls without a known result size
#: return. A length-dependent cost on it exceeds every limit, as upstream.
UNKNOWN_SIZE: Final = 2**64 - 1
_TIME_KINDS: Final = ("google.protobuf.Duration", "google.protobuf.Timestamp")
#: Functions whose result size upstream's estimator derives from the receiver's.
_SIZE_OF_RECEIVER: Final = frozenset({"lowerAscii", "upperAscii", "substring", "trim", "find"})
#: Sized result kinds (what a size bound means anything for).
_SIZED_KINDS: Final = frozenset({"string", "bytes", "list", "map", "optional", "dyn"})

DEVICE_FIELDS: Final[dict[str, CelType]] = {
    "driver": STRING,
    "attributes": map_of(map_of(DYN)),
    "capacity": map_of(map_of(QUANTITY)),
    "allowMultipleAllocations": BOOL,
}
# Macro name -> accepted argument counts (variables included).
_ONE_VARIABLE_MACROS: Final[dict[str, tuple[int, ...]]] = {
    "all": (2,),
    "exists": (2,),
    "exists_one": (2,),
    "map": (2, 3),
    "filter": (2,),
}
_TWO_VARIABLE_MACROS: Final[dict[str, tuple[int, ...]]] = {
    "all": (3,),
    "exists": (3,),
    "exists_one": (3,),
    "existsOne": (3,),
    "transformList": (3, 4),
    "transformMap": (3, 4),
}
_MACROS: Final = frozenset(_ONE_VARIABLE_MACROS) | frozenset(_TWO_VARIABLE_MACROS)


@dataclass(frozen=True, slots=True)
class Node:
    """A translated subexpression and what the compiler knows about it.

    `cost` is an upper bound of what evaluating it may cost; `flat` is the part of it that
    the evaluator does not charge by itself (it charges comprehension iterations and
    length-dependent functions as they happen); `size` bounds the length of a string,
    list or map value and `elem_size` that of its elements.
    """

    fn: Fn
    type: CelType
    cost: int
    flat: int
    size: int = DYN_SIZE
    elem_size: int = DYN_SIZE
    const: Any = None
    is_const: bool = False


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    fn: Fn
    type: CelType
    estimated_cost: int


def compile_tree(tree: Any, *, text: str) -> CompiledExpression:
    """Translate a Lark tree from `parser.parse`; CELCompileError on anything wrong."""
    compiler = _Compiler(text)
    try:
        node = compiler.expr(tree)
    except RecursionError:
        raise CELCompileError("ERROR: <input>: expression nests too deeply") from None
    except (ValueError, OverflowError) as err:
        # A literal Python cannot read (a malformed escape, say): the expression's fault.
        raise CELCompileError(f"ERROR: <input>: invalid literal: {err}") from None
    if node.type.kind not in ("bool", "dyn"):
        raise CELCompileError(f"ERROR: <input>: must evaluate to bool or the unknown type, not {node.type}")
    return CompiledExpression(node.fn, node.type, node.cost)


def _const(value: Any, ctype: CelType, *, size: int = 0) -> Node:
    def constant(act: Activation) -> Any:
        return value

    return Node(constant, ctype, 0, 0, size=size, const=value, is_const=True)


def _tenth(size: int) -> int:
    return math.ceil(size * 0.1)


def _linear_cost(name: str, sizes: Sequence[int]) -> int:
    """The length-dependent part of a string or list function's cost."""
    if name in ("matches", "find", "findAll") and len(sizes) >= 2:
        return math.ceil(sizes[0] * sizes[1] * 0.25) + 1
    if name in ("startsWith", "endsWith") and len(sizes) == 2:
        return _tenth(sizes[1])  # the prefix is compared, not the whole string
    if name == "contains" and len(sizes) == 2 and UNKNOWN_SIZE in sizes:
        return _tenth(sizes[0]) * _tenth(sizes[1])
    if name.startswith("sets.") and len(sizes) == 2:
        return _tenth(sizes[0] * sizes[1]) + 1
    return _tenth(sum(sizes))


def _runtime_size(value: Any) -> int:
    if isinstance(value, (str, bytes)) or is_list(value) or is_map(value):
        return len(value)
    return 0


class _Compiler:
    def __init__(self, text: str) -> None:
        self.text = text
        self.scope: dict[str, CelType] = {"device": DEVICE}
        self.scope_sizes: dict[str, tuple[int, int]] = {"device": (len(DEVICE_FIELDS), DYN_SIZE)}

    # --- errors ------------------------------------------------------------------------

    def error(self, at: Any, message: str) -> CELCompileError:
        """A compile error pointing at `at`: a Lark tree (its start) or a token."""
        if isinstance(at, Token):
            line, column = at.line, at.column
        else:
            meta: Any = getattr(at, "meta", None)
            empty = meta is None or getattr(meta, "empty", True)
            line = None if empty else meta.line
            column = None if empty else meta.column
        return CELCompileError(located_message(self.text, message, line=line, column=column))

    # --- grammar rules -----------------------------------------------------------------

    def expr(self, tree: Any) -> Node:
        # Skip the chains of single-child rules the grammar produces for every operand,
        # so nesting depth (and Python recursion) follows the expression, not the grammar.
        tree = _unwrap(tree)
        rule = tree.data
        handler = getattr(self, "_" + rule, None)
        if handler is None:
            raise self.error(tree, f"unsupported syntax ({rule})")
        result: Node = handler(tree)
        return result

    def _expr(self, tree: Any) -> Node:
        if len(tree.children) == 1:
            return self.expr(tree.children[0])
        return self._conditional(tree, *(self.expr(child) for child in tree.children))

    def _conditionalor(self, tree: Any) -> Node:
        return self._logical(tree, [self.expr(t) for t in _chain(tree, "conditionalor")], is_and=False)

    def _conditionaland(self, tree: Any) -> Node:
        return self._logical(tree, [self.expr(t) for t in _chain(tree, "conditionaland")], is_and=True)

    def _relation(self, tree: Any) -> Node:
        if len(tree.children) == 1:
            return self.expr(tree.children[0])
        op_tree, right_tree = tree.children
        left = self.expr(op_tree.children[0])
        right = self.expr(right_tree)
        op = op_tree.data.removeprefix("relation_")
        if op in ("eq", "ne"):
            return self._equality(tree, left, right, negate=op == "ne")
        if op == "in":
            return self._in(tree, left, right)
        return self._ordering(tree, left, right, op)

    def _addition(self, tree: Any) -> Node:
        if len(tree.children) == 1:
            return self.expr(tree.children[0])
        op_tree, right_tree = tree.children
        return self._arithmetic(
            tree,
            op_tree.data.removeprefix("addition_"),
            self.expr(op_tree.children[0]),
            self.expr(right_tree),
        )

    def _multiplication(self, tree: Any) -> Node:
        if len(tree.children) == 1:
            return self.expr(tree.children[0])
        op_tree, right_tree = tree.children
        return self._arithmetic(
            tree,
            op_tree.data.removeprefix("multiplication_"),
            self.expr(op_tree.children[0]),
            self.expr(right_tree),
        )

    def _unary(self, tree: Any) -> Node:
        if len(tree.children) == 1:
            return self.expr(tree.children[0])
        # A run of `!` or `-` (thousands long, say) is one node upstream: an even run is
        # the operand itself, an odd one a single operator. Walked without recursion.
        ops: list[str] = []
        node = tree
        while len(node.children) == 2:
            ops.append(node.children[0].data)
            node = node.children[1]
        operand = self.expr(node)
        ops.reverse()
        index = 0
        while index < len(ops):
            end = index
            while end < len(ops) and ops[end] == ops[index]:
                end += 1
            if (end - index) % 2:
                operand = (
                    self._not(tree, operand) if ops[index] == "unary_not" else self._negate(tree, operand)
                )
            index = end
        return operand

    def _member(self, tree: Any) -> Node:
        return self.expr(tree.children[0])

    def _primary(self, tree: Any) -> Node:
        return self.expr(tree.children[0])

    def _paren_expr(self, tree: Any) -> Node:
        return self.expr(tree.children[0])

    def _member_object(self, tree: Any) -> Node:
        raise self.error(tree, "message construction is not supported in DRA device selectors")

    def _dot_ident(self, tree: Any) -> Node:
        return self._ident_named(tree, str(tree.children[0]))

    def _dot_ident_arg(self, tree: Any) -> Node:
        return self._call_global(tree, str(tree.children[0]), self._args(tree.children[1:]))

    def _ident(self, tree: Any) -> Node:
        return self._ident_named(tree, str(tree.children[0]))

    def _ident_named(self, tree: Any, name: str) -> Node:
        if name not in self.scope:
            raise self.error(tree, f"undeclared reference to '{name}' (in container '')")
        ctype = self.scope[name]
        size, elem_size = self.scope_sizes[name]

        def variable(act: Activation) -> Any:
            return act.vars[name]

        return Node(variable, ctype, 1, 1, size=size, elem_size=elem_size)

    def _args(self, exprlists: Sequence[Any]) -> list[Any]:
        return list(exprlists[0].children) if exprlists else []

    # --- literals ----------------------------------------------------------------------

    def _literal(self, tree: Any) -> Node:
        token = tree.children[0]
        kind, text = token.type, str(token)
        if kind == "BOOL_LIT":
            return _const(text == "true", BOOL)
        if kind == "NULL_LIT":
            return _const(None, NULL)
        if kind == "INT_LIT":
            negative, digits = text.startswith("-"), text.lstrip("-")
            value = int(digits[2:], 16) if digits[:2].lower() == "0x" else int(digits, 10)
            value = -value if negative else value
            try:
                return _const(check_int(value), INT)
            except EvalError:
                raise self.error(tree, f"integer literal {text} is out of the int64 range") from None
        if kind == "UINT_LIT":
            digits = text[:-1]
            if digits.startswith("-"):
                raise self.error(tree, f"unsigned literal {text} is negative")
            try:
                return _const(check_uint(int(digits, 16) if "x" in digits.lower() else int(digits)), UINT)
            except (EvalError, ValueError):
                raise self.error(tree, f"unsigned literal {text} is out of range") from None
        if kind == "FLOAT_LIT":
            return _const(float(text), DOUBLE)
        if kind in ("STRING_LIT", "MLSTRING_LIT"):
            decoded = decode_string(text, error=lambda m: self.error(tree, m))
            return _const(decoded, STRING, size=len(decoded))
        if kind == "BYTES_LIT":
            raw = decode_string(text[1:], error=lambda m: self.error(tree, m), as_bytes=True)
            data = raw.encode("latin-1")
            return _const(data, BYTES, size=len(data))
        raise self.error(tree, f"unsupported literal {text}")

    def _homogeneous(self, trees: Sequence[Any], nodes: Sequence[Node]) -> None:
        """Upstream rejects list and map literals whose elements (keys, values) differ in
        type, `dyn` included (cel-go's homogeneous aggregate literal validator)."""
        first: CelType | None = None
        for node, at in zip(nodes, trees, strict=True):
            if node.is_const and (
                (node.const in ([], {}) and node.type.kind in ("list", "map")) or node.const is OPTIONAL_NONE
            ):
                continue  # `[]`, `{}`, `optional.none()` take the type of their neighbours
            if first is None:
                first = node.type
            elif node.type != first:
                raise self.error(
                    at, f"expected type '{_type_name(first)}' but found '{_type_name(node.type)}'"
                )

    def _list_lit(self, tree: Any) -> Node:
        item_trees = self._args(tree.children)
        items = [self.expr(child) for child in item_trees]
        self._homogeneous(item_trees, items)
        elem = _common_type(item.type for item in items)
        fns = tuple(item.fn for item in items)
        elem_size = max((item.size for item in items), default=0)
        cost = 1 + sum(item.cost for item in items)
        flat = 1 + sum(item.flat for item in items)
        if all(item.is_const for item in items):
            return replace(
                _const([item.const for item in items], list_of(elem), size=len(items)), elem_size=elem_size
            )

        def make_list(act: Activation) -> Any:
            return [fn(act) for fn in fns]

        return Node(make_list, list_of(elem), cost, flat, size=len(items), elem_size=elem_size)

    def _map_lit(self, tree: Any) -> Node:
        children = list(tree.children[0].children) if tree.children else []
        keys = [self.expr(child) for child in children[0::2]]
        values = [self.expr(child) for child in children[1::2]]
        self._homogeneous(children[0::2], keys)
        self._homogeneous(children[1::2], values)
        for key, key_tree in zip(keys, children[0::2], strict=True):
            if not key.type.accepts("string", "int", "uint", "bool"):
                raise self.error(key_tree, f"unsupported map key type {key.type}")
        pairs = tuple((k.fn, v.fn) for k, v in zip(keys, values, strict=True))
        if not pairs:
            return _const({}, map_of(DYN))

        def make_map(act: Activation) -> Any:
            result: dict[Any, Any] = {}
            for key_fn, value_fn in pairs:
                key = key_fn(act)
                if type(key) not in (str, int, UInt, bool):
                    raise EvalError(f"unsupported map key type {type_name(key)}")
                if any(cel_equal(key, existing) for existing in result):
                    raise EvalError(f"Failed with repeated key: {key!r}")
                result[key] = value_fn(act)
            return result

        cost = 1 + sum(n.cost for n in (*keys, *values))
        flat = 1 + sum(n.flat for n in (*keys, *values))
        elem = _common_type(v.type for v in values)
        return Node(
            make_map,
            map_of(elem),
            cost,
            flat,
            size=len(keys),
            elem_size=max((v.size for v in values), default=0),
        )

    # --- logic -------------------------------------------------------------------------

    def _conditional(self, tree: Any, cond: Node, yes: Node, no: Node) -> Node:
        if not cond.type.accepts("bool"):
            raise self.error(tree, f"found no matching overload for '_?_:_' applied to '({cond.type}, ...)'")
        cond_fn, yes_fn, no_fn = cond.fn, yes.fn, no.fn

        def conditional(act: Activation) -> Any:
            chosen = cond_fn(act)
            if chosen is True:
                return yes_fn(act)
            if chosen is False:
                return no_fn(act)
            raise EvalError(f"no such overload: {type_name(chosen)} ? _ : _")

        ctype = yes.type if yes.type == no.type else DYN
        return Node(
            conditional,
            ctype,
            cond.cost + max(yes.cost, no.cost),
            cond.flat + max(yes.flat, no.flat),
            size=max(yes.size, no.size),
            elem_size=max(yes.elem_size, no.elem_size),
        )

    def _logical(self, tree: Any, operands: list[Node], *, is_and: bool) -> Node:
        """`a && b && ...` (or `||`), n-ary so long chains do not nest.

        CEL's logical operators are commutative for errors: a decisive operand (false for
        `&&`, true for `||`) wins even over an operand that failed before it.
        """
        op = "&&" if is_and else "||"
        if len(operands) == 1:
            return operands[0]
        for side in operands:
            if not side.type.accepts("bool"):
                raise self.error(
                    tree, f"found no matching overload for '_{op}_' applied to '({side.type}, ...)'"
                )
        fns = tuple(side.fn for side in operands)
        decisive = not is_and

        def logical(act: Activation) -> Any:
            error: EvalError | None = None
            for fn in fns:
                try:
                    value = fn(act)
                except EvalError as err:
                    error = error or err
                    continue
                if value is decisive:
                    return decisive
                if value is not (not decisive):
                    error = error or EvalError(f"no such overload: {type_name(value)} {op} _")
            if error is not None:
                raise error
            return not decisive

        return Node(logical, BOOL, sum(n.cost for n in operands), sum(n.flat for n in operands))

    def _not(self, tree: Any, operand: Node) -> Node:
        if not operand.type.accepts("bool"):
            raise self.error(tree, f"found no matching overload for '!_' applied to '({operand.type})'")
        fn = operand.fn

        def negation(act: Activation) -> Any:
            value = fn(act)
            if value is True:
                return False
            if value is False:
                return True
            raise EvalError(f"no such overload: !{type_name(value)}")

        return Node(negation, BOOL, operand.cost + 1, operand.flat + 1)

    def _negate(self, tree: Any, operand: Node) -> Node:
        if not operand.type.accepts("int", "double"):
            raise self.error(tree, f"found no matching overload for '-_' applied to '({operand.type})'")
        fn = operand.fn

        def negative(act: Activation) -> Any:
            value = fn(act)
            kind = type(value)
            if kind is int:
                if value == INT64_MIN:
                    raise EvalError("return error for overflow")
                return -value
            if kind is float:
                return -value
            raise EvalError(f"no such overload: -{type_name(value)}")

        return Node(negative, operand.type, operand.cost + 1, operand.flat + 1)

    # --- comparisons -------------------------------------------------------------------

    def _check_comparable(self, tree: Any, op: str, left: Node, right: Node) -> None:
        lk, rk = left.type.kind, right.type.kind
        if "dyn" in (lk, rk) or lk == rk or (lk in NUMERIC_KINDS and rk in NUMERIC_KINDS):
            return
        raise self.error(
            tree, f"found no matching overload for '_{op}_' applied to '({left.type}, {right.type})'"
        )

    def _equality(self, tree: Any, left: Node, right: Node, *, negate: bool) -> Node:
        self._check_comparable(tree, "!=" if negate else "==", left, right)
        left_fn, right_fn = left.fn, right.fn
        cost = (
            left.cost + right.cost + 1 + _tenth(min(left.size, right.size) if left.type.kind == "list" else 0)
        )
        cost += _unbounded_comparison(left, right)
        flat = left.flat + right.flat + 1
        if right.is_const and type(right.const) in (str, int, bool):
            constant, constant_type = right.const, type(right.const)

            def equal_const(act: Activation) -> Any:
                value = left_fn(act)
                if type(value) is constant_type:
                    return (value == constant) is not negate
                return cel_equal(value, constant) is not negate

            return Node(equal_const, BOOL, cost, flat)

        def equal(act: Activation) -> Any:
            return cel_equal(left_fn(act), right_fn(act)) is not negate

        return Node(equal, BOOL, cost, flat)

    def _ordering(self, tree: Any, left: Node, right: Node, op: str) -> Node:
        symbol = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
        self._check_comparable(tree, symbol, left, right)
        for side in (left, right):
            if not side.type.accepts(
                "int",
                "uint",
                "double",
                "string",
                "bytes",
                "bool",
                "google.protobuf.Duration",
                "google.protobuf.Timestamp",
            ):
                raise self.error(
                    tree,
                    f"found no matching overload for '_{symbol}_' applied to '({left.type}, {right.type})'",
                )
        left_fn, right_fn = left.fn, right.fn
        test: Callable[[int], bool] = {
            "lt": lambda c: c == -1,
            "le": lambda c: c in (-1, 0),
            "gt": lambda c: c == 1,
            "ge": lambda c: c in (0, 1),
        }[op]

        def ordering(act: Activation) -> Any:
            a, b = left_fn(act), right_fn(act)
            if type(a) is int and type(b) is int:
                return test(-1 if a < b else (1 if a > b else 0))
            return test(cel_compare(a, b, symbol))

        cost = left.cost + right.cost + 1 + _unbounded_comparison(left, right)
        return Node(ordering, BOOL, cost, left.flat + right.flat + 1)

    def _in(self, tree: Any, left: Node, right: Node) -> Node:
        if not right.type.accepts("list", "map"):
            raise self.error(
                tree, f"found no matching overload for '@in' applied to '({left.type}, {right.type})'"
            )
        left_fn, right_fn = left.fn, right.fn

        def membership(act: Activation) -> Any:
            item, container = left_fn(act), right_fn(act)
            if is_map(container):
                if type(item) is str:
                    return item in container
                return any(cel_equal(item, key) for key in container)
            if is_list(container):
                act.charge(_tenth(len(container)))
                return any(cel_equal(item, candidate) for candidate in container)
            raise EvalError(f"no such overload: {type_name(item)} in {type_name(container)}")

        cost = left.cost + right.cost + 1 + (_tenth(right.size) if right.type.kind != "map" else 0)
        return Node(membership, BOOL, cost, left.flat + right.flat + 1)

    # --- arithmetic --------------------------------------------------------------------

    def _arithmetic(self, tree: Any, op: str, left: Node, right: Node) -> Node:
        symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}[op]
        allowed = {
            "add": ("int", "uint", "double", "string", "bytes", "list"),
            "sub": ("int", "uint", "double"),
            "mul": ("int", "uint", "double"),
            "div": ("int", "uint", "double"),
            "mod": ("int", "uint"),
        }[op]
        lk, rk = left.type.kind, right.type.kind
        if op in ("add", "sub") and (lk in _TIME_KINDS or rk in _TIME_KINDS):
            return self._time_arithmetic(tree, op, left, right)
        if (
            not left.type.accepts(*allowed)
            or not right.type.accepts(*allowed)
            or ("dyn" not in (lk, rk) and lk != rk)
        ):
            raise self.error(
                tree, f"found no matching overload for '_{symbol}_' applied to '({left.type}, {right.type})'"
            )
        operation = ARITHMETIC[op]
        left_fn, right_fn = left.fn, right.fn

        def arithmetic(act: Activation) -> Any:
            a, b = left_fn(act), right_fn(act)
            if type(a) is not type(b) and not (is_list(a) and is_list(b)):
                raise EvalError(f"no such overload: {type_name(a)} {symbol} {type_name(b)}")
            if op == "add" and type(a) in (str, bytes, list, tuple):
                act.charge(_tenth(len(a) + len(b)))
            return operation(a, b)

        ctype = left.type if lk != "dyn" else right.type
        if (
            ctype.kind == "list"
            and left.type.kind == "list"
            and right.type.kind == "list"
            and left.type != right.type
        ):
            ctype = list_of(DYN)
        size = left.size + right.size if op == "add" else max(left.size, right.size)
        cost = left.cost + right.cost + 1 + (_tenth(size) if op == "add" and ctype.kind != "int" else 0)
        return Node(
            arithmetic,
            ctype,
            cost,
            left.flat + right.flat + 1,
            size=size,
            elem_size=max(left.elem_size, right.elem_size),
        )

    def _time_arithmetic(self, tree: Any, op: str, left: Node, right: Node) -> Node:
        """`+`/`-` on durations and timestamps (the overloads cel-go declares)."""
        d, t = "google.protobuf.Duration", "google.protobuf.Timestamp"
        results = {
            ("add", d, d): DURATION,
            ("add", t, d): TIMESTAMP,
            ("add", d, t): TIMESTAMP,
            ("sub", d, d): DURATION,
            ("sub", t, d): TIMESTAMP,
            ("sub", t, t): DURATION,
        }
        lk, rk = left.type.kind, right.type.kind
        candidates = [
            result
            for (o, a, b), result in results.items()
            if o == op and lk in (a, "dyn") and rk in (b, "dyn")
        ]
        if not candidates:
            symbol = "+" if op == "add" else "-"
            raise self.error(
                tree, f"found no matching overload for '_{symbol}_' applied to '({left.type}, {right.type})'"
            )
        operation = ARITHMETIC[op]
        left_fn, right_fn = left.fn, right.fn

        def time_arithmetic(act: Activation) -> Any:
            return operation(left_fn(act), right_fn(act))

        ctype = candidates[0] if len(set(candidates)) == 1 else DYN
        return Node(time_arithmetic, ctype, left.cost + right.cost + 1, left.flat + right.flat + 1)

    # --- member access -----------------------------------------------------------------

    def _member_dot(self, tree: Any) -> Node:
        operand_tree, name_token = tree.children
        name = str(name_token)
        # `a.b.c` where `a` is not a variable may be a qualified name; DRA declares none
        # except `device`, so an unknown identifier is reported as such by _ident.
        return self._select(name_token, self.expr(operand_tree), name, optional=False)

    def _member_dot_opt(self, tree: Any) -> Node:
        operand_tree, name_token = tree.children
        return self._select(name_token, self.expr(operand_tree), str(name_token), optional=True)

    def _select_type(self, tree: Any, operand: CelType, name: str) -> CelType:
        if operand.kind == "optional":
            return self._select_type(tree, operand.element, name)
        if operand == DEVICE:
            if name not in DEVICE_FIELDS:
                raise self.error(tree, f"undefined field '{name}'")
            return DEVICE_FIELDS[name]
        if operand.kind == "map":
            return operand.element
        if operand.kind == "dyn":
            return DYN
        raise self.error(tree, f"type '{operand}' does not support field selection")

    def _select(self, tree: Any, operand: Node, name: str, *, optional: bool) -> Node:
        field_type = self._select_type(tree, operand.type, name)
        fn = operand.fn
        size, elem_size = _field_sizes(operand, name)
        propagates = optional or operand.type.kind == "optional"
        if propagates:

            def optional_select(act: Activation) -> Any:
                value = fn(act)
                if isinstance(value, OptionalValue):
                    if not value.has_value:
                        return OPTIONAL_NONE
                    value = value.value
                if is_map(value):
                    return OptionalValue(value[name]) if name in value else OPTIONAL_NONE
                raise EvalError(f"no such overload: {type_name(value)}.?{name}")

            return Node(
                optional_select,
                optional_of(field_type),
                operand.cost + 1,
                operand.flat + 1,
                UNKNOWN_SIZE,
                UNKNOWN_SIZE,
            )

        def select(act: Activation) -> Any:
            value = fn(act)
            try:
                return value[name]
            except KeyError:
                raise EvalError(f"no such key: {name}") from None
            except (TypeError, IndexError):
                if is_map(value):
                    raise EvalError(f"no such key: {name}") from None
                raise EvalError(f"type '{type_name(value)}' does not support field selection") from None

        return Node(select, field_type, operand.cost + 1, operand.flat + 1, size, elem_size)

    def _member_index(self, tree: Any) -> Node:
        operand_tree, index_tree = tree.children
        return self._index(tree, self.expr(operand_tree), self.expr(index_tree), optional=False)

    def _member_index_opt(self, tree: Any) -> Node:
        operand_tree, index_tree = tree.children
        return self._index(tree, self.expr(operand_tree), self.expr(index_tree), optional=True)

    def _index(self, tree: Any, operand: Node, index: Node, *, optional: bool) -> Node:
        container = operand.type.element if operand.type.kind == "optional" else operand.type
        if container.kind == "list":
            if not index.type.accepts("int", "uint"):
                raise self.error(
                    tree, f"found no matching overload for '_[_]' applied to '({container}, {index.type})'"
                )
        elif container.kind == "map":
            if not index.type.accepts("string", "int", "uint", "bool"):
                raise self.error(
                    tree, f"found no matching overload for '_[_]' applied to '({container}, {index.type})'"
                )
        elif container.kind != "dyn":
            raise self.error(
                tree, f"found no matching overload for '_[_]' applied to '({container}, {index.type})'"
            )
        elem_type = container.element
        operand_fn, index_fn = operand.fn, index.fn
        cost, flat = operand.cost + index.cost + 1, operand.flat + index.flat + 1
        size = operand.elem_size
        elem_size = MAX_MAP_ENTRIES if container.kind == "map" and elem_type.kind == "map" else DYN_SIZE
        if operand.type == map_of(map_of(DYN)) or operand.type == map_of(map_of(QUANTITY)):
            size, elem_size = MAX_MAP_ENTRIES, DYN_SIZE
        if optional or operand.type.kind == "optional":

            def optional_index(act: Activation) -> Any:
                value = operand_fn(act)
                if isinstance(value, OptionalValue):
                    if not value.has_value:
                        return OPTIONAL_NONE
                    value = value.value
                try:
                    return OptionalValue(index_value(value, index_fn(act)))
                except MissingKey:
                    return OPTIONAL_NONE

            return Node(optional_index, optional_of(elem_type), cost, flat, UNKNOWN_SIZE, UNKNOWN_SIZE)

        if index.is_const and type(index.const) is str:
            key = index.const

            def index_const(act: Activation) -> Any:
                value = operand_fn(act)
                try:
                    return value[key]
                except KeyError:
                    raise EvalError(f"no such key: {key}") from None
                except (TypeError, IndexError):
                    return index_value(value, key)

            return Node(index_const, elem_type, cost, flat, size, elem_size)

        def index_any(act: Activation) -> Any:
            return index_value(operand_fn(act), index_fn(act))

        return Node(index_any, elem_type, cost, flat, size, elem_size)

    # --- calls -------------------------------------------------------------------------

    def _ident_arg(self, tree: Any) -> Node:
        name = str(tree.children[0])
        arg_trees = self._args(tree.children[1:])
        if name == "has":
            return self._has(tree, arg_trees)
        return self._call_global(tree, name, arg_trees)

    def _member_dot_arg(self, tree: Any) -> Node:
        receiver_tree, name_token = tree.children[0], tree.children[1]
        name = str(name_token)
        arg_trees = self._args(tree.children[2:])
        namespace = _simple_ident(receiver_tree)
        if namespace == "cel" and name == "bind" and "cel" not in self.scope:
            return self._bind(tree, arg_trees)
        if namespace in library.NAMESPACES and namespace not in self.scope:
            function = library.NAMESPACES[namespace].get(name)
            if function is None:
                raise self.error(name_token, f"undeclared reference to '{namespace}.{name}'")
            return self._apply(name_token, function, None, [self.expr(arg) for arg in arg_trees])
        if name in _MACROS and arg_trees and _simple_ident(arg_trees[0]) is not None:
            return self._comprehension(name_token, name, self.expr(receiver_tree), arg_trees)
        function = library.MEMBER_FUNCTIONS.get(name)
        if function is None:
            raise self.error(name_token, f"undeclared reference to '{name}' (in container '')")
        return self._apply(
            name_token, function, self.expr(receiver_tree), [self.expr(arg) for arg in arg_trees]
        )

    def _call_global(self, tree: Any, name: str, arg_trees: Sequence[Any]) -> Node:
        function = library.GLOBAL_FUNCTIONS.get(name)
        if function is None:
            raise self.error(tree, f"undeclared reference to '{name}' (in container '')")
        return self._apply(tree, function, None, [self.expr(arg) for arg in arg_trees])

    def _apply(self, tree: Any, function: library.Function, receiver: Node | None, args: list[Node]) -> Node:
        shown = f"{function.name}"
        signature = ", ".join(str(a.type) for a in args)
        if receiver is not None:
            signature = f"{receiver.type}.({signature})"
        if len(args) not in function.params:
            raise self.error(tree, f"found no matching overload for '{shown}' applied to '{signature}'")
        if receiver is not None and function.receivers != ("*",):
            assert function.receivers is not None
            if not receiver.type.accepts(*function.receivers):
                raise self.error(tree, f"found no matching overload for '{shown}' applied to '{signature}'")
        for arg, kinds in zip(args, function.params[len(args)], strict=True):
            if kinds != ("*",) and not arg.type.accepts(*kinds):
                raise self.error(tree, f"found no matching overload for '{shown}' applied to '{signature}'")
        if (
            function.name in ("compareTo", "isGreaterThan", "isLessThan")
            and receiver is not None
            and "dyn" not in (receiver.type.kind, args[0].type.kind)
            and receiver.type != args[0].type
        ):
            raise self.error(tree, f"found no matching overload for '{shown}' applied to '{signature}'")
        if (
            function.name in ("duration", "timestamp")
            and args
            and args[0].is_const
            and type(args[0].const) is str
        ):
            # cel-go validates duration and timestamp literals when the expression compiles.
            try:
                call_function(function.impl, function.name, [args[0].const])
            except EvalError:
                raise self.error(tree, f"invalid {function.name} argument") from None
        if function.name in ("matches", "find", "findAll"):
            pattern = args[-1] if function.name == "matches" else args[0]
            if pattern.is_const and isinstance(pattern.const, str):
                try:
                    library.compile_regex(pattern.const)
                except EvalError as err:
                    raise self.error(tree, str(err)) from None
        operands = ([receiver] if receiver is not None else []) + args
        fns = tuple(node.fn for node in operands)
        impl = function.impl
        result_type = function.result_type(
            receiver.type if receiver is not None else DYN, [a.type for a in args]
        )
        sizes = [node.size for node in operands if node.type.accepts("string", "list", "bytes", "map")]
        cost = (
            1
            + sum(node.cost for node in operands)
            + (_linear_cost(function.name, sizes) if function.linear else 0)
        )
        flat = 1 + sum(node.flat for node in operands)
        size = _result_size(function.name, result_type, receiver, args)
        # Elements of a list or map a call returns have no known size upstream (but dyn()
        # passes its argument through).
        elem_size = args[0].elem_size if function.name == "dyn" and args else UNKNOWN_SIZE
        name = function.name
        if all(node.is_const for node in operands):
            # Pure functions of literals (`quantity("40Gi")`, `semver("1.2.0")`) are
            # computed once here; an error stays a runtime error, as in cel-go.
            try:
                value = call_function(impl, name, [node.const for node in operands])
            except EvalError:
                pass
            else:
                return replace(
                    _const(value, result_type, size=min(size, _runtime_size(value))),
                    cost=cost,
                    elem_size=elem_size,
                )

        if function.linear:

            def call_linear(act: Activation) -> Any:
                values = [fn(act) for fn in fns]
                act.charge(_linear_cost(name, [_runtime_size(v) for v in values]))
                return call_function(impl, name, values)

            return Node(call_linear, result_type, cost, flat, size=size, elem_size=elem_size)
        if len(fns) == 1:
            (only,) = fns

            def call_one(act: Activation) -> Any:
                return call_function(impl, name, [only(act)])

            return Node(call_one, result_type, cost, flat, size=size, elem_size=elem_size)

        def call(act: Activation) -> Any:
            return call_function(impl, name, [fn(act) for fn in fns])

        return Node(call, result_type, cost, flat, size=size, elem_size=elem_size)

    def _has(self, tree: Any, arg_trees: Sequence[Any]) -> Node:
        selection = _unwrap(arg_trees[0]) if len(arg_trees) == 1 else None
        if selection is None or selection.data != "member_dot":
            raise self.error(tree, "invalid argument to has() macro")
        operand_tree, name_token = selection.children
        name = str(name_token)
        operand = self.expr(operand_tree)
        self._select_type(tree, operand.type, name)
        fn = operand.fn

        def has(act: Activation) -> Any:
            value = fn(act)
            if is_map(value):
                return name in value
            raise EvalError(f"invalid type for field selection: {type_name(value)}")

        return Node(has, BOOL, operand.cost + 1, operand.flat + 1)

    def _bind(self, tree: Any, arg_trees: Sequence[Any]) -> Node:
        if len(arg_trees) != 3 or _simple_ident(arg_trees[0]) is None:
            raise self.error(tree, "cel.bind() takes a variable name, an initializer and an expression")
        variable = str(_simple_ident(arg_trees[0]))
        init = self.expr(arg_trees[1])
        body = self._in_scope(variable, init.type, (init.size, init.elem_size), arg_trees[2])
        init_fn, body_fn = init.fn, body.fn

        def bind(act: Activation) -> Any:
            variables = act.vars
            saved = variables.get(variable, UNSET)
            variables[variable] = init_fn(act)
            try:
                return body_fn(act)
            finally:
                if saved is UNSET:
                    del variables[variable]
                else:
                    variables[variable] = saved

        return Node(bind, body.type, init.cost + body.cost, init.flat + body.flat, body.size, body.elem_size)

    def _in_scope(self, variable: str, ctype: CelType, sizes: tuple[int, int], body_tree: Any) -> Node:
        saved = self.scope.get(variable), self.scope_sizes.get(variable)
        self.scope[variable], self.scope_sizes[variable] = ctype, sizes
        try:
            return self.expr(body_tree)
        finally:
            if saved[0] is None:
                del self.scope[variable], self.scope_sizes[variable]
            else:
                self.scope[variable], self.scope_sizes[variable] = saved[0], saved[1]  # type: ignore[assignment]

    def _comprehension(self, tree: Any, macro: str, target: Node, arg_trees: Sequence[Any]) -> Node:
        two_names = (
            len(arg_trees) >= 3
            and macro in _TWO_VARIABLE_MACROS
            and _simple_ident(arg_trees[1]) is not None
            and (macro != "map")
        )
        names = tuple(str(_simple_ident(t)) for t in arg_trees[: 2 if two_names else 1])
        expected = (_TWO_VARIABLE_MACROS if two_names else _ONE_VARIABLE_MACROS).get(macro, ())
        bodies = arg_trees[len(names) :]
        if len(arg_trees) not in expected:
            counts = " or ".join(map(str, expected)) if expected else "a different number of"
            raise self.error(tree, f"{macro}() with {len(names)} variable(s) takes {counts} arguments")
        if len(set(names)) != len(names):
            raise self.error(tree, f"{macro}() needs two different variable names")
        if not target.type.accepts("list", "map"):
            raise self.error(
                tree, f"expression of type '{target.type}' cannot be the range of a comprehension"
            )
        kind = target.type.kind
        if len(names) == 1:
            types = [target.type.element if kind == "list" else (STRING if kind == "map" else DYN)]
            sizes = [(target.elem_size, DYN_SIZE) if kind == "list" else (MAX_STRING_SIZE, DYN_SIZE)]
        else:
            types = [INT if kind == "list" else (STRING if kind == "map" else DYN), target.type.element]
            sizes = [(0, 0) if kind == "list" else (MAX_STRING_SIZE, DYN_SIZE), (target.elem_size, DYN_SIZE)]
        steps = [self._in_scope_all(names, types, sizes, body) for body in bodies]
        transforms = macro in ("map", "transformList", "transformMap")
        predicate = steps[0] if not transforms or len(steps) == 2 else None
        if predicate is not None and not predicate.type.accepts("bool"):
            raise self.error(tree, f"{macro}() needs a bool predicate, got {predicate.type}")
        iterations = max(target.size, 0)
        per_iteration = 1 + sum(step.flat for step in steps)
        cost = target.cost + iterations * (1 + sum(step.cost for step in steps))
        flat = target.flat + 1
        loop = LOOPS[macro](target.fn, names, [step.fn for step in steps], per_iteration)
        if macro == "transformMap":
            return Node(loop, map_of(steps[-1].type), cost, flat, size=iterations, elem_size=steps[-1].size)
        if transforms:
            return Node(loop, list_of(steps[-1].type), cost, flat, size=iterations, elem_size=steps[-1].size)
        if macro == "filter":
            return Node(loop, list_of(types[0]), cost, flat, size=iterations, elem_size=target.elem_size)
        return Node(loop, BOOL, cost, flat)

    def _in_scope_all(
        self, names: tuple[str, ...], types: list[CelType], sizes: list[tuple[int, int]], body: Any
    ) -> Node:
        if len(names) == 1:
            return self._in_scope(names[0], types[0], sizes[0], body)
        saved = self.scope.get(names[0]), self.scope_sizes.get(names[0])
        self.scope[names[0]], self.scope_sizes[names[0]] = types[0], sizes[0]
        try:
            return self._in_scope(names[1], types[1], sizes[1], body)
        finally:
            if saved[0] is None:
                del self.scope[names[0]], self.scope_sizes[names[0]]
            else:
                self.scope[names[0]], self.scope_sizes[names[0]] = saved[0], saved[1]  # type: ignore[assignment]


# --- tree helpers ----------------------------------------------------------------------


def _unwrap(tree: Any) -> Any:
    """The innermost meaningful rule of a chain of single-child wrapper rules."""
    while (
        hasattr(tree, "data")
        and tree.data
        in (
            "paren_expr",
            "expr",
            "conditionalor",
            "conditionaland",
            "relation",
            "addition",
            "multiplication",
            "unary",
            "member",
            "primary",
        )
        and len(tree.children) == 1
    ):
        tree = tree.children[0]
    return tree


def _chain(tree: Any, rule: str) -> list[Any]:
    """The operands of a left-recursive chain (`a && b && c`), collected without recursion."""
    operands: list[Any] = []
    while tree.data == rule and len(tree.children) == 2:
        operands.append(tree.children[1])
        tree = tree.children[0]
    operands.append(tree.children[0] if tree.data == rule else tree)
    operands.reverse()
    return operands


def _simple_ident(tree: Any) -> str | None:
    inner = _unwrap(tree)
    if hasattr(inner, "data") and inner.data == "ident":
        return str(inner.children[0])
    return None


def _field_sizes(operand: Node, name: str) -> tuple[int, int]:
    if operand.type == DEVICE:
        return {
            "driver": (MAX_DRIVER_NAME, 0),
            "attributes": (MAX_MAP_ENTRIES, MAX_MAP_ENTRIES),
            "capacity": (MAX_MAP_ENTRIES, MAX_MAP_ENTRIES),
        }.get(name, (0, 0))
    if operand.type in (map_of(map_of(DYN)), map_of(map_of(QUANTITY))):
        return MAX_MAP_ENTRIES, DYN_SIZE
    return operand.elem_size, DYN_SIZE


def _unbounded_comparison(left: Node, right: Node) -> int:
    """Comparing two values of unknown length costs the shorter length upstream: unbounded."""
    if min(left.size, right.size) < UNKNOWN_SIZE:
        return 0
    if left.type.kind not in _SIZED_KINDS or right.type.kind not in _SIZED_KINDS:
        return 0
    return _tenth(UNKNOWN_SIZE)


def _result_size(name: str, result: CelType, receiver: Node | None, args: Sequence[Node]) -> int:
    """A bound on the length of a call's result, as upstream's cost estimator knows it."""
    if result.kind not in _SIZED_KINDS:
        return 0
    if name in _SIZE_OF_RECEIVER and receiver is not None:
        return receiver.size
    if name == "replace" and receiver is not None and len(args) >= 2:
        return receiver.size * max(1, args[1].size)
    if name in ("split", "findAll") and receiver is not None:
        return max(receiver.size, 1) + 1
    if name == "join" and receiver is not None:
        return receiver.size * receiver.elem_size + (receiver.size * args[0].size if args else 0)
    if name == "dyn" and args:
        return args[0].size
    if name == "bytes" and args and args[0].type.kind == "string":
        return args[0].size * 4
    if name == "string" and args and args[0].type.kind in _SIZED_KINDS:
        return args[0].size
    return UNKNOWN_SIZE


def _type_name(ctype: CelType) -> str:
    """A type as cel-go's checker writes it in messages."""
    if ctype.kind == "null_type":
        return "null"
    if ctype.kind == "list":
        return f"list({_type_name(ctype.element)})"
    if ctype.kind == "map":
        return f"map(string, {_type_name(ctype.element)})"
    if ctype.kind == "optional":
        return f"optional_type({_type_name(ctype.element)})"
    return ctype.kind


def _common_type(types: Any) -> CelType:
    distinct = set(types)
    if len(distinct) == 1:
        return distinct.pop()  # type: ignore[no-any-return]
    return DYN
