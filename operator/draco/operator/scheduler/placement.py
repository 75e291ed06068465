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
from draco.allocator.place import device_prefilter, selector_chains
from draco.api.bodies import AllocationResultBody, NodeSelectorBody, ResourceClaimBody
from draco.errors import AllocationInterruptedError
from draco.runtime.offload import Deadline, Offloader
from draco.scheduling.nodefit import PodNeeds
from draco.scheduling.nodeorder import NodeOrder, PlacementPolicy, Sample, sample_and_score
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.prioritizedlist import WEIGHT as PRIORITIZED_WEIGHT
from draco.scheduling.prioritizedlist import has_prioritized_lists, normalized, prioritized_list_score
from draco.scheduling.profile import prepare
from draco.scheduling.view import ClusterView

__all__ = ["INLINE_SEARCH_S", "PRIORITIZED_CANDIDATES", "RESOURCES_RULE", "Placer"]

#: How long a search may run on the event loop before it starts over in a thread.
INLINE_SEARCH_S: Final = 0.02
#: For a pod with a prioritized list, on how many sampled nodes that fit its claims the
#: prioritized-list score is compared (the search runs once per node compared).
PRIORITIZED_CANDIDATES: Final = 16
#: The rule name under which the resource fit refuses a node.
RESOURCES_RULE: Final = "NodeResourcesFit"


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
        needs: PodNeeds,
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
                    result = self._place(needs, pod, allocated, pending, interrupt=_after(INLINE_SEARCH_S))
                except AllocationInterruptedError:
                    self.view.freeze()
                    try:
                        result = await self.offload.run(
                            lambda stop: self._place(
                                needs,
                                pod,
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
        pod: PodInfo,
        allocated: Sequence[ResourceClaimBody],
        pending: Sequence[ResourceClaimBody],
        *,
        interrupt: Callable[[], bool] | None = None,
    ) -> Placement | NoPlacement:
        """Allocate ``pending`` on the node kube-scheduler would prefer among those that
        admit the pod (`draco.scheduling.nodeorder`): the label, affinity and taint
        checks cached per kind of pod, then kube-scheduler's other filters
        (`draco.scheduling.framework`), asked of each node as the search reaches it."""
        names = self._admitted_by_shape(needs, allocated)
        if not names:
            return NoPlacement(explanation="", per_node={})
        prepared = prepare(pod, needs, self.view)
        if prepared.refusal is not None:
            return NoPlacement(explanation="", per_node={})
        inventory = self.view.inventory()
        budget = SearchBudget(interrupt=interrupt)
        nodes = self.view.nodes

        def admits(name: str) -> bool:
            return prepared.unfit(nodes[name]) is None

        if self.policy == "first":
            return place(
                inventory=inventory,
                nodes=self.view.allocator_nodes(names),
                claims=pending,
                policy="first",
                budget=budget,
                admits=lambda node: admits(node.name),
            )
        devices = device_prefilter(inventory, pending)
        sample = sample_and_score(
            pod=pod,
            needs=needs,
            cluster=self.view,
            names=names,
            start=self.order.start,
            all_nodes=len(nodes),
            feasible=lambda name: devices.may_fit(name) and admits(name),
            policy=self.policy,
            allocated_on_node=inventory.allocated_on_node,
        )
        self.order.advance(sample.examined, len(names))
        if has_prioritized_lists(pending) and len(sample.scored) > 1:
            best = self._best_prioritized(inventory, pending, sample, budget)
            if best is not None:
                return best
        return place(
            inventory=inventory,
            nodes=self.view.allocator_nodes([*sample.scored, *sample.rest]),
            claims=pending,
            policy="given",
            budget=budget,
            admits=lambda node: node.name in sample.scores or admits(node.name),
        )

    def _best_prioritized(
        self, inventory: Inventory, pending: Sequence[ResourceClaimBody], sample: Sample, budget: SearchBudget
    ) -> Placement | None:
        """The DynamicResources score: among the sampled nodes (the best-scored first, at
        most PRIORITIZED_CANDIDATES where the claims fit), the one whose total score with
        the prioritized-list score added is highest. None when no sampled node fits."""
        fits: list[Placement] = []
        for name in sample.scored:
            result = place(
                inventory=inventory,
                nodes=self.view.allocator_nodes([name]),
                claims=pending,
                policy="given",
                budget=budget,
            )
            if isinstance(result, Placement):
                fits.append(result)
                if len(fits) >= PRIORITIZED_CANDIDATES:
                    break
        if not fits:
            return None
        raw = [prioritized_list_score(pending, cast(Mapping[str, Any], fit.results.json())) for fit in fits]
        bonus = normalized(raw)
        totals = [
            sample.scores[fit.node] + PRIORITIZED_WEIGHT * extra
            for fit, extra in zip(fits, bonus, strict=True)
        ]
        best = max(range(len(fits)), key=lambda i: (totals[i], -i))
        return fits[best]

    def _admitted_by_shape(self, needs: PodNeeds, allocated: Sequence[ResourceClaimBody]) -> list[str]:
        """Nodes (by name) whose labels and taints admit pods like ``needs`` and that match
        the node selector of every claim already allocated."""
        selectors = _allocated_selectors(allocated)
        names = self.view.static_fit(needs).names
        if selectors:
            names = [n for n in names if self._matches_all(n, selectors)]
        return names

    def _matches_all(self, name: str, selectors: Sequence[Mapping[str, Any]]) -> bool:
        labels = self.view.nodes[name].labels
        return all(node_selector_matches(s, name=name, labels=labels) for s in selectors)

    def candidates(
        self, needs: PodNeeds, pod: PodInfo, allocated: Sequence[ResourceClaimBody]
    ) -> tuple[list[str], list[str], frozenset[str]]:
        """Nodes that admit the pod and every allocated claim (best first, by the
        policy), why the others do not, and the rules that refused some node (by name)."""
        selectors = _allocated_selectors(allocated)
        fit = self.view.static_fit(needs)
        prepared = prepare(pod, needs, self.view)
        candidates: list[str] = []
        reasons = list(fit.reasons)
        refused_by: set[str] = set()
        nodes = self.view.nodes
        for name in fit.names:
            info = nodes[name]
            reason = None
            if selectors and not self._matches_all(name, selectors):
                reason = "node(s) didn't match the node selector of an allocated claim"
            else:
                refused = prepared.unfit_rule(info)
                if refused is not None:
                    refused_by.add(refused[0])
                    reason = refused[1]
            if reason is None:
                candidates.append(name)
            else:
                reasons.append(reason)
        if self.policy != "first" and len(candidates) > 1:
            inventory = self.view.current_inventory()
            sample = sample_and_score(
                pod=pod,
                needs=needs,
                cluster=self.view,
                names=candidates,
                start=self.order.start,
                all_nodes=len(nodes),
                feasible=lambda _: True,
                policy=self.policy,
                allocated_on_node=inventory.allocated_on_node if inventory is not None else None,
            )
            self.order.advance(sample.examined, len(candidates))
            candidates = [*sample.scored, *sample.rest]
        return candidates, reasons, frozenset(refused_by)

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
