"""The allocation's decisions on the view: the pure plan (`draco.scheduling.podplan`, which
`draco simulate` runs too), run where it does not hold up the event loop, and held.

The selectors of the pod's claims are evaluated first, off the loop (the
:class:`Offloader`'s threads, cached per inventory) and outside the decision lock; then,
under the lock (one decision at a time), the plan is made on the loop for a short while
(:data:`INLINE_SEARCH_S`; an interrupt never changes an answer, it only discards the
attempt), and a plan that needs longer is made again in a thread while the view is frozen;
the plan is held in the view right after (`executor.Holds`), with no ``await`` between, so
two pods never take the same device. The node-only checks of nodes are cached per kind of
pod by the view.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from draco.allocator import SearchBudget
from draco.allocator.inventory import Inventory
from draco.allocator.place import selector_chains
from draco.api.bodies import ResourceClaimBody, key_of
from draco.errors import AllocationInputError, AllocationInterruptedError, AllocationTimeoutError
from draco.operator.scheduler.executor import Holds
from draco.runtime.offload import Deadline, Offloader
from draco.scheduling.nodefit import EVENT_MESSAGE_LIMIT
from draco.scheduling.nodeorder import NodeOrder, PlacementPolicy
from draco.scheduling.nominations import Nominations
from draco.scheduling.podplan import PodPlan, PodRequest, Unplaced, plan_pod
from draco.scheduling.preemption import (
    DisruptionBudget,
    HeldClaim,
    NoPreemption,
    Preemption,
    preempt,
    preempt_group,
)
from draco.scheduling.view import ClusterView

__all__ = ["INLINE_SEARCH_S", "Placer"]

#: How long a search may run on the event loop before it starts over in a thread.
INLINE_SEARCH_S: Final = 0.02


@dataclass
class Placer:
    """The decisions of one allocation service (see the module docstring)."""

    view: ClusterView
    holds: Holds
    offload: Offloader
    policy: PlacementPolicy = "scheduler"
    #: The nodes nominated for pods that preempted (kept from pods of lower priority).
    nominations: Nominations = field(default_factory=Nominations)
    #: kube-scheduler's ``nextStartNodeIndex``: where the next pod's sampling starts.
    order: NodeOrder = field(default_factory=NodeOrder)
    #: One decision (search + hold) at a time.
    _decision: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Selector chains known to be evaluated on every device of the inventory it names.
    _warmed: tuple[Inventory | None, set[tuple[str, ...]]] = field(default_factory=lambda: (None, set()))

    async def decide(self, request: PodRequest, deadline: Deadline) -> PodPlan | Unplaced | None:
        """The plan for ``request``, held; or why not. None: one of its claims went in
        flight for another pod meanwhile. Raises ``AllocationInterruptedError`` when
        ``deadline`` runs out (what was evaluated stays cached for the next attempt)."""
        pending = request.pending
        if not pending:
            # Nothing to search: the claims are allocated, the node only has to admit the pod.
            inventory = self.view.current_inventory() or await self.inventory()
            decided = self._plan(request, inventory)
            if isinstance(decided, PodPlan):
                self.holds.take(decided)
            return decided
        keys = [key_of(claim) for claim in request.claims]
        while True:
            try:
                inventory = await self.warm([pending], deadline)
            except AllocationInterruptedError:
                raise  # out of wall-clock time: the attempt says so (not "does not fit")
            except (AllocationInputError, AllocationTimeoutError) as exc:
                return Unplaced(request.key, str(exc))
            async with self._decision:
                if self.view.current_inventory() is not inventory:
                    continue  # slices or classes changed meanwhile: evaluate the new devices
                in_flight = self.view.in_flight()
                if any(key in in_flight for key in keys):
                    return None
                decided = await self.search(request, deadline)
                if isinstance(decided, PodPlan):
                    # No await since the search: the devices are taken before anyone else looks.
                    self.holds.take(decided)
                return decided

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
        """The decision lock: one decision (search and hold) at a time."""
        return self._decision

    async def search(
        self,
        request: PodRequest,
        deadline: Deadline,
        *,
        within: frozenset[str] | None = None,
        limit: int = EVENT_MESSAGE_LIMIT,
    ) -> PodPlan | Unplaced:
        """The plan, under the decision lock (the caller holds it): on the loop first,
        stopped (never answered differently) after INLINE_SEARCH_S; a plan that needs
        longer is made again in a thread on the frozen view. ``within``: the nodes to
        consider (a group's domain)."""
        if deadline.expired():
            raise AllocationInterruptedError("the wall-clock budget ran out before the search")
        inventory = self.view.inventory()
        try:
            try:
                return self._plan(
                    request, inventory, interrupt=_after(INLINE_SEARCH_S), within=within, limit=limit
                )
            except AllocationInterruptedError:
                self.view.freeze()
                try:
                    return await self.offload.run(
                        lambda stop: self._plan(
                            request,
                            inventory,
                            interrupt=lambda: stop.is_set() or deadline.expired(),
                            within=within,
                            limit=limit,
                        )
                    )
                finally:
                    self.view.thaw()
        except AllocationInterruptedError:
            raise  # out of wall-clock time: the attempt says so (not "does not fit")
        except (AllocationInputError, AllocationTimeoutError) as exc:
            return Unplaced(request.key, str(exc))  # the claims cannot be allocated as written

    def _plan(
        self,
        request: PodRequest,
        inventory: Inventory,
        *,
        interrupt: Callable[[], bool] | None = None,
        within: frozenset[str] | None = None,
        limit: int = EVENT_MESSAGE_LIMIT,
    ) -> PodPlan | Unplaced:
        """The pure plan on the view, the sampling's start moved on by what it examined."""
        fit = self.view.static_fit(request.info)
        kept = self.nominations.kept_from(request.info)
        decided, self.order.start = plan_pod(
            request,
            cluster=self.view,
            names=[n for n in fit.names if n not in kept] if kept else fit.names,
            reasons=fit.reasons,
            inventory=inventory,
            allocator_nodes=self.view.allocator_nodes,
            policy=self.policy,
            start=self.order.start,
            budget=SearchBudget(interrupt=interrupt),
            within=within,
            limit=limit,
        )
        return decided

    def may_preempt(self, request: PodRequest) -> bool:
        """Whether a node the pod may go to holds a pod of lower priority (else preemption
        has nobody to evict, and its inputs are not read)."""
        priority = request.info.priority
        return any(
            pod.priority < priority
            for name in self.view.static_fit(request.info).names
            for pod in self.view.pods_on(name)
        )

    async def preempt(
        self, request: PodRequest, budgets: Sequence[DisruptionBudget]
    ) -> Preemption | NoPreemption:
        """Preemption for a pod that fits nowhere (`draco.scheduling.preemption`), under the
        decision lock, on the view as it stands (nothing is held: the executor evicts, and
        the pod is planned again once its victims' devices are free)."""
        async with self._decision:
            return preempt(
                request,
                cluster=self.view,
                names=self._preemptible_nodes(request),
                inventory=self.view.inventory(),
                claims=self._held_claims(),
                allocator_nodes=self.view.allocator_nodes,
                budgets=budgets,
            )

    async def preempt_group(
        self, requests: Sequence[PodRequest], budgets: Sequence[DisruptionBudget]
    ) -> tuple[Preemption, ...] | NoPreemption:
        """A group's preemption (`preemption.preempt_group`), as :meth:`preempt`."""
        async with self._decision:
            return preempt_group(
                requests,
                cluster=self.view,
                names=self._preemptible_nodes,
                inventory=self.view.inventory(),
                claims=self._held_claims(),
                allocator_nodes=self.view.allocator_nodes,
                budgets=budgets,
            )

    def _held_claims(self) -> list[HeldClaim]:
        """Every allocated claim with its consumers (none in flight: those are no victim's)."""
        in_flight = self.view.in_flight()
        return [
            HeldClaim(key, record.as_claim(), frozenset(record.reserved_for))
            for key, record in self.view.claims.items()
            if record.allocation and key not in in_flight
        ]

    def _preemptible_nodes(self, request: PodRequest) -> list[str]:
        kept = self.nominations.kept_from(request.info)
        return [n for n in self.view.static_fit(request.info).names if n not in kept]

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


def _after(seconds: float) -> Callable[[], bool]:
    """An interrupt that fires once ``seconds`` have passed."""
    until = time.monotonic() + seconds
    return lambda: time.monotonic() > until
