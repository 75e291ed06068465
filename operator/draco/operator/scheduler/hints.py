"""A hint for a device-plugin-style pod that kube-scheduler calls "Insufficient <name>"
where draco could serve the name.

A pod that asks for `nvidia.com/gpu` in its resources on a cluster whose GPUs draco
publishes gets `0/3 nodes are available: 3 Insufficient nvidia.com/gpu` from kube-scheduler
and nothing else: no node runs NVIDIA's device plugin, and no DeviceClass has the name as
its `extendedResourceName`. When a DeviceClass named `<resource>.<domain>` exists, as
NVIDIA names its class for `nvidia.com/gpu` (`gpu.nvidia.com`, installed by draco's chart
with `agent.nvidiaCompat`), the pod gets one Warning Event saying which class could serve
it and what to do. (A name some class does map, on a pod that escaped draco's gate, is
`unserved`'s Event.) Pods are remembered by uid, so the Event is written once per pod.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import aiohttp

from draco.api.bodies import meta_of
from draco.api.constants import IMPLICIT_EXTENDED_RESOURCE_PREFIX
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube.client import Kube
from draco.logs import get_logger

__all__ = ["REASON", "ExtendedResourceHints", "hint_message", "insufficient_names"]

log = get_logger(__name__)

REASON: Final = "ExtendedResourceHint"
#: kube-scheduler's words for a resource no node has enough of: `Insufficient nvidia.com/gpu`.
_INSUFFICIENT: Final = re.compile(r"Insufficient ([A-Za-z0-9][-A-Za-z0-9_.]*/[-A-Za-z0-9_.]*[A-Za-z0-9])")
_MAX_REMEMBERED: Final = 100_000


def insufficient_names(pod: PodBody) -> list[str]:
    """The domain-qualified resources kube-scheduler says no node has enough of for `pod`."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return sorted(set(_INSUFFICIENT.findall(str(condition.get("message") or ""))))
    return []


def hint_message(name: str, classes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """What to tell a pod kube-scheduler cannot place for lack of `name`; None when no
    DeviceClass could serve it."""
    if any((obj.get("spec") or {}).get("extendedResourceName") == name for obj in classes.values()):
        return None  # a class maps it: the pod escaped draco's gate (`unserved` says so)
    domain, _, resource = name.partition("/")
    named = f"{resource}.{domain}"
    if named in classes:
        return (
            f"no node advertises {name} and no DeviceClass has it as spec.extendedResourceName; DeviceClass {named} "
            f"can serve it: set its spec.extendedResourceName to {name} (for NVIDIA GPUs published by draco's agent "
            "with --nvidia-compat: chart value agent.nvidiaExtendedResourceName) and recreate the pod, or ask for "
            f"{IMPLICIT_EXTENDED_RESOURCE_PREFIX}{named} instead"
        )
    return None


class ExtendedResourceHints:
    """`await warn(pod)` for a pod kube-scheduler left unschedulable."""

    def __init__(self, kube: Kube, *, classes: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self.kube = kube
        self.classes = classes
        self._hinted: set[str] = set()

    def wants(self, pod: PodBody) -> bool:
        """Cheap: an unbound pod short of a domain-qualified resource, not hinted yet."""
        uid = meta_of(pod).get("uid") or ""
        return (
            bool(uid)
            and uid not in self._hinted
            and not (pod.get("spec") or {}).get("nodeName")
            and bool(insufficient_names(pod))
        )

    async def warn(self, pod: PodBody) -> None:
        uid = meta_of(pod).get("uid") or ""
        if not self.wants(pod):
            return
        classes = self.classes()
        hints = [h for name in insufficient_names(pod) if (h := hint_message(name, classes))]
        if not hints:
            return
        if len(self._hinted) >= _MAX_REMEMBERED:
            self._hinted.clear()
        self._hinted.add(uid)
        try:
            await self.kube.emit_event(pod, reason=REASON, message="; ".join(hints), action="Allocate")
        except (KubeError, aiohttp.ClientError, TimeoutError) as err:
            log.warning("Could not record an Event", reason=REASON, error=str(err))
