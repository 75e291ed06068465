"""CEL selector results, cached per (selector, device content) across allocations.

Selecting devices is independent of what is allocated, so the answer of one selector on
one device never changes while the device's published content stays the same. The
cache is keyed by the expression and by the interned content of the device (driver,
attributes, capacity, multi-allocation), so it survives inventory rebuilds, serves
identical devices on different nodes with one evaluation, and makes a warm allocation
cost a dictionary lookup per device. Runtime errors are cached too: they are a property
of the (selector, device) pair and must be reported each time, as upstream does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from draco.allocator.devices import DeviceRecord, cel_fingerprint
from draco.errors import CELError

__all__ = ["DEFAULT_MAX_RESULTS", "Evaluation", "SelectorCache", "shared_cache"]

#: Cached (selector, device content) results kept before the cache starts over: a bound
#: on memory for a long-running operator whose devices churn.
DEFAULT_MAX_RESULTS = 2_000_000

#: True/False, or the CEL error the selector raised on the device.
Evaluation = bool | CELError


class SelectorCache:
    """Compiled selectors and their results; share one across inventories."""

    def __init__(self, *, max_results: int = DEFAULT_MAX_RESULTS) -> None:
        self.max_results = max_results
        #: How many times a selector actually ran on a device (cache misses).
        self.evaluations = 0
        self._next_key = 0
        self._compiled: dict[str, Any] = {}
        self._compile_errors: dict[str, CELError] = {}
        #: Expressions known to compile (another process compiled them) but not compiled
        #: here: compiled only if a device's result is not cached.
        self._known_good: set[str] = set()
        self._results: dict[tuple[str, int], Evaluation] = {}
        self._fingerprints: dict[bytes, int] = {}
        self._views: dict[int, Any] = {}
        #: Inventories may be built in threads (off an event loop) at the same time.
        self._intern_lock = threading.Lock()

    def intern(self, device: DeviceRecord) -> int:
        """Give ``device`` the id of its CEL-visible content (equal content, equal id)."""
        fingerprint = cel_fingerprint(device.driver, device.raw, device.capacity, device.allow_multiple)
        with self._intern_lock:
            return self._intern(device, fingerprint)

    def _intern(self, device: DeviceRecord, fingerprint: bytes) -> int:
        cel_key = self._fingerprints.get(fingerprint)
        if cel_key is None:
            if len(self._fingerprints) >= self.max_results:
                self._start_over()
            # Ids are never reused, so records interned before a restart stay distinct.
            cel_key = self._next_key
            self._next_key += 1
            self._fingerprints[fingerprint] = cel_key
        device.cel_key = cel_key
        return cel_key

    def compile(self, expression: str) -> Any:
        """The compiled selector; raises the ``CELError`` from compiling it."""
        compiled = self._compiled.get(expression)
        if compiled is not None:
            return compiled
        error = self._compile_errors.get(expression)
        if error is not None:
            raise error
        from draco.cel import compile_selector

        # Selectors reaching the allocator are stored objects: like upstream, they are not
        # re-judged by the estimated cost (written objects were, at admission); the runtime
        # cost limit still bounds every evaluation.
        try:
            compiled = compile_selector(expression, stored=True)
        except CELError as exc:
            self._compile_errors[expression] = exc
            raise
        self._compiled[expression] = compiled
        return compiled

    def evaluate(self, expression: str, device: DeviceRecord) -> Evaluation:
        """Whether ``expression`` selects ``device``, or the CEL error it raised.

        Compile errors are raised (they do not depend on the device).
        """
        key = (expression, device.cel_key)
        result = self._results.get(key)
        if result is not None:
            return result
        compiled = self.compile(expression)
        view = self._views.get(device.cel_key)
        if view is None:
            view = _device_view(device)
            self._views[device.cel_key] = view
        self.evaluations += 1
        try:
            result = bool(compiled.matches(view))
        except CELError as exc:
            result = exc
        if len(self._results) >= self.max_results:
            self._start_over()
        self._results[key] = result
        return result

    def missing(self, chains: Sequence[Sequence[str]], devices: Sequence[DeviceRecord]) -> bool:
        """Whether :meth:`warm` would evaluate anything (a cheap check: lookups only)."""
        return bool(self.unevaluated(chains, devices, limit=1))

    def unevaluated(
        self, chains: Sequence[Sequence[str]], devices: Sequence[DeviceRecord], *, limit: int | None = None
    ) -> list[DeviceRecord]:
        """Devices (one per content) on which some chain still needs an evaluation, in
        order; at most ``limit``. Lookups only."""
        results = self._results
        usable = [c for c in chains if not any(e in self._compile_errors for e in c)]
        found: list[DeviceRecord] = []
        seen: set[int] = set()
        for device in devices:
            if device.cel_key in seen:
                continue
            for chain in usable:
                missing = False
                for expression in chain:
                    result = results.get((expression, device.cel_key))
                    if result is None:
                        missing = True
                        break
                    if result is False:
                        break
                if missing:
                    seen.add(device.cel_key)
                    found.append(device)
                    break
            if limit is not None and len(found) >= limit:
                break
        return found

    def store(self, expression: str, cel_key: int, result: Evaluation) -> None:
        """Remember a result evaluated elsewhere (another process) for ``cel_key``."""
        if len(self._results) >= self.max_results:
            self._start_over()
        self._results[(expression, cel_key)] = result

    def warm(
        self,
        chains: Sequence[Sequence[str]],
        devices: Sequence[DeviceRecord],
        *,
        start: int = 0,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Evaluate each chain of selectors on ``devices[start:]`` into the cache, in chain
        order until one rejects the device (as allocation and class status apply them;
        after a runtime error the next selectors are evaluated too, as allocation's node
        choice does).

        ``stop`` is polled after each device; the return value is where to resume
        (``len(devices)`` when done). Selectors that do not compile are skipped: whoever
        uses them reports the compile error. Only the cache changes, never an answer:
        this is how a caller moves the cost of CEL off its event loop in slices.
        """
        evaluators: list[list[Callable[[DeviceRecord], Evaluation]]] = []
        for chain in chains:
            try:
                evaluators.append([self.evaluator(expression) for expression in chain])
            except CELError:
                continue
        position = start
        while position < len(devices):
            device = devices[position]
            for chain_evaluators in evaluators:
                for evaluate in chain_evaluators:
                    if evaluate(device) is False:
                        break
            position += 1
            if stop is not None and stop():
                break
        return position

    def _start_over(self) -> None:
        self._results.clear()
        self._views.clear()
        self._fingerprints.clear()

    def note_compiled_elsewhere(self, expression: str, error: CELError | None) -> None:
        """Another process compiled ``expression``: remember its compile error, or that
        it compiles (then it is compiled here only when a result is missing)."""
        if error is not None:
            self._compile_errors[expression] = error
        elif expression not in self._compiled:
            self._known_good.add(expression)

    def evaluator(self, expression: str) -> Callable[[DeviceRecord], Evaluation]:
        """A per-expression shortcut for loops over many devices."""
        if expression not in self._known_good:
            self.compile(expression)
        results = self._results

        def evaluate(device: DeviceRecord) -> Evaluation:
            result = results.get((expression, device.cel_key))
            if result is None:
                result = self.evaluate(expression, device)
            return result

        return evaluate


_SHARED = SelectorCache()


def shared_cache() -> SelectorCache:
    """The process-wide cache inventories use unless given one: rebuilding an inventory
    after a slice changes then re-evaluates only the devices whose content changed."""
    return _SHARED


def _device_view(device: DeviceRecord) -> Any:
    from draco.api import Device
    from draco.cel import DeviceView

    return DeviceView.from_device(Device.from_dict(device.raw), driver=device.driver, pool=device.pool)
