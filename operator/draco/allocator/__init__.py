"""The embedded DRA allocator: inventory + claims + node -> allocation results or reasons.

Pure (no I/O, no clock, deterministic). :func:`allocate` answers for one node,
:func:`place` chooses a node among candidates. Inputs are ``draco.api`` models or their
Kubernetes JSON dicts; results are ``draco.api.AllocationResult`` models.
"""

from draco.allocator.allocate import allocate
from draco.allocator.inventory import Inventory
from draco.allocator.outcome import (
    DEFAULT_MAX_STEPS,
    Allocated,
    FunnelStep,
    Node,
    NoPlacement,
    Placement,
    Reason,
    RequestFunnel,
    SearchBudget,
    Unfit,
)
from draco.allocator.place import place
from draco.allocator.selectors import SelectorCache

#: The allocated state lives in the inventory (``mark_allocated`` / ``release``).
AllocatedState = Inventory

__all__ = [
    "DEFAULT_MAX_STEPS",
    "Allocated",
    "AllocatedState",
    "FunnelStep",
    "Inventory",
    "NoPlacement",
    "Node",
    "Placement",
    "Reason",
    "RequestFunnel",
    "SearchBudget",
    "SelectorCache",
    "Unfit",
    "allocate",
    "place",
]
