"""What the CEL worker process evaluates: device selectors on devices' published content.

The offloader (`draco.runtime.offload`) sends chunks of devices to a worker process
(`draco.runtime.workerprocess`) and this module's `evaluate_chunk` answers them there. It
imports nothing but the CEL environment, and that only when first called, so the process
stays small: it holds compiled selectors and the chunk at hand, never the operator's caches.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from draco.errors import CELError

if TYPE_CHECKING:
    from draco.allocator.selectors import Evaluation

__all__ = ["WARM_UP", "ChunkAnswer", "WireDevice", "evaluate_chunk"]

#: One device as the worker process sees it: (cache id, driver, pool, published dict).
WireDevice = tuple[int, str, str, dict[str, Any]]
#: What the process answers for a chunk: devices done, results, compile errors.
ChunkAnswer = tuple[int, list[tuple[str, int, "Evaluation"]], dict[str, "CELError | None"]]

_COMPILED: dict[str, Any] = {}
_BROKEN: set[str] = set()

#: One selector on one device: what the offloader's `prestart` has the worker evaluate once.
WARM_UP: Final = (
    [('device.driver == "warm-up.draco.invalid"',)],
    [(0, "warm-up.draco.invalid", "warm-up", {"name": "warm-up"})],
)


def _compiled(expression: str) -> Any:
    compiled = _COMPILED.get(expression)
    if compiled is None:
        from draco.cel import compile_selector

        # Like the allocator's cache: stored selectors are not re-judged by estimated cost.
        compiled = compile_selector(expression, stored=True)
        if len(_COMPILED) > 1024:
            _COMPILED.clear()
        _COMPILED[expression] = compiled
    return compiled


def _compiles_not(expression: str) -> bool:
    try:
        _compiled(expression)
    except CELError:
        return True
    return False


def evaluate_chunk(
    chains: Sequence[tuple[str, ...]], devices: Sequence[WireDevice], seconds: float | None = None
) -> ChunkAnswer:
    """Each chain on each device, in chain order until a selector rejects the device (a
    runtime error goes on to the next selector, as allocation's node choice does).
    Chains that do not compile are skipped: whoever uses them reports the error.

    Stops after the device during which ``seconds`` ran out; returns how many devices
    were done, their results, and per expression its compile error or None."""
    until = None if seconds is None else time.monotonic() + seconds
    from draco.cel import DeviceView

    found: list[tuple[str, int, Evaluation]] = []
    done = 0
    for cel_key, driver, pool, raw in devices:
        if until is not None and done and time.monotonic() >= until:
            break
        done += 1
        view: Any = None
        for chain in chains:
            if any(expression in _BROKEN for expression in chain):
                continue
            try:
                compiled = [_compiled(expression) for expression in chain]
            except CELError:
                _BROKEN.update(e for e in chain if _compiles_not(e))
                continue
            for expression, selector in zip(chain, compiled, strict=True):
                if view is None:
                    view = DeviceView.from_wire(raw, driver=driver, pool=pool)
                result: Evaluation
                try:
                    result = bool(selector.matches(view))
                except CELError as exc:
                    result = exc
                found.append((expression, cel_key, result))
                if result is False:
                    break
    compile_status: dict[str, CELError | None] = {}
    for chain in chains:
        for expression in chain:
            try:
                _compiled(expression)
            except CELError as exc:
                compile_status[expression] = exc
            else:
                compile_status[expression] = None
    return done, found, compile_status
