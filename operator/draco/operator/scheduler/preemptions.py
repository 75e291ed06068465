"""The writes of a preemption (`draco.scheduling.preemption`), as kube-scheduler's
DefaultPreemption makes them (``prepareCandidate``), in an order a restart can resume from:

1. the preemptor's ``status.nominatedNodeName`` (from then on the node is kept from pods of
   lower or equal priority, `draco.scheduling.nominations`, also after a restart: it is in
   the API);
2. per victim: the ``Preempted`` Event on it, its ``DisruptionTarget`` condition (reason
   ``PreemptionByScheduler``: a Job's pod failure policy can tell it), then its deletion
   with a UID precondition (a namesake is left alone). A victim marked and not yet deleted
   when the operator stops counts as gone for the preemptor (`PodInfo.preempted`) and is
   deleted when the preemption is made again;
3. an Event on the preemptor naming its victims.

Then the preemptor waits for its victims to go and their claims to be deallocated, and is
planned again; a wait longer than the bound (``--preemption-timeout``) re-evaluates.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Final

from draco.api.bodies import key_of, meta_of
from draco.api.constants import DISRUPTION_TARGET_CONDITION, PREEMPTION_BY_SCHEDULER_REASON
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube.client import POD_DISRUPTION_BUDGETS, PODS, ConflictError, Kube, NotFoundError
from draco.kube.informer import Informer
from draco.logs import get_logger
from draco.operator.scheduler.writes import emit
from draco.scheduling.preemption import DisruptionBudget, Preemption, Victim, budget_of

__all__ = ["REASON_PREEMPTED", "REASON_PREEMPTING", "Evictions"]

log = get_logger(__name__)

#: kube-scheduler's Event on a victim.
REASON_PREEMPTED: Final = "Preempted"
#: draco's Event on the preemptor, naming its victims (kube-scheduler has none).
REASON_PREEMPTING: Final = "Preempting"


@dataclass
class Evictions:
    """Performs preemptions (see the module docstring)."""

    kube: Kube
    pods: Informer[PodBody]

    async def perform(self, preemptor: PodBody, preemption: Preemption) -> int:
        """Nominate, evict, tell; how many victims were deleted now (the others were gone)."""
        meta = meta_of(preemptor)
        await self.kube.patch(
            PODS,
            str(meta["name"]),
            {"metadata": {"uid": meta.get("uid")}, "status": {"nominatedNodeName": preemption.node}},
            namespace=str(meta["namespace"]),
            subresource="status",
        )
        deleted = 0
        for victim in preemption.victims:
            if await self._evict(victim, preemptor, preemption.node):
                deleted += 1
        await emit(
            self.kube,
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta},
            REASON_PREEMPTING,
            preemption.describe(),
            type_="Normal",
        )
        log.info(
            "Preempted pods",
            pod=key_of(preemptor),
            node=preemption.node,
            victims=[v.key for v in preemption.victims],
            deleted=deleted,
        )
        return deleted

    async def budgets(self) -> list[DisruptionBudget]:
        """Every PodDisruptionBudget (read when a pod preempts: rare, and never cached)."""
        try:
            return [budget_of(body) for body in await self.kube.list(POD_DISRUPTION_BUDGETS)]
        except KubeError as exc:
            log.warning(
                "Could not list PodDisruptionBudgets; preempting as if there were none", error=str(exc)
            )
            return []

    async def _evict(self, victim: Victim, preemptor: PodBody, node: str) -> bool:
        """Event, DisruptionTarget, delete with the UID as precondition; False when the pod
        is gone or replaced by a namesake."""
        pod = self.pods.get(victim.key)
        if pod is None or meta_of(pod).get("uid") != victim.pod.uid:
            return False
        meta = meta_of(pod)
        name, namespace = str(meta["name"]), str(meta["namespace"])
        scheduler = str((preemptor.get("spec") or {}).get("schedulerName") or "default-scheduler")
        await emit(
            self.kube,
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta},
            REASON_PREEMPTED,
            f"Preempted by pod {meta_of(preemptor).get('uid')} on node {node}: {victim.why}",
            type_="Normal",
        )
        condition = {
            "type": DISRUPTION_TARGET_CONDITION,
            "status": "True",
            "reason": PREEMPTION_BY_SCHEDULER_REASON,
            "message": f"{scheduler}: preempting to accommodate a higher priority pod",
            "lastTransitionTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            if not victim.pod.preempted:
                await self.kube.patch(
                    PODS,
                    name,
                    {"metadata": {"uid": victim.pod.uid}, "status": {"conditions": [condition]}},
                    namespace=namespace,
                    patch_type="strategic",
                    subresource="status",
                )
            if meta.get("deletionTimestamp"):
                return False
            return await self.kube.delete(PODS, name, namespace=namespace, uid=victim.pod.uid)
        except (ConflictError, NotFoundError):
            return False
