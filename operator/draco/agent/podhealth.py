"""Device health on the pods: the pod condition and Events of `draco.agent.health`.

The agent owns its claims' `status.devices` entries; a pod is told by a condition in its
own status (`resource.draco.dev/DevicesHealthy`, False while a device of one of its claims
on this node is unhealthy, gone when none is) and an Event when that changes. The kubelet
keeps conditions it does not own when it writes the pod's status (readiness gates rely on
it), so the condition stays until the agent removes it.

What a pod is told is worked out from every claim of this agent that the pod reserves,
not only from the claim being synced: a pod with two claims on a failing GPU keeps its
condition until both recover. The pod's current condition is the memory: an unchanged
condition is not written again and not announced again, across restarts too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from draco.agent.health import (
    EVENT_COMPONENT,
    POD_HEALTH_CONDITION,
    REASON_DEVICE_HEALTHY,
    REASON_DEVICE_UNHEALTHY,
    UNHEALTHY_REASON,
)
from draco.agent.status import DeviceKey, unhealthy_message
from draco.api.bodies import Obj
from draco.api.meta import format_time
from draco.errors import KubeError, NotFoundError
from draco.kube.client import PODS, Kube
from draco.logs import get_logger

__all__ = ["PodHealth", "pod_message", "reserving_pods"]

log = get_logger(__name__)


def reserving_pods(claim: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, uid) of the pods in the claim's `reservedFor`."""
    out = []
    for ref in (claim.get("status") or {}).get("reservedFor") or []:
        if ref.get("resource") == "pods" and not ref.get("apiGroup") and ref.get("name"):
            out.append((str(ref["name"]), str(ref.get("uid") or "")))
    return out


def pod_message(problems: Mapping[str, Mapping[DeviceKey, str]]) -> str:
    """The unhealthy devices of a pod's claims (`claim key -> device -> problem`), in words."""
    parts = []
    for claim in sorted(problems):
        for device, problem in sorted(problems[claim].items()):
            parts.append(f"ResourceClaim {claim}: {unhealthy_message(device, problem)}")
    return "; ".join(parts)


class PodHealth:
    """Tells the pods of this agent's claims about their devices' health."""

    def __init__(
        self,
        kube: Kube,
        *,
        claims: Callable[[], Sequence[Mapping[str, Any]]],
        problems: Callable[[Mapping[str, Any]], Mapping[DeviceKey, str]],
    ) -> None:
        #: The claims this agent knows now (its watch's cache).
        self.claims = claims
        #: The unhealthy devices of one claim on this agent's nodes.
        self.problems = problems
        self.kube = kube

    async def sync(self, claim: Mapping[str, Any]) -> None:
        """Bring the condition of every pod reserving `claim` up to date."""
        namespace = str(claim["metadata"]["namespace"])
        for name, uid in reserving_pods(claim):
            await self._sync_pod(namespace, name, uid, claim)

    def _pod_problems(
        self, namespace: str, uid: str, claim: Mapping[str, Any]
    ) -> dict[str, Mapping[DeviceKey, str]]:
        found: dict[str, Mapping[DeviceKey, str]] = {}
        others = [c for c in self.claims() if c["metadata"].get("uid") != claim["metadata"].get("uid")]
        for each in [claim, *others]:
            meta = each["metadata"]
            if meta.get("namespace") != namespace or uid not in {u for _, u in reserving_pods(each)}:
                continue
            problems = self.problems(each)
            if problems:
                found[f"{namespace}/{meta.get('name')}"] = problems
        return found

    async def _sync_pod(self, namespace: str, name: str, uid: str, claim: Mapping[str, Any]) -> None:
        pod = await self.kube.get_or_none(PODS, name, namespace=namespace)
        if pod is None or (uid and pod["metadata"].get("uid") != uid):
            return
        current = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == POD_HEALTH_CONDITION
            ),
            None,
        )
        problems = self._pod_problems(namespace, uid, claim)
        if problems:
            message = pod_message(problems)
            if current is not None and current.get("status") == "False" and current.get("message") == message:
                return
            condition = {
                "type": POD_HEALTH_CONDITION,
                "status": "False",
                "reason": UNHEALTHY_REASON,
                "message": message,
                "lastTransitionTime": format_time(datetime.now(UTC).replace(microsecond=0)),
            }
            if current is not None and current.get("status") == "False" and current.get("lastTransitionTime"):
                condition["lastTransitionTime"] = current["lastTransitionTime"]
            if await self._patch(pod, condition):
                log.warning("Told a pod its device is unhealthy", pod=f"{namespace}/{name}", message=message)
                await self._event(pod, REASON_DEVICE_UNHEALTHY, message, warning=True)
        elif current is not None and await self._patch(
            pod, {"type": POD_HEALTH_CONDITION, "$patch": "delete"}
        ):
            log.info("Told a pod its devices are healthy again", pod=f"{namespace}/{name}")
            await self._event(pod, REASON_DEVICE_HEALTHY, "the devices of the pod's claims are healthy again")

    async def _patch(self, pod: Obj, condition: Mapping[str, Any]) -> bool:
        meta = pod["metadata"]
        try:
            await self.kube.patch(
                PODS,
                meta["name"],
                {"status": {"conditions": [dict(condition)]}},
                namespace=meta["namespace"],
                subresource="status",
                patch_type="strategic",
            )
        except NotFoundError:
            return False
        return True

    async def _event(self, pod: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        try:
            await self.kube.emit_event(
                pod,
                reason=reason,
                message=message,
                type="Warning" if warning else "Normal",
                component=EVENT_COMPONENT,
                instance=str((pod.get("spec") or {}).get("nodeName") or "") or None,
            )
        except KubeError as exc:
            log.warning("Could not record event", reason=reason, status=exc.status, error=str(exc))
