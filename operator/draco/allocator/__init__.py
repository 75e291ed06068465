"""The embedded DRA allocator: inventory + claims + node -> allocation results or reasons.

Pure (no I/O, no clock, deterministic). :func:`allocate` answers for one node,
:func:`place` chooses a node among candidates. Inputs are ``draco.api`` models or their
Kubernetes JSON dicts; results are ``draco.api.AllocationResult`` models, built on first
access (:class:`AllocationResults`; its ``json()`` is the shape written to claims).

Semantics follow upstream's structured allocator (``k8s.io/dynamic-resource-allocation``
v0.37.1, the variant a 1.37 scheduler uses with its default features) and find the same
first solution, with the same results field by field (consumed capacity written as
upstream writes quantities). ``tests/differential`` checks this against upstream's own
code on random problems; each difference it accepts is one of the departures below, by
the name in bold, and only where that departure's precondition holds.

Features draco always has, which upstream gates off by default in 1.37: list-typed
attributes and ``includes()`` (DRAListTypeAttributes, alpha: ``matchAttribute`` then
needs a common element, ``distinctAttribute`` disjoint lists), and exact arithmetic on
fractional capacity request policies (DRAFractionalCapacityRange, on upstream only with
``--min-compatibility-version=1.37``).

Departures, on purpose:

- **eager selector evaluation**: selectors run before the search on every device that
  upstream's search could evaluate on the node (devices not in use; for ``All`` every
  device, in use or not; and the devices of a ``perDeviceNodeSelection`` slice that
  reaches the node, whichever node they are for), so a CEL runtime error fails the
  allocation whether or not the search would have reached that device (upstream fails
  only if it does). Same inputs, same answer.
- **invalid pool is unfit**: a pool that is invalid as the node sees it (a device name
  twice among the node's slices, counters of an unknown or twice-defined counter set)
  makes the node "does not fit" with a reason naming the pool when nothing else fits;
  upstream returns an error that fails only that node (``ErrFailedAllocationOnNode``),
  to the same effect.
- **over-committed counters**: counter checks compare only the counters a device
  consumes (upstream compares every counter of the pool, so one counter that allocated
  devices already over-commit blocks every counter-consuming device of the pool). draco
  answers what upstream answers with such a counter raised to what is in use: it may
  allocate where upstream does not fit, or reach a device with which an ``All`` request
  breaks a claim constraint (an error) where upstream stops at that device (does not fit).
- **search budget**: the safety net is a search-step budget (:class:`SearchBudget`), not
  a 10 s timer; running out raises ``AllocationTimeoutError``, never "does not fit".
- **share ids**: share ids are name-based UUIDs (claim, request, device, position), not
  random.
- **taint rule without selector**: a DeviceTaintRule without ``deviceSelector`` taints
  nothing, as the API documents (upstream's scheduler-side tracker applies it to every
  device).
- **dual-spelled attribute**: a device that publishes both ``model`` and
  ``<driver>/model`` is seen with the qualified one, by constraints (as upstream) and by
  CEL (where upstream's choice depends on Go's map order).
"""

from draco.allocator.allocate import allocate
from draco.allocator.inventory import Inventory
from draco.allocator.outcome import (
    DEFAULT_MAX_STEPS,
    Allocated,
    AllocationResults,
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
    "AllocationResults",
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
