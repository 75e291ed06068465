"""Choosing a node for a pod's claims among candidate nodes.

A layer over :func:`allocate`: it orders the nodes by policy (``first``: by name;
``pack``: most devices already allocated on the node first; ``spread``: fewest first;
ties by name; ``given``: as the caller ordered them, e.g. by kube-scheduler's scores),
skips nodes the inventory's selection indexes prove hopeless (fewer free devices matching
a request than it needs) and nodes the caller's ``admits`` refuses (checked lazily, as
they come up), and allocates on the others in order until one fits. Only when none fits
does it explain every admitted node, summarised over nodes.

:func:`device_prefilter` gives callers the same cheap bound ahead of a placement, to
choose which nodes are worth scoring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from draco.allocator.allocate import allocate_counted
from draco.allocator.inventory import Inventory, SelectionIndex, as_dict
from draco.allocator.outcome import Allocated, Node, NoPlacement, Placement, Reason, SearchBudget, Unfit
from draco.api.bodies import key_of
from draco.errors import AllocationInputError, AllocationInterruptedError, AllocationTimeoutError

__all__ = ["DevicePrefilter", "device_prefilter", "place", "selector_chains"]

_DEFAULT_BUDGET = SearchBudget()

Policy = Literal["first", "pack", "spread", "given"]


def _selector_list(data: Any) -> list[str]:
    return [
        (s.get("cel") or {}).get("expression", "")
        for s in ((data or {}).get("selectors") or [])
        if s.get("cel")
    ]


def selector_chains(inventory: Inventory, claims: Iterable[Any]) -> list[tuple[str, ...]]:
    """The CEL selectors allocating ``claims`` evaluates, per request alternative: the
    class's selectors, then the request's, in the order they are applied (the first that
    rejects a device decides). Unknown classes are left out (allocation reports them).

    Callers evaluate these ahead of time (:meth:`SelectorCache.warm`), e.g. off an event
    loop, so that :func:`place` itself finds every answer in the cache."""
    chains: list[tuple[str, ...]] = []
    for claim in claims:
        data = as_dict(claim)
        for request in ((data.get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly")
            alternatives = [exactly] if exactly is not None else list(request.get("firstAvailable") or [])
            for alternative in alternatives:
                device_class = inventory.classes.get((alternative or {}).get("deviceClassName") or "")
                if device_class is None:
                    continue
                chain = (*_selector_list(device_class.get("spec")), *_selector_list(alternative))
                if chain and chain not in chains:
                    chains.append(chain)
    return chains


def _requirements(
    inventory: Inventory, claims: list[dict[str, Any]]
) -> list[list[tuple[SelectionIndex, int]]]:
    """Per request: the alternatives as (selection index, devices needed at least)."""
    needs: list[list[tuple[SelectionIndex, int]]] = []
    for claim in claims:
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly")
            alternatives = [exactly] if exactly is not None else list(request.get("firstAvailable") or [])
            options: list[tuple[SelectionIndex, int]] = []
            for data in alternatives:
                device_class = inventory.classes.get(data.get("deviceClassName") or "")
                if device_class is None:
                    return []  # allocate() reports the unknown class precisely
                if data.get("adminAccess"):
                    continue  # admin access may use devices in use: no bound from free counts
                try:
                    index = inventory.selection(
                        _selector_list(device_class.get("spec")), _selector_list(data)
                    )
                except AllocationInputError:
                    return []  # allocate() names the class or claim whose selector is broken
                mode = data.get("allocationMode") or "ExactCount"
                need = 1 if mode == "All" else max(int(data.get("count") or 1), 1)
                options.append((index, need))
            if len(options) == len(alternatives):
                needs.append(options)
    return needs


def _hopeless(node: str, needs: list[list[tuple[SelectionIndex, int]]]) -> bool:
    return any(all(index.upper_bound(node) < need for index, need in options) for options in needs)


class _NodeOrder:
    """The candidate nodes sorted by name, cached while the caller passes the same nodes."""

    __slots__ = ("by_name", "key", "ordered")

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.key = tuple(nodes)
        self.ordered = sorted(self.key, key=lambda n: n.name)
        self.by_name = {node.name: node for node in self.ordered}


def _by_name(inventory: Inventory, nodes: Sequence[Node]) -> _NodeOrder:
    cached = inventory.node_order
    if isinstance(cached, _NodeOrder) and cached.key == tuple(nodes):
        return cached
    order = _NodeOrder(nodes)
    inventory.node_order = order
    return order


def _gate(needs: list[list[tuple[SelectionIndex, int]]]) -> set[str] | None:
    """Nodes that may satisfy the most selective request, when an index can tell."""
    best: set[str] | None = None
    for options in needs:
        if len(options) != 1:
            continue
        index, need = options[0]
        if index.free_shared >= need:
            continue
        if best is None or len(index.nonempty) < len(best):
            best = index.nonempty
    return best


def _order(
    inventory: Inventory, nodes: Sequence[Node], policy: Policy, gate: set[str] | None
) -> Iterable[Node]:
    """Candidate nodes in policy order; those outside ``gate`` cannot fit and are left out."""
    if policy not in ("first", "pack", "spread", "given"):
        raise ValueError(f"unknown placement policy {policy!r}: use first, pack, spread or given")
    if policy == "given":
        return nodes if gate is None else (node for node in nodes if node.name in gate)
    order = _by_name(inventory, nodes)
    if gate is not None and len(gate) * 4 < len(order.ordered):
        chosen = [order.by_name[name] for name in sorted(gate) if name in order.by_name]
    elif gate is not None:
        if policy == "first":  # lazily: the first fitting node usually comes early
            return (node for node in order.ordered if node.name in gate)
        chosen = [node for node in order.ordered if node.name in gate]
    else:
        chosen = order.ordered
    if policy == "pack":
        return sorted(chosen, key=lambda n: -inventory.allocated_on_node(n.name))
    if policy == "spread":
        return sorted(chosen, key=lambda n: inventory.allocated_on_node(n.name))
    return chosen


#: How many claim names the summary's first line spells out before "and N more".
_NAMED_CLAIMS = 3


def _claims_text(keys: Sequence[str]) -> str:
    """``claim a``, ``claims a, b`` or ``claims a, b, c and 7 more``: the reasons below
    name each claim they are about, so a long list only pushes them out of an Event."""
    if len(keys) == 1:
        return f"claim {keys[0]}"
    named = ", ".join(keys[:_NAMED_CLAIMS])
    rest = len(keys) - _NAMED_CLAIMS
    return f"claims {named}" + (f" and {rest} more" if rest > 0 else "")


def _summary(keys: list[str], per_node: dict[str, Unfit], total: int) -> tuple[str, tuple[Reason, ...]]:
    groups: dict[tuple[str, str | None, str | None], list[Reason]] = {}
    node_count: dict[tuple[str, str | None, str | None], int] = {}
    for unfit in per_node.values():
        seen: set[tuple[str, str | None, str | None]] = set()
        for reason in unfit.reasons:
            key = (reason.kind, reason.claim, reason.request)
            groups.setdefault(key, []).append(reason)
            if key not in seen:
                node_count[key] = node_count.get(key, 0) + 1
                seen.add(key)
    lines = [f"{_claims_text(keys)} fit on none of {total} node(s):"]
    summary: list[Reason] = []
    for key in sorted(groups, key=lambda k: (-node_count[k], k[0], k[1] or "", k[2] or "")):
        reasons = groups[key]
        kind, claim, request = key
        funnels = [r.funnel for r in reasons if r.funnel is not None]
        if funnels:
            steps: dict[str, int] = {}
            for funnel in funnels:
                for step in funnel.steps:
                    steps[step.reason] = steps.get(step.reason, 0) + step.count
            considered = sum(f.considered for f in funnels)
            available = sum(f.available for f in funnels)
            parts = ", ".join(f"{count} {reason}" for reason, count in steps.items() if count)
            needed = funnels[0].needed
            need_text = "all matching devices" if needed is None else f"{needed} device(s)"
            text = (
                f"{node_count[key]} node(s): claim {claim}, request {request} needs {need_text} of class "
                f"{funnels[0].device_class}; "
            )
            if considered:
                text += f"over these nodes {considered} devices" + (f": {parts}" if parts else "")
                text += f"; {available} left"
            else:
                text += "these nodes have no usable devices"
        else:
            example = reasons[0].message
            text = f"{node_count[key]} node(s): {example}"
        lines.append(f"- {text}")
        summary.append(Reason(kind=kind, claim=claim, request=request, message=text))
    return "\n".join(lines), tuple(summary)


class DevicePrefilter:
    """Which nodes may hold a set of claims, by the selection indexes' free counts alone
    (an upper bound: a node it admits may still fail the search, one it refuses cannot
    fit). ``nodes``: when one request's matching devices sit on few nodes, those nodes;
    else None (any node may)."""

    __slots__ = ("_needs", "nodes")

    def __init__(self, needs: list[list[tuple[SelectionIndex, int]]]) -> None:
        self._needs = needs
        gate = _gate(needs)
        self.nodes: frozenset[str] | None = None if gate is None else frozenset(gate)

    def may_fit(self, node: str) -> bool:
        if self.nodes is not None and node not in self.nodes:
            return False
        return not (self._needs and _hopeless(node, self._needs))


def device_prefilter(inventory: Inventory, claims: Sequence[Any]) -> DevicePrefilter:
    """The :class:`DevicePrefilter` of allocating ``claims`` together on ``inventory``."""
    return DevicePrefilter(_requirements(inventory, [as_dict(claim) for claim in claims]))


def place(
    *,
    inventory: Inventory,
    nodes: Sequence[Node],
    claims: Sequence[Any],
    policy: Policy = "first",
    budget: SearchBudget | None = None,
    admits: Callable[[Node], bool] | None = None,
) -> Placement | NoPlacement:
    """Find a node for ``claims`` (allocated together) among ``nodes`` (those ``admits``
    accepts, when given: it is asked only of nodes the search reaches, and of every node
    when none fits, to explain them).

    Raises :class:`draco.errors.AllocationInputError` for inputs no node can fix, and
    :class:`AllocationTimeoutError` when no node fits and the search ran out of budget
    on at least one node (so "no node fits" is not proven).
    """
    datas = [as_dict(claim) for claim in claims]
    keys = [key_of(data) for data in datas]
    limits = budget or _DEFAULT_BUDGET
    left = limits.max_total_steps
    needs = _requirements(inventory, datas)
    per_node: dict[str, Unfit] = {}
    timeouts: dict[str, AllocationTimeoutError] = {}

    def attempt(node: Node) -> Allocated | Unfit | None:
        nonlocal left
        total_spent = AllocationTimeoutError(
            f"search budget of {limits.max_total_steps} steps over all nodes exhausted while placing "
            f"claims {', '.join(keys)}; no node fits so far; simplify the constraints or raise the budget"
        )
        if left <= 0:
            raise total_spent
        if limits.interrupt is not None and limits.interrupt():
            raise AllocationInterruptedError(
                f"placing claims {', '.join(keys)} was interrupted by the caller"
            )
        cap = min(limits.max_steps, left)
        try:
            outcome, spent = allocate_counted(
                inventory=inventory, node=node, datas=datas, max_steps=cap, interrupt=limits.interrupt
            )
        except AllocationInterruptedError:
            raise
        except AllocationTimeoutError as exc:
            if cap < limits.max_steps:
                raise total_spent from exc
            left -= cap
            timeouts[node.name] = exc
            return None
        left -= spent
        if isinstance(outcome, Unfit):
            per_node[node.name] = outcome
        return outcome

    refused: set[str] = set()

    def admitted(node: Node) -> bool:
        if admits is None:
            return True
        if node.name in refused:
            return False
        if admits(node):
            return True
        refused.add(node.name)
        return False

    for node in _order(inventory, nodes, policy, _gate(needs)):
        if needs and _hopeless(node.name, needs):
            continue
        if not admitted(node):
            continue
        outcome = attempt(node)
        if isinstance(outcome, Allocated):
            return Placement(node=outcome.node, results=outcome.results)
    # Nothing fits: explain every node, including those the indexes ruled out (their bounds
    # refute them before any search).
    for node in _by_name(inventory, nodes).ordered:
        if node.name in per_node or node.name in timeouts or not admitted(node):
            continue
        outcome = attempt(node)
        if isinstance(outcome, Allocated):  # the index bound is an upper bound: cannot happen
            return Placement(node=outcome.node, results=outcome.results)
    if timeouts:
        raise AllocationTimeoutError(
            f"no node fits claims {', '.join(keys)} within the search budget; "
            f"{len(timeouts)} node(s) ran out of budget, first: {next(iter(timeouts.values()))}"
        )
    if not nodes or len(refused) == len(_by_name(inventory, nodes).ordered):
        return NoPlacement(explanation=f"no candidate nodes to place {_claims_text(keys)} on", per_node={})
    explanation, reasons = _summary(keys, per_node, len(_by_name(inventory, nodes).ordered) - len(refused))
    return NoPlacement(explanation=explanation, per_node=dict(sorted(per_node.items())), reasons=reasons)
