"""The embedded DRA allocator: inventory + claims + node -> allocation results or reasons.

Pure (no I/O, no clock, deterministic). :func:`allocate` answers for one node,
:func:`place` chooses a node among candidates. Inputs are ``draco.api`` models or their
Kubernetes JSON dicts; results are ``draco.api.AllocationResult`` models.

Semantics follow upstream's structured allocator (``k8s.io/dynamic-resource-allocation``,
experimental variant) and find the same first solution. Where draco departs, on purpose:

- ``distinctAttribute`` keeps every device's value: devices of the covered requests are
  pairwise distinct. Upstream remembers one value per request name, so a request with
  three or more devices can repeat a value.
- Selectors run on every device of the node that is not in use, before the search, so
  a CEL runtime error fails the allocation whether or not a search would have reached
  that device (upstream fails only if it does). Same inputs, same answer.
- Device names must be unique in the whole pool (upstream checks the node's slices).
- A DeviceTaintRule without ``deviceSelector`` taints nothing, as the API documents
  (upstream's scheduler-side tracker applies it to every device).
- Share ids are name-based UUIDs (claim, request, device, position), not random.
- The safety net is a search-step budget (:class:`SearchBudget`), not a 10 s timer; running
  out raises ``AllocationTimeoutError``, never "does not fit".
- Counter checks compare only the counters a device consumes (upstream compares every
  counter of the pool, so one over-committed counter blocks unrelated devices).
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
