"""What the allocator answers: the inputs that name a node, the budget, and the outcomes.

Kept apart from the search so that callers (the operator, `draco simulate`, tests) can
import the vocabulary without the machinery. Every outcome is a frozen value: the same
inputs give equal outcomes, which is what makes the allocator testable and cacheable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MAX_TOTAL_STEPS",
    "INTERRUPT_POLL_STEPS",
    "Allocated",
    "AllocationResults",
    "FunnelStep",
    "NoPlacement",
    "Node",
    "Placement",
    "Reason",
    "RequestFunnel",
    "SearchBudget",
    "Unfit",
]

#: Candidate devices the search may try per node before it gives up. Decided searches
#: on real inventories take a few hundred steps; this is the safety net for the rest.
DEFAULT_MAX_STEPS: Final = 1_000_000
#: Steps node choice may spend over all nodes of one placement (a few seconds of work).
DEFAULT_MAX_TOTAL_STEPS: Final = 4_000_000
#: How often (in search steps) the search polls :attr:`SearchBudget.interrupt`.
INTERRUPT_POLL_STEPS: Final = 1024


def _frozen_labels(labels: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(labels))


@dataclass(frozen=True)
class Node:
    """A node as the allocator sees it: a name (``metadata.name``) and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_labels(self.labels))
        # Kept: a node keys the inventory's per-node views, looked up on every attempt.
        object.__setattr__(self, "_hash", hash((self.name, frozenset(self.labels.items()))))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt, not copied: string hashes differ between processes.
        return (Node, (self.name, dict(self.labels)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return self.name == other.name and dict(self.labels) == dict(other.labels)


@dataclass(frozen=True)
class SearchBudget:
    """A deterministic limit on the search: the allocator has no clock.

    ``max_steps`` counts candidate devices tried for one node; ``max_total_steps`` caps
    what node choice spends over all nodes of one placement. Running out raises
    :class:`draco.errors.AllocationTimeoutError`, never "does not fit".

    ``interrupt`` is the caller's way to stop a long search (the operator's wall clock):
    polled every :data:`INTERRUPT_POLL_STEPS` steps and between nodes, it may only turn an
    answer into :class:`draco.errors.AllocationInterruptedError`; it never changes which
    answer is found, so the allocator stays deterministic for equal inputs.
    """

    max_steps: int = DEFAULT_MAX_STEPS
    max_total_steps: int = DEFAULT_MAX_TOTAL_STEPS
    interrupt: Callable[[], bool] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_total_steps < 1:
            raise ValueError("SearchBudget.max_steps and max_total_steps must be at least 1")


@dataclass(frozen=True)
class FunnelStep:
    """One filter a request applies to the devices of a node, and how many it removed."""

    reason: str
    count: int


@dataclass(frozen=True)
class RequestFunnel:
    """How the devices a node offers were narrowed down for one (sub)request.

    ``considered`` devices come from usable pools on the node; each step removes devices
    that passed every earlier step; ``available`` are left. ``needed`` is ``None`` for
    ``allocationMode: All``.
    """

    claim: str
    request: str
    device_class: str
    needed: int | None
    considered: int
    steps: tuple[FunnelStep, ...]
    available: int

    def describe(self) -> str:
        """``8 devices on the node: 4 rejected by selector #0 of class gpu, 3 in use; 1 left``."""
        if not self.considered:
            return "the node has no usable devices"
        parts = [f"{step.count} {step.reason}" for step in self.steps if step.count]
        noun = "device" if self.considered == 1 else "devices"
        text = f"{self.considered} {noun} on the node"
        if parts:
            text += ": " + ", ".join(parts)
        return f"{text}; {self.available} left"


@dataclass(frozen=True)
class Reason:
    """One structured reason why claims do not fit on a node.

    ``kind`` is one of ``not-enough-devices``, ``constraint``, ``incomplete-pool``,
    ``invalid-pool``, ``counters``, ``capacity``, ``result-limit``, ``no-combination``,
    ``no-devices``. ``claim``/``request`` name what it is about when it is about one.
    """

    kind: str
    message: str
    claim: str | None = None
    request: str | None = None
    funnel: RequestFunnel | None = None


class AllocationResults(Mapping[str, Any]):
    """``namespace/name`` -> ``draco.api.AllocationResult``, each model built on first access.

    The allocator produces the JSON shape; the operator writes that shape to the claims
    and never reads the models, so building them eagerly (a validation per claim) would
    be paid on every pod for nothing. :meth:`json` gives the shape itself.
    """

    __slots__ = ("_json", "_models")

    def __init__(self, allocations: Mapping[str, dict[str, Any]]) -> None:
        self._json = dict(allocations)
        self._models: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        model = self._models.get(key)
        if model is None:
            from draco.api import AllocationResult

            model = self._models[key] = AllocationResult.from_dict(self._json[key])
        return model

    def __contains__(self, key: object) -> bool:
        return key in self._json  # without building the model, as Mapping's would

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)

    def __repr__(self) -> str:
        return f"AllocationResults({self._json!r})"

    def json(self) -> dict[str, dict[str, Any]]:
        """Each claim's ``status.allocation`` in the Kubernetes JSON shape (a new dict per
        call, the allocations themselves shared: the caller may add fields to them)."""
        return dict(self._json)


@dataclass(frozen=True)
class Allocated:
    """All claims fit on ``node``: ``results`` maps ``namespace/name`` to an AllocationResult
    (an :class:`AllocationResults`)."""

    node: str
    results: AllocationResults


@dataclass(frozen=True)
class Unfit:
    """The claims do not fit on ``node`` (not an error: another node may do)."""

    node: str
    reasons: tuple[Reason, ...]
    explanation: str


@dataclass(frozen=True)
class Placement:
    """The node chosen for a pod's claims and their allocation results."""

    node: str
    results: AllocationResults


@dataclass(frozen=True)
class NoPlacement:
    """No candidate node fits; ``explanation`` summarises, ``per_node`` has the details."""

    explanation: str
    per_node: Mapping[str, Unfit]
    reasons: tuple[Reason, ...] = ()
