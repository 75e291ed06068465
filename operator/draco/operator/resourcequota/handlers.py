"""Device quota's reactions, as Kopf event handlers (fed by the operator's informers:
`draco.operator.feed`), bound to the service they hand changes to
(:class:`~draco.operator.resourcequota.service.QuotaService`), which puts the namespace to
count again on its queue:

- a ResourceQuota whose entries are not counted as its spec says, or whose shared
  ``requests.*`` entries show less than the claims and pods count (`QuotaService.due`);
- a claim added or removed in a namespace with a quota of device quota's entries (a
  claim's spec never changes: neither does what it counts);
- a DeviceClass whose extended resource name appeared, changed or went: it decides which
  entries its claims count (every such namespace);
- a pod gone or done in such a namespace: the shared entries count pods too, and when
  kube-controller-manager's count of a pod's going reaches this operator before the pod's
  own deletion does, the correction counted the pod still (one event more sets it right).
"""

from __future__ import annotations

from typing import Any, Final

import kopf

from draco.api.constants import GROUP, PLURAL_DEVICE_CLASSES, PLURAL_RESOURCE_CLAIMS
from draco.api.quota import pod_counts
from draco.operator import feed
from draco.operator.informers import Informers
from draco.operator.resourcequota.service import QuotaService

__all__ = ["QuotaHandlers"]

_ID: Final = "resourcequota"


class QuotaHandlers:
    """Device quota's Kopf event handlers, on a registry of their own."""

    def __init__(self, service: QuotaService) -> None:
        self.service = service
        self.registry = kopf.OperatorRegistry()
        on = feed.on_event(self.registry)
        on("v1", "resourcequotas", id=f"{_ID}/quota")(self.quota_changed)
        on(GROUP, PLURAL_RESOURCE_CLAIMS, id=f"{_ID}/claim")(self.claim_changed)
        on(GROUP, PLURAL_DEVICE_CLASSES, id=f"{_ID}/class")(self.class_changed)
        on("v1", "pods", id=f"{_ID}/pod")(self.pod_changed)

    def quota_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if type != "DELETED":
            self.service.quota_changed(body, namespace or "")

    def claim_changed(self, type: str | None, namespace: str | None, **_: Any) -> None:
        if type != "MODIFIED":  # a claim's spec never changes: what it counts neither
            self.service.claim_changed(namespace or "")

    def class_changed(self, **_: Any) -> None:
        self.service.class_changed()

    def pod_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if type == "DELETED" or not pod_counts(body or {}):
            self.service.claim_changed(namespace or "")

    def follow(self, informers: Informers) -> None:
        """Subscribe the handlers: every quota as cached now (``type=None``), then changes;
        claims', classes' and pods' changes only."""
        feed.subscribe(informers.quotas, self.registry, listing=True)
        feed.subscribe(informers.claims, self.registry)
        feed.subscribe(informers.classes, self.registry)
        feed.subscribe(informers.pods, self.registry)
