"""The comprehension macros at run time: `all`, `exists`, `exists_one`, `map`, `filter`,
and the two-variable forms (`all(i, v, p)`, `transformList`, `transformMap`).

Each iteration charges the activation's cost counter before it runs, so a comprehension
cannot run past the runtime cost limit. `all` and `exists` absorb an error in one
iteration when another iteration decides the result, as CEL specifies; the others fail on
the first error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from draco.cel.runtime import UNSET, Activation, Fn
from draco.cel.values import EvalError, is_list, is_map, type_name

__all__ = ["LOOPS", "LoopFactory"]

LoopFactory = Callable[[Fn, tuple[str, ...], list[Fn], int], Fn]


class _Variables:
    """Binds the loop variables (one: the element or key; two: index or key, and value)."""

    __slots__ = ("first", "names", "second")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.first = names[0]
        self.second = names[1] if len(names) == 2 else None

    def items(self, value: Any) -> Sequence[Any]:
        if self.second is None:
            if is_list(value):
                return value  # type: ignore[no-any-return]
            if is_map(value):
                return list(value)
        elif is_list(value):
            return list(enumerate(value))
        elif is_map(value):
            return list(value.items())
        raise EvalError(f"got '{type_name(value)}', expected iterable type")

    def save(self, variables: dict[str, Any]) -> list[Any]:
        return [variables.get(name, UNSET) for name in self.names]

    def bind(self, variables: dict[str, Any], item: Any) -> None:
        if self.second is None:
            variables[self.first] = item
        else:
            variables[self.first], variables[self.second] = item

    def restore(self, variables: dict[str, Any], saved: list[Any]) -> None:
        for name, value in zip(self.names, saved, strict=True):
            if value is UNSET:
                variables.pop(name, None)
            else:
                variables[name] = value


def _loop_quantifier(*, decisive: bool, macro: str) -> LoopFactory:
    """`all` (decided by a false) or `exists` (decided by a true)."""

    def factory(target: Fn, names: tuple[str, ...], steps: list[Fn], per_iteration: int) -> Fn:
        (predicate,) = steps
        loop_vars = _Variables(names)

        first, second = loop_vars.first, loop_vars.second

        def quantifier(act: Activation) -> Any:
            items = loop_vars.items(target(act))
            variables = act.vars
            saved = loop_vars.save(variables)
            error: EvalError | None = None
            try:
                for item in items:
                    act.charge(per_iteration)
                    # Inline binding: this loop is the hot path of attribute-map selectors.
                    if second is None:
                        variables[first] = item
                    else:
                        variables[first], variables[second] = item
                    try:
                        result = predicate(act)
                    except EvalError as err:
                        error = error or err
                        continue
                    if result is decisive:
                        return decisive
                    if result is not (not decisive):
                        error = error or EvalError(
                            f"no such overload: {macro}() predicate returned {type_name(result)}"
                        )
            finally:
                loop_vars.restore(variables, saved)
            if error is not None:
                raise error
            return not decisive

        return quantifier

    return factory


def _loop_exists_one(target: Fn, names: tuple[str, ...], steps: list[Fn], per_iteration: int) -> Fn:
    (predicate,) = steps
    loop_vars = _Variables(names)

    def exists_one(act: Activation) -> Any:
        items = loop_vars.items(target(act))
        variables = act.vars
        saved = loop_vars.save(variables)
        count = 0
        try:
            for item in items:
                act.charge(per_iteration)
                loop_vars.bind(variables, item)
                result = predicate(act)
                if result is True:
                    count += 1
                elif result is not False:
                    raise EvalError(f"no such overload: exists_one() predicate returned {type_name(result)}")
        finally:
            loop_vars.restore(variables, saved)
        return count == 1

    return exists_one


def _keep(keep: Fn | None, act: Activation, macro: str) -> bool:
    if keep is None:
        return True
    wanted = keep(act)
    if wanted is True or wanted is False:
        return wanted
    raise EvalError(f"no such overload: {macro}() filter returned {type_name(wanted)}")


def _loop_map(target: Fn, names: tuple[str, ...], steps: list[Fn], per_iteration: int) -> Fn:
    """`map(x, t)`, `map(x, p, t)`, `transformList(i, v, t)`, `transformList(i, v, p, t)`."""
    transform = steps[-1]
    keep = steps[0] if len(steps) == 2 else None
    loop_vars = _Variables(names)

    def mapped(act: Activation) -> Any:
        items = loop_vars.items(target(act))
        variables = act.vars
        saved = loop_vars.save(variables)
        results = []
        try:
            for item in items:
                act.charge(per_iteration)
                loop_vars.bind(variables, item)
                if _keep(keep, act, "map"):
                    results.append(transform(act))
        finally:
            loop_vars.restore(variables, saved)
        return results

    return mapped


def _loop_transform_map(target: Fn, names: tuple[str, ...], steps: list[Fn], per_iteration: int) -> Fn:
    """`transformMap(k, v, t)` and `transformMap(k, v, p, t)`: same keys, new values."""
    transform = steps[-1]
    keep = steps[0] if len(steps) == 2 else None
    loop_vars = _Variables(names)

    def transformed(act: Activation) -> Any:
        items = loop_vars.items(target(act))
        variables = act.vars
        saved = loop_vars.save(variables)
        results: dict[Any, Any] = {}
        try:
            for item in items:
                act.charge(per_iteration)
                loop_vars.bind(variables, item)
                if _keep(keep, act, "transformMap"):
                    results[item[0]] = transform(act)
        finally:
            loop_vars.restore(variables, saved)
        return results

    return transformed


def _loop_filter(target: Fn, names: tuple[str, ...], steps: list[Fn], per_iteration: int) -> Fn:
    (predicate,) = steps
    loop_vars = _Variables(names)

    def filtered(act: Activation) -> Any:
        items = loop_vars.items(target(act))
        variables = act.vars
        saved = loop_vars.save(variables)
        results = []
        try:
            for item in items:
                act.charge(per_iteration)
                loop_vars.bind(variables, item)
                if _keep(predicate, act, "filter"):
                    results.append(item)
        finally:
            loop_vars.restore(variables, saved)
        return results

    return filtered


LOOPS: Final[dict[str, LoopFactory]] = {
    "all": _loop_quantifier(decisive=False, macro="all"),
    "exists": _loop_quantifier(decisive=True, macro="exists"),
    "exists_one": _loop_exists_one,
    "existsOne": _loop_exists_one,
    "map": _loop_map,
    "transformList": _loop_map,
    "filter": _loop_filter,
    "transformMap": _loop_transform_map,
}
