"""Device taint eviction's reactions, as Kopf event handlers (fed by the operator's
informers: `draco.operator.feed`). Each hands the change to the service (`memo.eviction`,
:class:`~draco.operator.devicetainteviction.service.EvictionService`), which works out
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

__all__ = ["HANDLERS", "follow"]

#: Device taint eviction's handlers (`EvictionController.start` subscribes them).
HANDLERS: Final = kopf.OperatorRegistry()


def _service(memo: kopf.Memo) -> EvictionService:
    service: EvictionService = memo.eviction
    return service


def _served(memo: kopf.Memo, namespace: str | None) -> bool:
    return serves_namespace(namespace or "", memo.namespaces)


@kopf.on.event(GROUP, PLURAL_RESOURCE_SLICES, id="device-taint-eviction/slice", registry=HANDLERS)
def slice_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    _service(memo).on_slice(body, deleted=type == "DELETED")


@kopf.on.event(GROUP, PLURAL_DEVICE_TAINT_RULES, id="device-taint-eviction/rule", registry=HANDLERS)
def rule_changed(type: str | None, body: Any, memo: kopf.Memo, **_: Any) -> None:
    _service(memo).on_rule(body, deleted=type == "DELETED")


@kopf.on.event(GROUP, PLURAL_RESOURCE_CLAIMS, id="device-taint-eviction/claim", registry=HANDLERS)
def claim_changed(type: str | None, body: Any, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    if _served(memo, namespace):
        _service(memo).on_claim(body, deleted=type == "DELETED")


@kopf.on.event("v1", "pods", id="device-taint-eviction/pod", registry=HANDLERS)
def pod_changed(type: str | None, body: Any, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    if _served(memo, namespace):
        _service(memo).on_pod(body, deleted=type == "DELETED")


def follow(informers: Informers, memo: kopf.Memo) -> None:
    """Fill the service from the caches, then subscribe the handlers to every change
    (nothing awaited in between): everything is known before a worker runs, so a pool
    seen in part never looks tainted."""
    served = memo.namespaces
    _service(memo).prime(
        slices=list(informers.slices.values()),
        rules=list(informers.taint_rules.values()),
        claims=[c for c in informers.claims.values() if serves_namespace(_namespace(c), served)],
        pods=[p for p in informers.pods.values() if serves_namespace(_namespace(p), served)],
    )
    for informer in (informers.slices, informers.taint_rules, informers.claims, informers.pods):
        feed.subscribe(informer, HANDLERS, memo=memo)


def _namespace(obj: Any) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")
