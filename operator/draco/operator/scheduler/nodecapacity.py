"""Extended resources backed by DeviceClasses, advertised on the Nodes as device plugins do.

A pod that asks for ``example.com/gpu: 2`` is pinned by draco to the node whose devices it
got, and then placed by the stock kube-scheduler, whose NodeResourcesFit rejects a node
that does not list ``example.com/gpu`` in ``status.allocatable``. So for every resource name
a DeviceClass maps (its ``extendedResourceName`` and the implicit
``deviceclass.resource.draco.dev/<class>`` and ``deviceclass.resource.kubernetes.io/<class>``),
the operator writes into each Node's
``status.capacity`` and ``status.allocatable`` the number of devices that class selects
and that reach the node (node-local devices, plus devices of slices for all nodes or for a
node selector that matches it). Names no longer mapped, or with no device left on the node,
are removed again. The kubelet keeps extended resources it does not manage (that is how
"advertise extended resources for a node" works), and on a cluster with native DRA a
non-zero allocatable makes kube-scheduler treat the name as a device-plugin resource, so it
never builds a native special claim for it.

The count is the class's devices, allocated or not (a capacity, like a device plugin's):
kube-scheduler subtracts the requests of the pods on the node, draco decides which devices.

It runs when the inventory or the node set changes (coalesced), off any pod's path and off
the event loop: the class selectors are evaluated into the shared selector cache in the CEL
worker process (a slow selector costs that process time, never the loop's), and the count
itself (cache lookups per device and class) runs in the offloader's thread pool. A device
on which a class selector raises a runtime error is not counted: that class cannot
allocate it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from draco.allocator.inventory import Inventory
from draco.allocator.nodeselect import node_selector_matches
from draco.api.bodies import meta_of
from draco.api.constants import IMPLICIT_EXTENDED_RESOURCE_PREFIXES
from draco.api.corebodies import NodeBody
from draco.errors import CELError
from draco.kube.client import NODES, Kube, NotFoundError
from draco.logs import get_logger
from draco.runtime.offload import Offloader, shared_offloader
from draco.scheduling.extendedresources import resource_class_map
from draco.scheduling.view import ClusterView

__all__ = ["NodeCapacity", "desired_capacity", "mapped_chains"]

log = get_logger(__name__)

#: Changes closer together than this are advertised once.
COALESCE_S: Final = 0.5
#: Node status writes in flight at once.
WRITES_IN_FLIGHT: Final = 16


def _class_selectors(device_class: Mapping[str, Any]) -> list[str]:
    return [
        str((s.get("cel") or {}).get("expression", ""))
        for s in (device_class.get("spec") or {}).get("selectors") or []
        if (s.get("cel") or {}).get("expression")
    ]


def mapped_chains(classes: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """The selector chain of every class some extended resource name maps to."""
    mapped = sorted(set(resource_class_map(classes.values()).values()))
    return [_class_selectors(classes[name]) for name in mapped]


def desired_capacity(
    inventory: Inventory, classes: Mapping[str, Mapping[str, Any]], nodes: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, int]]:
    """Node → {resource name: device count} for every mapped name with devices there.

    Pure; evaluates through ``inventory.cache``, so after the chains were warmed it only
    looks answers up. A class whose selectors do not compile is left out (the DeviceClass
    status controller reports it).
    """
    wanted: dict[str, dict[str, int]] = {name: {} for name in nodes}
    counts: dict[str, dict[str, int] | None] = {}
    for resource, class_name in sorted(resource_class_map(classes.values()).items()):
        if class_name not in counts:
            counts[class_name] = _count_per_node(inventory, _class_selectors(classes[class_name]), nodes)
        per_node = counts[class_name]
        if per_node is None:
            continue
        for node, count in per_node.items():
            if count:
                wanted[node][resource] = count
    return wanted


def _count_per_node(
    inventory: Inventory, chain: list[str], nodes: Mapping[str, Mapping[str, str]]
) -> dict[str, int] | None:
    try:
        evaluators = [inventory.cache.evaluator(expression) for expression in chain]
    except CELError:
        return None
    local: dict[str, int] = {}
    shared = []
    for device in inventory.devices:
        # In chain order, stopping at the first rejection (as the warm-up evaluates them).
        if not all(evaluate(device) is True for evaluate in evaluators):
            continue
        if device.node_name is not None:
            local[device.node_name] = local.get(device.node_name, 0) + 1
        else:
            shared.append(device)
    return {
        node: local.get(node, 0)
        + sum(
            1
            for d in shared
            if d.all_nodes or node_selector_matches(d.node_selector, name=node, labels=labels)
        )
        for node, labels in nodes.items()
    }


@dataclass
class NodeCapacity:
    """See the module docstring; ``poke()`` on every change, ``run()`` as a task."""

    kube: Kube
    view: ClusterView
    #: Builds (or returns) the current inventory; the allocation service's, so a rebuild
    #: happens off the event loop and under its decision lock.
    inventory: Any
    #: Where the selectors are evaluated and the devices counted (never on the loop).
    offload: Offloader = field(default_factory=shared_offloader)
    #: What this process last wrote per node (None until the node was read once).
    advertised: dict[str, dict[str, int]] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _seen: tuple[object, ...] | None = None

    def poke(self) -> None:
        self._changed.set()

    def observe_node(self, node: NodeBody) -> None:
        """A Node as the watch shows it: when what it lists differs from what this process
        wrote (a kubelet that re-registered zeroes extended resources it does not manage),
        advertise again."""
        name = meta_of(node).get("name", "")
        wrote = self.advertised.get(name)
        if wrote is None:
            return  # not read yet: the first sync reads every node
        capacity = (node.get("status") or {}).get("capacity") or {}
        actual: dict[str, int] = {}
        for resource, value in capacity.items():
            if resource in wrote or resource.startswith(IMPLICIT_EXTENDED_RESOURCE_PREFIXES):
                with contextlib.suppress(ValueError):
                    actual[resource] = int(str(value))
        if actual != wrote:
            self.advertised[name] = actual
            self._seen = None
            self.poke()

    async def run(self) -> None:
        self.poke()
        while True:
            await self._changed.wait()
            await asyncio.sleep(COALESCE_S)
            self._changed.clear()
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # retried on the next change; the next sync diffs again
                log.warning("Could not advertise extended resources", error=str(exc))
                self._seen = None

    async def sync(self) -> None:
        inventory: Inventory = await self.inventory()
        nodes = {name: dict(info.labels) for name, info in self.view.nodes.items()}
        seen = (inventory, tuple(sorted((n, tuple(sorted(labels.items()))) for n, labels in nodes.items())))
        if seen == self._seen:
            return
        if not self.advertised:
            await self._read_nodes()
        classes = dict(self.view.classes)
        # The answers go into the shared cache, so allocation and the class status find them.
        await self.offload.warm(inventory.cache, mapped_chains(classes), inventory.devices)
        wanted = await self.offload.run(lambda _stop: desired_capacity(inventory, classes, nodes))
        # A few writes in flight, not one: at start every Node gets one, and 5,000 Nodes
        # one after the other took minutes on a busy API server.
        in_flight = asyncio.Semaphore(WRITES_IN_FLIGHT)

        async def advertise(node: str, resources: dict[str, int]) -> None:
            async with in_flight:
                await self._advertise(node, resources)

        outcomes = await asyncio.gather(
            *(advertise(n, r) for n, r in wanted.items() if self.advertised.get(n, {}) != r),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome  # the others are done; run() retries on the next change
        for node in set(self.advertised) - set(nodes):
            del self.advertised[node]
        self._seen = seen

    async def _advertise(self, node: str, resources: dict[str, int]) -> None:
        before = self.advertised.get(node, {})
        stale = {r for r in before if r not in resources}
        values: dict[str, str | None] = {r: str(c) for r, c in resources.items()}
        values.update({r: None for r in stale})
        try:
            await self.kube.patch(
                NODES, node, {"status": {"capacity": values, "allocatable": values}}, subresource="status"
            )
        except NotFoundError:
            return
        self.advertised[node] = dict(resources)
        log.info("Advertised extended resources", node=node, resources=resources, removed=sorted(stale))

    async def _read_nodes(self) -> None:
        """Learn what earlier runs advertised: implicit names, and explicit names some class
        maps today (a name of a class deleted while the operator was down stays)."""
        mapped = set(resource_class_map(self.view.classes.values()))
        with contextlib.suppress(Exception):
            for node in await self.kube.list(NODES):
                capacity = (node.get("status") or {}).get("capacity") or {}
                ours = {}
                for resource, value in capacity.items():
                    if resource.startswith(IMPLICIT_EXTENDED_RESOURCE_PREFIXES) or resource in mapped:
                        with contextlib.suppress(ValueError):
                            ours[resource] = int(str(value))
                self.advertised[node["metadata"]["name"]] = ours
