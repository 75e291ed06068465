"""The claim lifecycle's reactions, as Kopf event handlers (fed by the operator's informers:
`draco.operator.feed`). Each hands the change to the lifecycle (`memo.lifecycle`,
:class:`~draco.operator.resourceclaim.lifecycle.Lifecycle`), which queues what needs work;
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

__all__ = ["HANDLERS", "follow"]

#: The lifecycle's handlers (`LifecycleController.start` subscribes them to the informers).
HANDLERS: Final = kopf.OperatorRegistry()


def _lifecycle(memo: kopf.Memo) -> Lifecycle:
    lifecycle: Lifecycle = memo.lifecycle
    return lifecycle


def _served(lifecycle: Lifecycle, namespace: str | None) -> bool:
    return serves_namespace(namespace or "", lifecycle.namespaces)


@kopf.on.event("v1", "pods", id="lifecycle/pod", registry=HANDLERS)
def pod_changed(type: str | None, body: Any, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    lifecycle = _lifecycle(memo)
    if _served(lifecycle, namespace):
        lifecycle.on_pod_event(body, deleted=type == "DELETED")


@kopf.on.event(GROUP, PLURAL_RESOURCE_CLAIMS, id="lifecycle/claim", registry=HANDLERS)
def claim_changed(type: str | None, body: Any, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    lifecycle = _lifecycle(memo)
    if _served(lifecycle, namespace):
        lifecycle.on_claim_event(body, deleted=type == "DELETED")


@kopf.on.event(GROUP, PLURAL_RESOURCE_CLAIM_TEMPLATES, id="lifecycle/template", registry=HANDLERS)
def template_changed(type: str | None, body: Any, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    lifecycle = _lifecycle(memo)
    if _served(lifecycle, namespace):
        lifecycle.on_template_event(body, deleted=type == "DELETED")


@kopf.on.event(GROUP, PLURAL_DEVICE_CLASSES, id="lifecycle/class", registry=HANDLERS)
def class_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    _lifecycle(memo).on_class_event(body, deleted=type == "DELETED")


@kopf.on.event(
    SCHEDULING_GROUP, SCHEDULING_VERSION, PLURAL_POD_GROUPS, id="lifecycle/group", registry=HANDLERS
)
def group_changed(type: str | None, body: Any, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    lifecycle = _lifecycle(memo)
    if _served(lifecycle, namespace):
        lifecycle.on_group_event(body, deleted=type == "DELETED")


@kopf.on.event("v1", "resourcequotas", id="lifecycle/quota", registry=HANDLERS)
def quota_changed(body: Any, memo: kopf.Memo, **_: Any) -> None:
    # Any change may make room: a limit raised, a deletion, usage given back.
    _lifecycle(memo).on_quota_event(body)


def follow(informers: Informers, memo: kopf.Memo) -> None:
    """Subscribe the handlers (the informers are listed: the operator's sync barrier).
    Templates, classes and quotas only wake pods that wait for one (none yet): their
    changes only. Claims, then pods, from what their caches hold (``type=None``) on: that
    is the same as if every object had just been added, so what a previous run left
    (claims of pods deleted while no operator ran) is reconciled, every claim is known
    before the first pod is judged, and nothing that changes meanwhile is missed (each
    watch started where its LIST ended)."""
    feed.subscribe(informers.templates, HANDLERS, memo=memo)
    feed.subscribe(informers.classes, HANDLERS, memo=memo)
    feed.subscribe(informers.quotas, HANDLERS, memo=memo)
    # PodGroups: the claims of each are made (and of those gone, cleaned up) from the start.
    feed.subscribe(informers.pod_groups, HANDLERS, memo=memo, listing=True)
    feed.subscribe(informers.claims, HANDLERS, memo=memo, listing=True)
    feed.subscribe(informers.pods, HANDLERS, memo=memo, listing=True)
