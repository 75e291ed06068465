"""Which waiting pods a change of capacity may help, and how long a failed pod backs off.

Upstream's scheduler does not retry every unschedulable pod on every cluster event: each
plugin that rejected a pod answers, per event, whether the event may make the pod
schedulable (its queueing hints), and a pod the event may help is tried again no earlier
than its backoff allows (1 s after the first failed attempt, doubling up to 10 s). This is
the same split, pure: a :class:`CapacityChange` says what changed (devices freed in some
pools, slices of some pools changed, a class changed, node resources freed), an
:class:`Interest` says what a waiting pod could use (the pools and drivers of the devices
its requests match, its classes, whether a node's resources or labels stood in its way),
and :meth:`Interest.helped_by` decides. Where the pod's side cannot be told (its first
attempt has not finished, it timed out) the interest is ``UNKNOWN``: every change helps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from draco.allocator.inventory import Inventory
from draco.errors import AllocationInputError

__all__ = [
    "BACKOFF_INITIAL_S",
    "BACKOFF_MAX_S",
    "CLAIMS_ONLY",
    "EVERYTHING",
    "UNKNOWN",
    "CapacityChange",
    "Interest",
    "backoff_s",
    "interest_of",
]

#: Upstream's podInitialBackoffSeconds and podMaxBackoffSeconds.
BACKOFF_INITIAL_S: Final = 1.0
BACKOFF_MAX_S: Final = 10.0

Pool = tuple[str, str]


def backoff_s(failures: int) -> float:
    """How long a pod waits after its ``failures``-th failed attempt in a row (0: none)."""
    if failures <= 0:
        return 0.0
    return float(min(BACKOFF_INITIAL_S * 2.0 ** min(failures - 1, 32), BACKOFF_MAX_S))


@dataclass(frozen=True)
class CapacityChange:
    """What changed that might let a waiting pod fit (several merge with ``|``)."""

    #: Pools (driver, pool) where a claim's devices were freed.
    freed: frozenset[Pool] = frozenset()
    #: Pools whose slices were added, changed or deleted.
    slices: frozenset[Pool] = frozenset()
    #: DeviceClasses added, changed or deleted.
    classes: frozenset[str] = frozenset()
    #: A pod left a node (or a promise was withdrawn): cpu, memory, pods freed there.
    node_resources: bool = False
    #: A pod was placed on, moved from or left a node (or a namespace's labels changed):
    #: the inter-pod rules (affinity, anti-affinity, spread, host ports) may answer anew.
    pods: bool = False
    #: A PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode or CSIDriver changed.
    volumes: bool = False
    #: Anything else (nodes, device taint rules): every waiting pod may fit now.
    everything: bool = False

    def __or__(self, other: CapacityChange) -> CapacityChange:
        return CapacityChange(
            freed=self.freed | other.freed,
            slices=self.slices | other.slices,
            classes=self.classes | other.classes,
            node_resources=self.node_resources or other.node_resources,
            pods=self.pods or other.pods,
            volumes=self.volumes or other.volumes,
            everything=self.everything or other.everything,
        )

    @property
    def empty(self) -> bool:
        return not (
            self.freed
            or self.slices
            or self.classes
            or self.node_resources
            or self.pods
            or self.volumes
            or self.everything
        )


EVERYTHING: Final = CapacityChange(everything=True)


@dataclass(frozen=True)
class Interest:
    """What a waiting pod could use, as far as its last attempt could tell."""

    #: Pools (driver, pool) holding devices that its pending requests match.
    pools: frozenset[Pool] = frozenset()
    #: The drivers of those devices (a new or changed slice of one of them may help).
    drivers: frozenset[str] = frozenset()
    #: The DeviceClasses its pending requests name.
    classes: frozenset[str] = frozenset()
    #: A request matched no device at all: any slice change may bring one.
    unmatched: bool = False
    #: A node's resources, labels or taints stood in its way.
    node_resources: bool = False
    #: Other pods stood in its way (inter-pod affinity, anti-affinity, spread, host ports).
    pods: bool = False
    #: Its volumes stood in its way.
    volumes: bool = False
    #: Nothing could be told: every change may help.
    unknown: bool = False

    def helped_by(self, change: CapacityChange) -> bool:
        if self.unknown or change.everything:
            return True
        if change.node_resources and self.node_resources:
            return True
        if change.pods and self.pods:
            return True
        if change.volumes and self.volumes:
            return True
        if change.classes & self.classes:
            return True
        if change.freed & self.pools:
            return True
        if change.slices:
            return self.unmatched or any(driver in self.drivers for driver, _ in change.slices)
        return False


#: A pod whose last attempt could not tell what it waits for.
UNKNOWN: Final = Interest(unknown=True)
#: A pod that waits for its own claims only (created, allocated, bound, no longer deleted).
CLAIMS_ONLY: Final = Interest()


def interest_of(
    inventory: Inventory,
    pending: Iterable[Mapping[str, Any]],
    *,
    node_resources: bool,
    pods: bool = False,
    volumes: bool = False,
) -> Interest:
    """The interest of a pod whose ``pending`` claims did not fit on ``inventory``.

    The devices each request alternative matches come from the inventory's selection
    indexes (the search just built them, so this evaluates nothing new); a selector that
    does not compile matches nothing (a class change may fix it)."""
    pools: set[Pool] = set()
    classes: set[str] = set()
    unmatched = False
    for claim in pending:
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly")
            alternatives = [exactly] if exactly is not None else list(request.get("firstAvailable") or [])
            for alternative in alternatives:
                name = str((alternative or {}).get("deviceClassName") or "")
                classes.add(name)
                device_class = inventory.classes.get(name)
                if device_class is None:
                    unmatched = True
                    continue
                try:
                    index = inventory.selection(
                        _expressions(device_class.get("spec")), _expressions(alternative)
                    )
                except AllocationInputError:
                    unmatched = True
                    continue
                found = False
                for indexes in (*index.local.values(), index.shared):
                    for i in indexes:
                        device = inventory.devices[i]
                        pools.add((device.driver, device.pool))
                        found = True
                unmatched = unmatched or not found
    return Interest(
        pools=frozenset(pools),
        drivers=frozenset(driver for driver, _ in pools),
        classes=frozenset(classes),
        unmatched=unmatched,
        node_resources=node_resources,
        pods=pods,
        volumes=volumes,
    )


def _expressions(holder: Mapping[str, Any] | None) -> list[str]:
    """The CEL expressions of a class's or request's selectors, as the allocator keys its
    selection indexes (so the lookup finds the index the search built)."""
    return [
        (s.get("cel") or {}).get("expression", "")
        for s in (holder or {}).get("selectors") or []
        if s.get("cel")
    ]
