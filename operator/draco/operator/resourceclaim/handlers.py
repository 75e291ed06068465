"""The claim lifecycle's reactions, as Kopf event handlers (fed by the operator's informers:
`draco.operator.feed`), bound to the lifecycle they hand changes to
(:class:`~draco.operator.resourceclaim.lifecycle.Lifecycle`), which queues what needs work;
its workers do the work.

- a pod added, changed or gone: its claims to make, record or release (upstream's
  ``enqueuePod``);
- a claim added, changed or gone: the claim, and the pods that use it (``enqueueResourceClaim``);
- a PodGroup added, changed or gone: the claims of its entries to make, or to clean up;
- a template or a DeviceClass appearing, or a ResourceQuota changing: the pods whose claim
  creation waited for it try again at once.

Only pods and claims of the namespaces served (``--namespace``) are handed over.
"""

from __future__ import annotations

from typing import Any, Final

import kopf

from draco.api.constants import (
    GROUP,
    PLURAL_DEVICE_CLASSES,
    PLURAL_POD_GROUPS,
    PLURAL_RESOURCE_CLAIM_TEMPLATES,
    PLURAL_RESOURCE_CLAIMS,
    SCHEDULING_GROUP,
    SCHEDULING_VERSION,
)
from draco.operator import feed
from draco.operator.informers import Informers
from draco.operator.options import serves_namespace
from draco.operator.resourceclaim.lifecycle import Lifecycle

__all__ = ["LifecycleHandlers"]

_ID: Final = "lifecycle"


class LifecycleHandlers:
    """The lifecycle's Kopf event handlers, on a registry of their own."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self.lifecycle = lifecycle
        self.registry = kopf.OperatorRegistry()
        on = feed.on_event(self.registry)
        on("v1", "pods", id=f"{_ID}/pod")(self.pod_changed)
        on(GROUP, PLURAL_RESOURCE_CLAIMS, id=f"{_ID}/claim")(self.claim_changed)
        on(GROUP, PLURAL_RESOURCE_CLAIM_TEMPLATES, id=f"{_ID}/template")(self.template_changed)
        on(GROUP, PLURAL_DEVICE_CLASSES, id=f"{_ID}/class")(self.class_changed)
        on(SCHEDULING_GROUP, SCHEDULING_VERSION, PLURAL_POD_GROUPS, id=f"{_ID}/group")(self.group_changed)
        on("v1", "resourcequotas", id=f"{_ID}/quota")(self.quota_changed)

    def _served(self, namespace: str | None) -> bool:
        return serves_namespace(namespace or "", self.lifecycle.namespaces)

    def pod_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if self._served(namespace):
            self.lifecycle.on_pod_event(body, deleted=type == "DELETED")

    def claim_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if self._served(namespace):
            self.lifecycle.on_claim_event(body, deleted=type == "DELETED")

    def template_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if self._served(namespace):
            self.lifecycle.on_template_event(body, deleted=type == "DELETED")

    def class_changed(self, type: str | None, body: Any, **_: Any) -> None:
        self.lifecycle.on_class_event(body, deleted=type == "DELETED")

    def group_changed(self, type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        if self._served(namespace):
            self.lifecycle.on_group_event(body, deleted=type == "DELETED")

    def quota_changed(self, body: Any, **_: Any) -> None:
        # Any change may make room: a limit raised, a deletion, usage given back.
        self.lifecycle.on_quota_event(body)

    def follow(self, informers: Informers) -> None:
        """Subscribe the handlers (the informers are listed: the operator's sync barrier).
        Templates, classes and quotas only wake pods that wait for one (none yet): their
        changes only. Claims, then pods, from what their caches hold (``type=None``) on:
        that is the same as if every object had just been added, so what a previous run
        left (claims of pods deleted while no operator ran) is reconciled, every claim is
        known before the first pod is judged, and nothing that changes meanwhile is missed
        (each watch started where its LIST ended)."""
        feed.subscribe(informers.templates, self.registry)
        feed.subscribe(informers.classes, self.registry)
        feed.subscribe(informers.quotas, self.registry)
        # PodGroups: the claims of each are made (and of those gone, cleaned up) from the start.
        feed.subscribe(informers.pod_groups, self.registry, listing=True)
        feed.subscribe(informers.claims, self.registry, listing=True)
        feed.subscribe(informers.pods, self.registry, listing=True)
