"""The allocation's choice of a node and devices for a pod's pending claims, on the view.

The decision itself is pure (`draco.scheduling.plan`, which `draco simulate` runs too);
this runs it on the view. The selectors are evaluated off the loop (the :class:`Offloader`'s
threads, cached per inventory); the search runs under one decision lock, on the loop for a short while, then
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
from typing import Final, cast

from draco.allocator import NoPlacement, Placement, SearchBudget
from draco.allocator.inventory import Inventory
from draco.allocator.nodeselect import node_selector_matches
from draco.allocator.place import selector_chains
from draco.api.bodies import AllocationResultBody, ResourceClaimBody
from draco.errors import AllocationInterruptedError
from draco.runtime.offload import Deadline, Offloader
from draco.scheduling.nodeorder import NodeOrder, PlacementPolicy
from draco.scheduling.noderesources import FIT as RESOURCES_RULE
from draco.scheduling.plan import candidates, choose
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.view import ClusterView

__all__ = ["INLINE_SEARCH_S", "RESOURCES_RULE", "Placer"]

#: How long a search may run on the event loop before it starts over in a thread.
INLINE_SEARCH_S: Final = 0.02


@dataclass
class Placer:
    """Node and device choice of one allocation service (see the module docstring)."""

    view: ClusterView
    offload: Offloader
    policy: PlacementPolicy = "scheduler"
    #: kube-scheduler's ``nextStartNodeIndex``: where the next pod's sampling starts.
    order: NodeOrder = field(default_factory=NodeOrder)
    #: One decision (search + mark) at a time.
    _decision: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Selector chains known to be evaluated on every device of the inventory it names.
    _warmed: tuple[Inventory | None, set[tuple[str, ...]]] = field(default_factory=lambda: (None, set()))

    async def decide(
        self,
        keys: Sequence[str],
        pod: PodInfo,
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
            inventory = await self.warm([pending], deadline)
            async with self._decision:
                if self.view.current_inventory() is not inventory:
                    continue  # slices or classes changed meanwhile: evaluate the new devices
                if any(key in self.view.in_flight() for key in keys):
                    return None
                result = await self.search(pod, allocated, pending, deadline)
                if isinstance(result, NoPlacement):
                    return result
                # No await since the search: the devices are taken before anyone else looks.
                return result.node, self.mark(result)

    async def warm(self, pendings: Sequence[Sequence[ResourceClaimBody]], deadline: Deadline) -> Inventory:
        """The current inventory, with the selectors of every claim of ``pendings``
        evaluated on its devices (off the loop, outside the decision lock)."""
        inventory = await self.inventory()
        chains: list[tuple[str, ...]] = []
        for pending in pendings:
            chains += [chain for chain in selector_chains(inventory, pending) if chain not in chains]
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
        return inventory

    @property
    def lock(self) -> asyncio.Lock:
        """The decision lock: one decision (search and mark) at a time."""
        return self._decision

    async def search(
        self,
        pod: PodInfo,
        allocated: Sequence[ResourceClaimBody],
        pending: Sequence[ResourceClaimBody],
        deadline: Deadline,
        *,
        names: Sequence[str] | None = None,
    ) -> Placement | NoPlacement:
        """The search, under the decision lock (the caller holds it): on the loop first,
        stopped (never answered differently) after INLINE_SEARCH_S; a search that needs
        longer starts over in a thread on the frozen view. ``names``: the nodes to
        consider (default: every node whose labels and taints admit the pod)."""
        if deadline.expired():
            raise AllocationInterruptedError("the wall-clock budget ran out before the search")
        try:
            return self._place(pod, allocated, pending, interrupt=_after(INLINE_SEARCH_S), names=names)
        except AllocationInterruptedError:
            self.view.freeze()
            try:
                return await self.offload.run(
                    lambda stop: self._place(
                        pod,
                        allocated,
                        pending,
                        interrupt=lambda: stop.is_set() or deadline.expired(),
                        names=names,
                    )
                )
            finally:
                self.view.thaw()

    def mark(self, result: Placement) -> dict[str, AllocationResultBody]:
        """The allocations of ``result`` in their wire form, marked in flight in the view
        (the caller awaits nothing between its search and this)."""
        chosen = self.wire(result)
        self.view.begin(chosen)
        return chosen

    def wire(self, result: Placement) -> dict[str, AllocationResultBody]:
        """The allocations of ``result`` in their wire form (JSON of the models), stamped
        when a device declares binding conditions."""
        chosen = cast(dict[str, AllocationResultBody], result.results.json())
        if self._needs_timestamp(chosen):
            stamp = _now()
            for allocation in chosen.values():
                allocation["allocationTimestamp"] = stamp
        return chosen

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
        pod: PodInfo,
        allocated: Sequence[ResourceClaimBody],
        pending: Sequence[ResourceClaimBody],
        *,
        interrupt: Callable[[], bool] | None = None,
        names: Sequence[str] | None = None,
    ) -> Placement | NoPlacement:
        """The pure decision (`draco.scheduling.plan`) on the view, the sampling's start
        index moved on by what it examined."""
        choice = choose(
            pod=pod,
            cluster=self.view,
            names=self.view.static_fit(pod).names if names is None else names,
            allocated=allocated,
            pending=pending,
            inventory=self.view.inventory(),
            allocator_nodes=self.view.allocator_nodes,
            policy=self.policy,
            start=self.order.start,
            budget=SearchBudget(interrupt=interrupt),
        )
        self.order.advance(choice.examined, choice.count)
        return choice.outcome

    def candidates(
        self,
        pod: PodInfo,
        allocated: Sequence[ResourceClaimBody],
        *,
        within: frozenset[str] | None = None,
    ) -> tuple[list[str], list[str], frozenset[str]]:
        """Nodes that admit the pod and every allocated claim (best first, by the
        policy), why the others do not, and the rules that refused some node (by name);
        ``within``: only those nodes are candidates (a group's domain)."""
        fit = self.view.static_fit(pod)
        inventory = self.view.current_inventory()
        names = fit.names if within is None else [n for n in fit.names if n in within]
        found = candidates(
            pod=pod,
            cluster=self.view,
            names=names,
            reasons=fit.reasons,
            allocated=allocated,
            allocated_on_node=inventory.allocated_on_node if inventory is not None else None,
            policy=self.policy,
            start=self.order.start,
        )
        self.order.advance(found.examined, len(found.names))
        return found.names, found.reasons, found.refused_by

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


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
