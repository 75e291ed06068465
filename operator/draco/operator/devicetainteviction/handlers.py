"""Device taint eviction's reactions, as Kopf event handlers (fed by the operator's
informers: `draco.operator.feed`), bound to the service they hand changes to
(:class:`~draco.operator.devicetainteviction.service.EvictionService`), which works out
which pods must go and when, and puts them on its queue at their eviction time.

- a ResourceSlice: its devices' taints (and the simulations of `None`-effect rules);
- a DeviceTaintRule: the devices it taints, and its status;
- a claim: the devices its allocation holds, for the pods reserved in it;
- a pod: its tolerations, and whether it is still there to evict.

Only claims and pods of the namespaces served (``--namespace``) are handed over.
"""

from __future__ import annotations

from typing import Any, Final

import kopf

from draco.api.bodies import meta_of
from draco.api.constants import (
    GROUP,
    PLURAL_DEVICE_TAINT_RULES,
    PLURAL_RESOURCE_CLAIMS,
    PLURAL_RESOURCE_SLICES,
)
from draco.operator import feed
from draco.operator.devicetainteviction.service import EvictionService
from draco.operator.informers import Informers
from draco.operator.options import serves_namespace

__all__ = ["EvictionHandlers"]

_ID: Final = "device-taint-eviction"


class EvictionHandlers:
    """Device taint eviction's Kopf event handlers, on a registry of their own;
    ``namespaces``: the ``--namespace`` patterns served (empty: all)."""

    def __init__(self, service: EvictionService, *, namespaces: tuple[str, ...]) -> None:
        self.service = service
        self.namespaces = namespaces
        self.registry = kopf.OperatorRegistry()
        on = feed.on_event(self.registry)
        on(GROUP, PLURAL_RESOURCE_SLICES, id=f"{_ID}/slice")(self.slice_changed)
        on(GROUP, PLURAL_DEVICE_TAINT_RULES, id=f"{_ID}/rule")(self.rule_changed)
        on(GROUP, PLURAL_RESOURCE_CLAIMS, id=f"{_ID}/claim")(self.claim_changed)
        on("v1", "pods", id=f"{_ID}/pod")(self.pod_changed)

    def _served(self, namespace: str | None) -> bool:
        return serves_namespace(namespace or "", self.namespaces)

    def slice_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.service.on_slice(body, deleted=type == "DELETED")

    def rule_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.service.on_rule(body, deleted=type == "DELETED")

    def claim_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if self._served(namespace):
            self.service.on_claim(body, deleted=type == "DELETED")

    def pod_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if self._served(namespace):
            self.service.on_pod(body, deleted=type == "DELETED")

    def follow(self, informers: Informers) -> None:
        """Fill the service from the caches, then subscribe the handlers to every change
        (nothing awaited in between): everything is known before a worker runs, so a pool
        seen in part never looks tainted."""
        self.service.prime(
            slices=list(informers.slices.values()),
            rules=list(informers.taint_rules.values()),
            claims=[c for c in informers.claims.values() if self._served(meta_of(c).get("namespace"))],
            pods=[p for p in informers.pods.values() if self._served(meta_of(p).get("namespace"))],
        )
        for informer in (informers.slices, informers.taint_rules, informers.claims, informers.pods):
            feed.subscribe(informer, self.registry)
