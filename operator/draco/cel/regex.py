"""Regular expressions for `matches()`, `find()` and `findAll()`: RE2, as cel-go uses.

RE2 runs in time linear in the input and has no backreferences or lookarounds, so a
selector like `"aaaa…!".matches("(a+)+$")` cannot stall the operator the way Python's
backtracking `re` would, and a pattern upstream rejects is rejected here too. The
`google-re2` binding has no type information, hence the thin typed wrapper.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any, Protocol

__all__ = ["Regex", "RegexError", "compile_regex"]

_re2: Any = importlib.import_module("re2")
_OPTIONS: Any = _re2.Options()
_OPTIONS.log_errors = False  # errors are reported to the user, not to stderr


class RegexError(ValueError):
    """The pattern is not a valid RE2 regular expression."""


class _Match(Protocol):
    def group(self, index: int = 0) -> str: ...


class Regex:
    """A compiled RE2 pattern with the three searches CEL needs."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        try:
            self._compiled: Any = _re2.compile(pattern, options=_OPTIONS)
        except _re2.error as err:
            detail = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else str(err)
            raise RegexError(f"invalid regular expression {pattern!r}: {detail}") from None

    def search(self, text: str) -> bool:
        return self._compiled.search(text) is not None

    def find(self, text: str) -> str:
        match: _Match | None = self._compiled.search(text)
        return match.group(0) if match is not None else ""

    def find_all(self, text: str) -> list[str]:
        return [match.group(0) for match in self._compiled.finditer(text)]


@lru_cache(maxsize=512)
def compile_regex(pattern: str) -> Regex:
    """The compiled pattern (cached); RegexError if it is not valid RE2."""
    return Regex(pattern)
