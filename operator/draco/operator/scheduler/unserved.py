"""No silent capacity loss: a pod that asks for an extended resource a DeviceClass maps,
but that draco does not serve, gets one Warning Event saying so.

draco advertises each mapped name (``nvidia.com/gpu``, ``deviceclass.resource.draco.dev/<class>``)
in the Nodes' allocatable so kube-scheduler's resource fit admits the pods draco pins. A
pod asking for such a name without draco's scheduling gate (created before the class
mapped the name, in a namespace the pod webhook does not serve, while the webhook was
down) is placed by kube-scheduler like a device-plugin pod: it gets no claim and no
device, yet its request counts against that capacity, for kube-scheduler and for draco's
own placement alike. The Event (reason :data:`REASON`, once per pod) names the resource,
the class and the way out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import aiohttp

from draco.api.bodies import meta_of
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube.client import Kube
from draco.logs import get_logger
from draco.scheduling.extendedresources import unserved_extended_resources

__all__ = ["REASON", "UnservedPods", "unserved_message"]

log = get_logger(__name__)

REASON: Final = "ExtendedResourceWithoutDevice"
#: Pods remembered as warned; beyond that the set starts over (an Event may repeat).
_MAX_REMEMBERED: Final = 100_000


def unserved_message(resources: Mapping[str, str]) -> str:
    asked = ", ".join(f"{name} (DeviceClass {cls})" for name, cls in resources.items())
    return (
        f"pod asks for {asked}, but draco does not serve it: it never carried the scheduling gate "
        "resource.draco.dev/allocation (created before the class mapped the name, in a namespace the pod "
        "webhook does not serve, or while the webhook was down), so it has no claim and no device, while "
        "its request counts against the node's advertised capacity of that name and keeps other pods off it. "
        "Delete and recreate the pod where draco's pod webhook serves it, or add the gate yourself (docs/pods.md)"
    )


class UnservedPods:
    """`await warn(pod, class_map)` for every pod event of a served namespace."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._warned: set[str] = set()

    async def warn(self, pod: PodBody, class_map: Mapping[str, str]) -> None:
        uid = meta_of(pod).get("uid") or ""
        if not uid or uid in self._warned:
            return
        resources = unserved_extended_resources(pod, class_map)
        if not resources:
            return
        if len(self._warned) >= _MAX_REMEMBERED:
            self._warned.clear()
        self._warned.add(uid)
        log.warning(
            "Pod holds extended-resource capacity without a device",
            pod=f"{meta_of(pod).get('namespace')}/{meta_of(pod).get('name')}",
            resources=resources,
        )
        try:
            await self.kube.emit_event(
                pod, reason=REASON, message=unserved_message(resources), action="Allocate"
            )
        except (KubeError, aiohttp.ClientError, TimeoutError) as err:
            log.warning("Could not record an Event", reason=REASON, error=str(err))
