"""Compiled DRA device selectors: compile once (cached), evaluate on many devices.

`compile_selector` parses, type-checks and translates an expression and rejects one whose
estimated worst-case cost is above upstream's limit; `CompiledSelector.matches` evaluates
it on a device under a runtime cost limit. A runtime error — a missing attribute, a type
error, a non-bool result — is an error naming the selector and the device, never a quiet
"does not match": upstream aborts the allocation attempt in that case too.
"""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock
from typing import Final

from draco.cel.compiler import CompiledExpression, compile_tree
from draco.cel.device import DeviceView
from draco.cel.parser import parse
from draco.cel.runtime import Activation, CostLimitExceeded
from draco.cel.values import EvalError, type_name
from draco.errors import CELCompileError, CELCostError, CELError, SelectorCostError, SelectorRuntimeError

__all__ = [
    "MAX_ESTIMATED_COST",
    "MAX_EXPRESSION_BYTES",
    "MISSING_KEY_HINT",
    "RUNTIME_COST_LIMIT",
    "CompiledSelector",
    "SelectorCostError",
    "SelectorRuntimeError",
    "compile_selector",
    "estimate_cost",
]

MAX_EXPRESSION_BYTES: Final = 10 * 1024
MAX_ESTIMATED_COST: Final = 1_000_000
RUNTIME_COST_LIMIT: Final = 1_000_000
MISSING_KEY_HINT: Final = "consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
_CACHE_SIZE: Final = 4096


class CompiledSelector:
    """One compiled expression; `matches` is safe to call from many threads."""

    __slots__ = ("_fn", "estimated_cost", "expression", "stored")

    def __init__(self, expression: str, compiled: CompiledExpression, *, stored: bool) -> None:
        self.expression = expression
        self.estimated_cost = compiled.estimated_cost
        self.stored = stored
        self._fn = compiled.fn

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"

    def matches(self, device: DeviceView, *, context: str = "") -> bool:
        """Whether `device` satisfies the selector; SelectorRuntimeError if it cannot say."""
        if device.unusable is not None:
            raise self._error(SelectorRuntimeError, device, context, device.unusable)
        activation = Activation({"device": device.cel_value}, limit=RUNTIME_COST_LIMIT)
        try:
            result = self._fn(activation)
        except EvalError as err:
            detail = str(err)
            if detail.startswith("no such key"):
                detail = f"{detail}. {MISSING_KEY_HINT}"
            raise self._error(SelectorRuntimeError, device, context, detail) from None
        except CostLimitExceeded as err:
            raise self._error(SelectorCostError, device, context, str(err)) from None
        except RecursionError:
            raise self._error(SelectorRuntimeError, device, context, "expression nests too deeply") from None
        except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as err:
            # Not an error CEL defines, but still this selector failing on this device.
            detail = f"{type(err).__name__}: {err}"
            raise self._error(SelectorRuntimeError, device, context, detail) from None
        if result is True or result is False:
            return result
        raise self._error(
            SelectorRuntimeError,
            device,
            context,
            f"CEL result of type {type_name(result)} could not be converted to bool",
        )

    def _error(
        self, kind: type[SelectorRuntimeError], device: DeviceView, context: str, detail: str
    ) -> SelectorRuntimeError:
        where = context or "selector"
        return kind(
            f"{where} on device {device.id}: CEL runtime error: {detail} (expression: {_excerpt(self.expression)})",
            expression=self.expression,
            device=device.id,
            context=where,
            detail=detail,
        )


def _excerpt(expression: str, *, limit: int = 200) -> str:
    """The expression for a message: whole if short, else its start (events stay small)."""
    shown = expression if len(expression) <= limit else expression[:limit] + "…"
    return repr(shown)


def _compile(expression: str) -> CompiledExpression:
    size = len(expression.encode("utf-8"))
    if size > MAX_EXPRESSION_BYTES:
        raise CELCompileError(
            f"expression is too long: {size} bytes, at most {MAX_EXPRESSION_BYTES} are allowed; split it into several selectors"
        )
    try:
        tree = parse(expression)
    except RecursionError:
        raise CELCompileError("ERROR: <input>: expression nests too deeply") from None
    return compile_tree(tree, text=expression)


_cache: OrderedDict[tuple[str, bool], CompiledSelector | CELError] = OrderedDict()
_cache_lock = Lock()


def compile_selector(expression: str, *, stored: bool = False) -> CompiledSelector:
    """The compiled selector for `expression`, from an LRU cache keyed by the text.

    Raises CELCompileError (with what is wrong and where) or CELCostError ("too complex,
    exceeds cost limit"). `stored=True` is upstream's StoredExpressions environment, for
    expressions already persisted (the allocator evaluating a class or claim that exists):
    like upstream, it does not reject on the *estimated* cost, which is checked only when
    an expression is written; the runtime cost limit still bounds every evaluation.
    """
    key = (expression, stored)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
    if cached is None:
        cached = _build(expression, stored=stored)
        with _cache_lock:
            _cache[key] = cached
            if len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    if isinstance(cached, CELError):
        # Drop the previous raise's traceback so a cached error does not accumulate frames.
        raise cached.with_traceback(None)
    return cached


def _build(expression: str, *, stored: bool) -> CompiledSelector | CELError:
    try:
        compiled = _compile(expression)
    except CELCompileError as err:
        return err
    if not stored and compiled.estimated_cost > MAX_ESTIMATED_COST:
        return CELCostError(
            f"too complex, exceeds cost limit: estimated cost {compiled.estimated_cost} is above {MAX_ESTIMATED_COST}"
        )
    return CompiledSelector(expression, compiled, stored=stored)


def estimate_cost(expression: str) -> int:
    """The estimated worst-case cost of `expression`; CELCompileError if it does not compile."""
    return _compile(expression).estimated_cost
