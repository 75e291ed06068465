"""Kopf's per-object memory for a process that only answers admission requests: none kept.

Kopf keeps a memory (a memo, daemon and index state: about 0.9 KB) per object UID it
handles, and forgets it when its watch reports the object deleted. For an admission
request Kopf keeps one for every UPDATE (a CREATE's is thrown away), and `draco webhook`
watches nothing, so none is ever forgotten: every claim whose status the operator wrote,
every pod the translating webhook saw updated, stays in memory for the life of the
process. :class:`AdmissionMemories` is the store `draco webhook` runs Kopf with: every
memory is made for the request and dropped with it, as Kopf does for a CREATE.
(`tests/unit/webhook/test_handlers.py` shows both.)

It subclasses Kopf's store, which Kopf's `kopf.operator(memories=...)` takes but does not
export: the one place draco imports from Kopf's internals, pinned by that test.
"""

from __future__ import annotations

from typing import Any

from kopf._core.reactor.inventory import ResourceMemories, ResourceMemory

__all__ = ["AdmissionMemories"]


class AdmissionMemories(ResourceMemories):
    """Kopf's memories, never remembered (see the module docstring)."""

    async def recall(
        self,
        raw_body: Any,
        *,
        memobase: Any = None,
        noticed_by_listing: bool = False,
        ephemeral: bool = False,
    ) -> ResourceMemory:
        del ephemeral  # always: nothing outlives the request
        memory: ResourceMemory = await super().recall(
            raw_body, memobase=memobase, noticed_by_listing=noticed_by_listing, ephemeral=True
        )
        return memory
