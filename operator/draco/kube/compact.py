"""Smaller cached objects: strings interned, equal parts shared between objects.

Why: an informer keeps every pod and claim of the cluster for the life of the process,
and a decoded object is mostly repetition. Each watch event is its own decoded copy, so
every pod carries its own copy of the same image name, the same defaulted fields, the
same tolerations, and every claim made from one template the same spec. At 20,000 pods
and claims that is well over 100 MB of the operator's memory.

:class:`Compactor` rebuilds an object for a cache:

- :meth:`Compactor.intern` copies it with every key and short string interned (a UID
  then exists once whether a pod, a claim's owner reference and an index hold it);
- :meth:`Compactor.share` returns one canonical copy per distinct value (found by its
  JSON), so the pods of one template on one node hold one ``affinity``, all of them one
  ``containers``, and the claims of one template one ``spec``.

A shared part is held by many objects at once: whoever reads a cached object must copy
before changing anything below its top level and its ``metadata`` (the informer's
contract already: a cached object is the cache's). The table of canonical values is
cleared when it reaches its ``limit``, so parts of objects long gone do not pile up;
objects cached before keep their copies, those cached after share anew.
"""

from __future__ import annotations

import sys
from typing import Any, Final

import orjson

__all__ = ["SHARED_VALUES", "Compactor"]

#: Distinct values a :class:`Compactor` remembers before it starts over.
SHARED_VALUES: Final = 50_000
#: Strings up to this length are interned (longer ones are rarely repeated).
_INTERN_MAX: Final = 128


class Compactor:
    """Interns and shares the parts of cached objects (see the module docstring)."""

    def __init__(self, *, limit: int = SHARED_VALUES) -> None:
        self._limit = limit
        self._shared: dict[bytes, Any] = {}

    def __len__(self) -> int:
        return len(self._shared)

    def intern(self, value: Any) -> Any:
        """A copy of ``value`` (JSON: dicts, lists, scalars) with its keys and short strings interned."""
        if isinstance(value, dict):
            return {sys.intern(k) if isinstance(k, str) else k: self.intern(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.intern(v) for v in value]
        if isinstance(value, str) and len(value) <= _INTERN_MAX:
            return sys.intern(value)
        return value

    def share(self, value: Any) -> Any:
        """The canonical copy of ``value``: equal values (as JSON) get the same object.
        Scalars are interned, not tabled."""
        if not isinstance(value, (dict, list)):
            return self.intern(value)
        try:
            key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # not plain JSON: keep a copy of its own
            return self.intern(value)
        found = self._shared.get(key)
        if found is None:
            if len(self._shared) >= self._limit:
                self._shared.clear()
            found = self._shared[key] = self.intern(value)
        return found

    def share_items(self, value: Any) -> Any:
        """``value`` with each of its items shared (a dict's values, a list's elements),
        itself a copy of its own: for a mapping whose parts repeat across objects while
        the whole does not."""
        if isinstance(value, dict):
            return {sys.intern(k) if isinstance(k, str) else k: self.share(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.share(v) for v in value]
        return self.intern(value)
