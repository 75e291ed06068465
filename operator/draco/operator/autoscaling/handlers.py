"""The autoscaling controller's reactions, as Kopf event handlers (fed by the operator's
informers: `draco.operator.feed`). Each hands the change over and returns:

- a Pod changed or gone: a pod that no longer waits takes its demand pods away; the
  scale-down protection looks again (a pod bound, done or gone changes what a node holds);
- a Node added or changed: it gets its label (demand pods exclude nodes by it); the
  protection looks again;
- a ResourceClaim or ResourceSlice changed: the protection looks again.
"""

from __future__ import annotations

from typing import Any, Final

import kopf

from draco.api.constants import GROUP, PLURAL_RESOURCE_CLAIMS, PLURAL_RESOURCE_SLICES
from draco.operator import feed
from draco.operator.autoscaling.protection import Protection
from draco.operator.autoscaling.service import DemandService
from draco.operator.informers import Informers

__all__ = ["HANDLERS", "follow"]

#: The autoscaling controller's handlers (`AutoscalingController.start` subscribes them).
HANDLERS: Final = kopf.OperatorRegistry()


def _service(memo: kopf.Memo) -> DemandService:
    service: DemandService = memo.autoscaling
    return service


def _protection(memo: kopf.Memo) -> Protection:
    protection: Protection = memo.autoscaling_protection
    return protection


@kopf.on.event("v1", "pods", id="autoscaling/pod", registry=HANDLERS)
def pod_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    _service(memo).on_pod(body, deleted=type == "DELETED")
    if type is not None:
        _protection(memo).poke()


@kopf.on.event("v1", "nodes", id="autoscaling/node", registry=HANDLERS)
def node_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    _service(memo).on_node(body, deleted=type == "DELETED")
    _protection(memo).poke()


@kopf.on.event(GROUP, PLURAL_RESOURCE_CLAIMS, id="autoscaling/claim", registry=HANDLERS)
def claim_changed(memo: kopf.Memo, **_: Any) -> None:
    _protection(memo).poke()


@kopf.on.event(GROUP, PLURAL_RESOURCE_SLICES, id="autoscaling/slice", registry=HANDLERS)
def slice_changed(memo: kopf.Memo, **_: Any) -> None:
    _protection(memo).poke()


def follow(informers: Informers, memo: kopf.Memo) -> None:
    """Subscribe the handlers; the nodes as the cache holds them first (every node gets its
    label), then every change."""
    feed.subscribe(informers.nodes, HANDLERS, memo=memo, listing=True)
    feed.subscribe(informers.pods, HANDLERS, memo=memo)
    feed.subscribe(informers.claims, HANDLERS, memo=memo)
    feed.subscribe(informers.slices, HANDLERS, memo=memo)
