"""Where Kopf keeps its per-handler bookkeeping: in memory, never on our objects.

By default Kopf writes progress and "last handled" annotations onto every object it
handles. On pods and claims that is noise other tools see (and a write per event). The
operator's handlers are watch-event handlers feeding work queues, whose state is re-derived
from the API at start, so Kopf's own records only need to live as long as the process.
"""

from __future__ import annotations

from typing import Any

import kopf

__all__ = ["MemoryDiffBaseStorage", "MemoryProgressStorage"]


def _uid(body: Any) -> str:
    return str(body.get("metadata", {}).get("uid", ""))


class MemoryProgressStorage(kopf.ProgressStorage):
    """Handler progress by object UID and handler id, in this process only."""

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[str, dict[str, Any]] = {}

    def fetch(self, *, key: Any, body: Any) -> Any:
        return self._records.get(_uid(body), {}).get(str(key))

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        self._records.setdefault(_uid(body), {})[str(key)] = dict(record)

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        records = self._records.get(_uid(body))
        if records is not None:
            records.pop(str(key), None)
            if not records:
                del self._records[_uid(body)]

    def touch(self, *, body: Any, patch: Any, value: str | None) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return super().clear(essence=essence)


class MemoryDiffBaseStorage(kopf.DiffBaseStorage):
    """The last handled essence by object UID, in this process only.

    Kopf builds the "essence" of every watched object on every event (a deep copy of the
    body without its status and noisy metadata) to diff it for change-detecting handlers
    (``on.create/update/field``). draco registers only ``on.event`` handlers, which never
    see that diff, and profiles of the operator under load showed the copy at ~5% of its
    CPU. So the essence is built only while a change-detecting handler is registered
    (`changing_handlers`, checked once at start); otherwise it is an empty mapping.
    """

    def __init__(self) -> None:
        super().__init__()
        self._essences: dict[str, Any] = {}

    #: Set by the operator's startup from Kopf's registry: whether any handler needs diffs.
    changing_handlers: bool = True

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        if not self.changing_handlers:
            return kopf.BodyEssence()
        return super().build(body=body, extra_fields=extra_fields)

    def fetch(self, *, body: Any) -> Any:
        return self._essences.get(_uid(body))

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        self._essences[_uid(body)] = essence
