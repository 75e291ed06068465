"""Kopf handlers of the claim lifecycle: watch events in, work-queue keys out.

Like upstream's resourceclaim controller, pods and claims are watched and turned into
`pod:` and `claim:` keys: those come from the operator's informers (see `startup.py` and
`Lifecycle.prime`), not from Kopf. Templates and DeviceClasses are watched here so that a
pod whose claim could not be created is retried the moment what it waited for appears.
The work itself is `lifecycle.Lifecycle`'s. Kopf watches every namespace (allocation needs
the whole cluster); templates outside `--namespace` are ignored here.
"""

from __future__ import annotations

from typing import Any

import kopf

from draco.api.constants import (
    GROUP,
    PLURAL_DEVICE_CLASSES,
    PLURAL_RESOURCE_CLAIM_TEMPLATES,
)
from draco.api.constants import VERSION as DRACO_VERSION
from draco.operator.options import serves_namespace
from draco.operator.resourceclaim.lifecycle import Lifecycle

__all__ = ["device_class_event", "template_event"]


def _lifecycle(memo: kopf.Memo) -> Lifecycle:
    lifecycle: Lifecycle = memo.lifecycle
    return lifecycle


def _served(lifecycle: Lifecycle, body: kopf.Body) -> bool:
    return serves_namespace(body.metadata.namespace or "", lifecycle.namespaces)


@kopf.on.event(GROUP, DRACO_VERSION, PLURAL_RESOURCE_CLAIM_TEMPLATES)
async def template_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    lifecycle = _lifecycle(memo)
    if _served(lifecycle, body):
        lifecycle.on_template_event(dict(body), deleted=type == "DELETED")


@kopf.on.event(GROUP, DRACO_VERSION, PLURAL_DEVICE_CLASSES, id="lifecycle-device-class")
async def device_class_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _lifecycle(memo).on_class_event(dict(body), deleted=type == "DELETED")
