"""The autoscaling controller's reactions, as Kopf event handlers (fed by the operator's
informers: `draco.operator.feed`), bound to the demand service and the scale-down
protection they hand changes to. Each hands the change over and returns:

- a Pod changed or gone: a pod that no longer waits takes its demand pods away; the
  scale-down protection looks again (a pod bound, done or gone changes what a node holds);
- a Node added or changed: it gets its label (demand pods exclude nodes by it); the
  protection looks again;
- a ResourceClaim or ResourceSlice changed: the protection looks again.
"""

from __future__ import annotations

from typing import Any

import kopf

from draco.api.constants import GROUP, PLURAL_RESOURCE_CLAIMS, PLURAL_RESOURCE_SLICES
from draco.operator import feed
from draco.operator.autoscaling.protection import Protection
from draco.operator.autoscaling.service import DemandService
from draco.operator.informers import Informers

__all__ = ["AutoscalingHandlers"]


class AutoscalingHandlers:
    """The autoscaling controller's Kopf event handlers, on a registry of their own."""

    def __init__(self, service: DemandService, *, protection: Protection) -> None:
        self.service = service
        self.protection = protection
        self.registry = kopf.OperatorRegistry()
        on = feed.on_event(self.registry)
        on("v1", "pods", id="autoscaling/pod")(self.pod_changed)
        on("v1", "nodes", id="autoscaling/node")(self.node_changed)
        on(GROUP, PLURAL_RESOURCE_CLAIMS, id="autoscaling/claim")(self.claim_changed)
        on(GROUP, PLURAL_RESOURCE_SLICES, id="autoscaling/slice")(self.slice_changed)

    def pod_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.service.on_pod(body, deleted=type == "DELETED")
        if type is not None:
            self.protection.poke()

    def node_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.service.on_node(body, deleted=type == "DELETED")
        self.protection.poke()

    def claim_changed(self, **_: Any) -> None:
        self.protection.poke()

    def slice_changed(self, **_: Any) -> None:
        self.protection.poke()

    def follow(self, informers: Informers) -> None:
        """Subscribe the handlers; the nodes as the cache holds them first (every node gets
        its label), then every change."""
        feed.subscribe(informers.nodes, self.registry, listing=True)
        feed.subscribe(informers.pods, self.registry)
        feed.subscribe(informers.claims, self.registry)
        feed.subscribe(informers.slices, self.registry)
