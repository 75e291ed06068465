"""The allocation's choice of a node and devices for a pod's pending claims, on the view.

The selectors are evaluated off the loop (the :class:`Offloader`'s threads, cached per
inventory); the search runs under one decision lock, on the loop for a short while, then
in a thread on the frozen view; the choice is marked in flight right after, with no
``await`` between, so two pods never take the same device. The label, affinity and
taint checks of nodes are cached per kind of pod by the view.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from draco.allocator import NoPlacement, Placement, SearchBudget, place
from draco.allocator.inventory import Inventory
from draco.allocator.nodeselect import node_selector_matches
from draco.allocator.place import Policy, selector_chains
from draco.api.bodies import AllocationResultBody, NodeSelectorBody, ResourceClaimBody
from draco.errors import AllocationInterruptedError
from draco.runtime.offload import Deadline, Offloader
from draco.scheduling.nodefit import PodNeeds, resources_unfit_reason
from draco.scheduling.view import ClusterView

__all__ = ["INLINE_SEARCH_S", "Placer"]

#: How long a search may run on the event loop before it starts over in a thread.
INLINE_SEARCH_S: Final = 0.02


@dataclass
class Placer:
    """Node and device choice of one allocation service (see the module docstring)."""

    view: ClusterView
    offload: Offloader
    policy: Policy = "first"
    #: One decision (search + mark) at a time.
    _decision: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Selector chains known to be evaluated on every device of the inventory it names.
    _warmed: tuple[Inventory | None, set[tuple[str, ...]]] = field(default_factory=lambda: (None, set()))

    async def decide(
        self,
        keys: Sequence[str],
        needs: PodNeeds,
        allocated: Sequence[ResourceClaimBody],
        pending: Sequence[ResourceClaimBody],
        deadline: Deadline,
    ) -> tuple[str, dict[str, AllocationResultBody]] | NoPlacement | None:
        """Choose a node and devices for ``pending`` and mark them in flight.

        The selectors are evaluated first, off the loop and outside the decision lock; the
        search runs in a thread on the frozen view, under the lock; the choice is marked
        right after the view thaws, with no ``await`` between. None: one of ``keys`` went
        in flight for another pod meanwhile. Raises ``AllocationInterruptedError`` when
        ``deadline`` runs out (what was evaluated stays cached for the next attempt).
        """
        while True:
            inventory = await self.inventory()
            chains = selector_chains(inventory, pending)
            fresh, warmed = self._warmed
            if fresh is not inventory:
                warmed = set()
                self._warmed = (inventory, warmed)
            cold = [chain for chain in chains if chain not in warmed]
            if cold:
                if not await self.offload.warm(inventory.cache, cold, inventory.devices, deadline=deadline):
                    raise AllocationInterruptedError("the selectors were not evaluated in time")
                if self._warmed[0] is inventory:
                    warmed.update(cold)
            async with self._decision:
                if self.view.current_inventory() is not inventory:
                    continue  # slices or classes changed meanwhile: evaluate the new devices
                if any(key in self.view.in_flight() for key in keys):
                    return None
                if deadline.expired():
                    raise AllocationInterruptedError("the wall-clock budget ran out before the search")
                # Over cached answers most searches take a millisecond: try on the loop
                # first, stopped (never answered differently) after INLINE_SEARCH_S; a
                # search that needs longer starts over in a thread on the frozen view.
                try:
                    result = self._place(needs, allocated, pending, interrupt=_after(INLINE_SEARCH_S))
                except AllocationInterruptedError:
                    self.view.freeze()
                    try:
                        result = await self.offload.run(
                            lambda stop: self._place(
                                needs,
                                allocated,
                                pending,
                                interrupt=lambda: stop.is_set() or deadline.expired(),
                            )
                        )
                    finally:
                        self.view.thaw()
                if isinstance(result, NoPlacement):
                    return result
                # The allocator's results in their wire form (JSON of the models).
                chosen = cast(dict[str, AllocationResultBody], result.results.json())
                if self._needs_timestamp(chosen):
                    stamp = _now()
                    for allocation in chosen.values():
                        allocation["allocationTimestamp"] = stamp
                # No await since the search: the devices are taken before anyone else looks.
                self.view.begin(chosen)
                return result.node, chosen

    async def inventory(self) -> Inventory:
        """The view's inventory, built in a thread on the frozen view when it is stale."""
        inventory = self.view.current_inventory()
        if inventory is not None:
            return inventory
        async with self._decision:
            self.view.freeze()
            try:
                return await self.offload.run(lambda _stop: self.view.inventory())
            finally:
                self.view.thaw()

    def _place(
        self,
        needs: PodNeeds,
        allocated: Sequence[ResourceClaimBody],
        pending: Sequence[ResourceClaimBody],
        *,
        interrupt: Callable[[], bool] | None = None,
    ) -> Placement | NoPlacement:
        """Allocate ``pending`` on a node that admits the pod.

        The label, affinity and taint checks are cached per kind of pod; the resource
        check is made on the node the allocator picks, and only when that node lacks room
        are all nodes checked and the allocator asked again (rare: pods rarely fill a
        node's cpu before its devices, and checking every node per pod is what costs).
        """
        selectors = _allocated_selectors(allocated)
        fit = self.view.static_fit(needs)
        nodes = fit.nodes
        if selectors:
            nodes = self.view.allocator_nodes(n for n in fit.names if self._matches_all(n, selectors))
        if not nodes:
            return NoPlacement(explanation="", per_node={})
        inventory = self.view.inventory()
        budget = SearchBudget(interrupt=interrupt)
        result = place(
            inventory=inventory,
            nodes=nodes,
            claims=pending,
            policy=self.policy,
            budget=budget,
        )
        if isinstance(result, Placement) and resources_unfit_reason(
            needs, self.view.nodes[result.node], used=self.view.node_usage(result.node)
        ):
            candidates, _ = self.candidates(needs, allocated)
            if not candidates:
                return NoPlacement(explanation="", per_node={})
            result = place(
                inventory=inventory,
                nodes=self.view.allocator_nodes(candidates),
                claims=pending,
                policy=self.policy,
                budget=budget,
            )
        return result

    def _matches_all(self, name: str, selectors: Sequence[Mapping[str, Any]]) -> bool:
        labels = self.view.nodes[name].labels
        return all(node_selector_matches(s, name=name, labels=labels) for s in selectors)

    def candidates(
        self, needs: PodNeeds, allocated: Sequence[ResourceClaimBody]
    ) -> tuple[list[str], list[str]]:
        """Nodes that admit the pod and every allocated claim, and why the others do not."""
        selectors = _allocated_selectors(allocated)
        fit = self.view.static_fit(needs)
        candidates: list[str] = []
        reasons = list(fit.reasons)
        nodes = self.view.nodes
        for name in fit.names:
            info = nodes[name]
            reason = resources_unfit_reason(needs, info, used=self.view.node_usage(name))
            if reason is None and selectors and not self._matches_all(name, selectors):
                reason = "node(s) didn't match the node selector of an allocated claim"
            if reason is None:
                candidates.append(name)
            else:
                reasons.append(reason)
        return candidates, reasons

    def resource_blocked(self, needs: PodNeeds) -> bool:
        """Whether a node that admits the pod by labels and taints lacks the cpu, memory or
        pods it requests (a pod leaving that node may help it)."""
        return any(
            resources_unfit_reason(needs, self.view.nodes[name], used=self.view.node_usage(name))
            for name in self.view.static_fit(needs).names
        )

    def unavailable(self, claim: ResourceClaimBody) -> bool:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        selector = allocation.get("nodeSelector")
        if selector is not None and not any(
            node_selector_matches(selector, name=name, labels=info.labels)
            for name, info in self.view.nodes.items()
        ):
            return True
        inventory = self.view.inventory()
        return any(
            (r.get("driver", ""), r.get("pool", ""), r.get("device", "")) not in inventory.by_key
            for r in (allocation.get("devices") or {}).get("results") or []
        )

    @staticmethod
    def _needs_timestamp(chosen: Mapping[str, AllocationResultBody]) -> bool:
        return any(
            r.get("bindingConditions")
            for allocation in chosen.values()
            for r in (allocation.get("devices") or {}).get("results") or []
        )


def _after(seconds: float) -> Callable[[], bool]:
    """An interrupt that fires once ``seconds`` have passed."""
    until = time.monotonic() + seconds
    return lambda: time.monotonic() > until


def _allocated_selectors(allocated: Sequence[ResourceClaimBody]) -> list[NodeSelectorBody]:
    """The node selectors of allocated claims (None = available everywhere, left out)."""
    found = (((c.get("status") or {}).get("allocation") or {}).get("nodeSelector") for c in allocated)
    return [s for s in found if s is not None]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
