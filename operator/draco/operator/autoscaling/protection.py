"""Scale-down protection: a node whose devices are allocated to running pods is not taken
away unless those pods could get their devices elsewhere.

Every :data:`INTERVAL_S` (sooner after a change: an allocation made or released, a pod
bound or gone, a slice or node changed; at most every :data:`MIN_INTERVAL_S`) it looks at
the pods bound to a node that hold devices there through their claims
(`draco.scheduling.scaledown`): a node whose pods could not all have their claims
allocated on other existing nodes keeps them with both autoscalers' own pod annotations,
``karpenter.sh/do-not-disrupt: "true"`` (Karpenter's consolidation, drift and expiry leave
the node) and ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``
(cluster-autoscaler does not scale it down); draco marks what it added and lifts only that,
once the pods could move or no longer hold devices. A node without allocated devices
carries nothing of draco's and is removable as any other.

The inventory is built in a thread from copies of the informers' caches (nothing is
shared with the allocation, which keeps its own), so the check costs one inventory build
and a few allocations per protected node each round.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.allocator import Inventory
from draco.allocator.outcome import Node
from draco.api.bodies import meta_of
from draco.api.corebodies import PodBody
from draco.errors import AllocationError, CELError, KubeError, NotFoundError
from draco.kube.client import PODS, Kube
from draco.logs import get_logger
from draco.operator.informers import POD_UID, Informers
from draco.scheduling.demand import PROTECTED_ANNOTATION, protection
from draco.scheduling.podclaims import is_pod_done
from draco.scheduling.scaledown import movable, node_of_claim

__all__ = ["INTERVAL_S", "Protection"]

log = get_logger(__name__)

#: The longest a change waits to be looked at, and the shortest time between two rounds.
INTERVAL_S: Final = 30.0
MIN_INTERVAL_S: Final = 2.0


@dataclass
class Protection:
    kube: Kube
    informers: Informers
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def poke(self) -> None:
        self._changed.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=INTERVAL_S)
            await asyncio.sleep(MIN_INTERVAL_S)
            self._changed.clear()
            try:
                await self.sync()
            except (KubeError, AllocationError, CELError) as exc:
                log.warning("Could not judge scale-down protection", error=str(exc))

    async def sync(self) -> None:
        held = self._held()
        snapshot = (
            list(self.informers.classes.values()),
            list(self.informers.slices.values()),
            list(self.informers.taint_rules.values()),
            [c for c in self.informers.claims.values() if (c.get("status") or {}).get("allocation")],
            [
                Node(name=str(meta_of(n).get("name", "")), labels=dict(meta_of(n).get("labels") or {}))
                for n in self.informers.nodes.values()
            ],
        )
        verdicts = await asyncio.to_thread(_judge, held, *snapshot) if held else {}
        protected = {key for key, keep in verdicts.items() if keep}
        for pod in self.informers.pods.values():
            key = _key(pod)
            want = key in protected
            if not want and (meta_of(pod).get("annotations") or {}).get(PROTECTED_ANNOTATION) != "true":
                continue
            patch = protection(pod, protect=want)
            if patch is None:
                continue
            try:
                await self.kube.patch(
                    PODS, str(meta_of(pod).get("name")), patch, namespace=meta_of(pod).get("namespace")
                )
            except NotFoundError:
                continue
            log.info(
                "Protected a pod's node from scale-down" if want else "Lifted scale-down protection",
                pod=key,
                node=(pod.get("spec") or {}).get("nodeName"),
            )

    def _held(self) -> dict[str, dict[str, list[Mapping[str, Any]]]]:
        """Node -> pod key -> the claims that pod (bound there, running) holds devices of there."""
        held: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
        for claim in self.informers.claims.values():
            node = node_of_claim(claim)
            if node is None:
                continue
            for reference in (claim.get("status") or {}).get("reservedFor") or []:
                if reference.get("resource") != "pods":
                    continue
                for pod in self.informers.pods.by_index(POD_UID, str(reference.get("uid", ""))):
                    if _running_on(pod, node):
                        held.setdefault(node, {}).setdefault(_key(pod), []).append(claim)
        return held


def _running_on(pod: PodBody, node: str) -> bool:
    return (
        (pod.get("spec") or {}).get("nodeName") == node
        and not is_pod_done(pod)
        and not meta_of(pod).get("deletionTimestamp")
    )


def _judge(
    held: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    classes: list[Any],
    slices: list[Any],
    rules: list[Any],
    allocated: list[Any],
    nodes: list[Node],
) -> dict[str, bool]:
    """Pod key -> whether its node must be kept (its pods cannot all move)."""
    inventory = Inventory.build(classes=classes, slices=slices, taint_rules=rules, allocated_claims=allocated)
    # Only nodes with devices of their own can take a pod's node-local devices.
    with_devices = {str((s.get("spec") or {}).get("nodeName") or "") for s in slices}
    nodes = [n for n in nodes if n.name in with_devices]
    verdicts: dict[str, bool] = {}
    for node, pods in sorted(held.items()):
        keep = not movable(inventory, node=node, held=[list(c) for _, c in sorted(pods.items())], nodes=nodes)
        for key in pods:
            verdicts[key] = keep
    return verdicts


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
