"""The autoscaling service: demand pods for what fits nowhere, labels on Nodes, and the
scale-down protection of nodes whose devices are in use (`protection.py`).

The allocation hands it the pods and groups it could not place (`unplaced`, the one seam
between the two: `draco.scheduling.demand.DemandReports`); the rest it reads from the
operator's informers. Its work queue's keys are a unit's key (a pod's ``namespace/name``
or a group's key) and ``node:<name>``:

- a unit: its pods' demand pods are made (or kept, or made again when what they ask
  changed), or none when no node template could take it whole, with an Event saying why
  (``NotTriggerScaleUp``, cluster-autoscaler's reason). A group is asked for whole or not
  at all: with node templates, only when one template's group has room for all of it
  (a NodePool's ``limits``, a template's ``maxNodes``); with
  ``--autoscaling-provisioning-requests``, as one atomic ProvisioningRequest;
- ``node:<name>``: the node gets its label ``autoscaling.resource.draco.dev/node``, which
  demand pods exclude existing nodes by.

A demand pod is deleted as soon as its pod no longer waits (placed, gone, done): the pod
informer's events say so, and a sweep every :data:`SWEEP_S` removes what an operator
restart or a lost event left. Nothing is kept that the API does not hold: the demand pods
and ProvisioningRequests are found again by their labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from draco.api.bodies import meta_of
from draco.api.corebodies import PodBody
from draco.errors import AlreadyExistsError, KubeError, NotFoundError
from draco.kube.client import NODES, PODS, Kube, Obj, Resource
from draco.logs import get_logger
from draco.operator.autoscaling.templates import Templates, TemplateSet
from draco.operator.informers import POD_UID, Informers
from draco.runtime.workqueue import WorkQueue
from draco.scheduling.demand import (
    DEMAND_LABEL,
    FOR_UID_ANNOTATION,
    NODE_LABEL,
    UNSCHEDULABLE_REASON,
    WAITING_FOR_CAPACITY_REASON,
    UnplacedUnit,
    demand_name,
    demand_pod,
    node_label_value,
    same_demand,
)
from draco.scheduling.extendedresources import resource_class_map
from draco.scheduling.nodetemplates import (
    Candidate,
    NodeTemplate,
    claims_resources,
    nodes_needed,
    pod_resources,
)
from draco.scheduling.podclaims import is_pod_done, waits_for_draco
from draco.scheduling.requests import pod_requests
from draco.scheduling.scaledown import node_of_claim

__all__ = [
    "PODTEMPLATES",
    "PROVISIONING_REQUESTS",
    "REASON_DEMANDED",
    "REASON_NOT_TRIGGERED",
    "DemandService",
]

log = get_logger(__name__)

#: cluster-autoscaler's reason for "this pod did not make a node group grow, and why".
REASON_NOT_TRIGGERED: Final = "NotTriggerScaleUp"
#: draco asked autoscalers for a node for the pod (its demand pod exists).
REASON_DEMANDED: Final = "WaitingForNewNode"
PODTEMPLATES: Final = Resource("", "v1", "podtemplates", "PodTemplate", True)
PROVISIONING_REQUESTS: Final = Resource(
    "autoscaling.x-k8s.io", "v1", "provisioningrequests", "ProvisioningRequest", True
)
ATOMIC_CLASS: Final = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
#: How often leftover demand pods are looked for.
SWEEP_S: Final = 30.0
#: A node younger than this may be the one launched for a demand: not excluded by it.
FRESH_NODE_S: Final = 60.0
NODE_KEY: Final = "node:"
#: How soon a unit no node group could take is judged again.
RECHECK_S: Final = 15.0


@dataclass
class DemandService:
    kube: Kube
    informers: Informers
    namespace: str
    queue: WorkQueue[str]
    templates: Templates
    provisioning_requests: bool = False
    #: The newest report of each unit that still waits (what its key stands for).
    reports: dict[str, UnplacedUnit] = field(default_factory=dict)
    #: Pod ``namespace/name`` -> the unit it was reported in.
    unit_of: dict[str, str] = field(default_factory=dict)
    #: Units whose "no scale-up" message was told, and the message.
    told: dict[str, str] = field(default_factory=dict)
    #: Units not decided since they were reported: when (their first decision reads the
    #: node templates afresh from then on).
    reported_at: dict[str, float] = field(default_factory=dict)
    clock: Any = time.monotonic
    runner: asyncio.Task[None] | None = None
    sweeper: asyncio.Task[None] | None = None

    @property
    def unschedulable_reason(self) -> str:
        """A pod draco binds and cannot place is not ``Unschedulable`` for autoscalers: its
        demand pod (or the Event saying why none) speaks for it."""
        return WAITING_FOR_CAPACITY_REASON

    # --- intake (on the event loop, never awaiting) --------------------------------------------

    def unplaced(self, report: UnplacedUnit) -> None:
        """The allocation could not place ``report``'s pods: decide their demand."""
        self.reports[report.key] = report
        self.reported_at.setdefault(report.key, self.clock())
        for pod in report.pods:
            self.unit_of[_key(pod)] = report.key
        self.queue.add(report.key)

    def on_pod(self, pod: PodBody, *, deleted: bool) -> None:
        """A pod changed: one that no longer waits takes its demand away."""
        meta = meta_of(pod)
        if (meta.get("labels") or {}).get(DEMAND_LABEL) == "true":
            return
        key = _key(pod)
        unit = self.unit_of.get(key)
        if unit is not None and (deleted or not _waits(pod)):
            self.unit_of.pop(key, None)
            self.queue.add(unit)

    def on_node(self, node: Obj, *, deleted: bool) -> None:
        if deleted:
            return
        name = str(meta_of(node).get("name", ""))
        if (meta_of(node).get("labels") or {}).get(NODE_LABEL) != node_label_value(name):
            self.queue.add(NODE_KEY + name)

    # --- work ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> float | None:
        if key.startswith(NODE_KEY):
            await self._label_node(key.removeprefix(NODE_KEY))
            return None
        report = self.reports.get(key)
        if report is None:
            return None
        waiting = [pod for pod in (self._current(p) for p in report.pods) if pod is not None and _waits(pod)]
        if not waiting or (report.is_group and len(waiting) < report.needed):
            await self._withdraw(report)
            self.reports.pop(key, None)
            self.told.pop(key, None)
            self.reported_at.pop(key, None)
            return None
        try:
            return await self._demand(report, waiting)
        except KubeError as exc:
            log.warning("Could not make the demand of pods", unit=key, error=str(exc))
            return 5.0

    def _current(self, pod: PodBody) -> PodBody | None:
        return self.informers.pods.get(_key(pod))

    async def _demand(self, report: UnplacedUnit, waiting: list[PodBody]) -> float | None:
        """Make the unit's demand, or when nothing may be asked for say why; either way look
        again after RECHECK_S while it waits (templates and limits change without the pods
        changing: a demand steered to a NodePool deleted since is made again without it)."""
        classes = list(self.informers.classes.values())
        class_map = resource_class_map(classes)
        members = sorted(waiting, key=_key)[: max(report.needed, 1)] if report.is_group else waiting[:1]
        tied = [
            f"pod {key}: its claim {_key(claim)} is allocated on node {node}"
            for key in map(_key, members)
            for claim in report.allocated.get(key, ())
            if (node := node_of_claim(claim)) is not None
        ]
        if tied:
            await self._refuse(report, members, "a new node cannot help: " + "; ".join(tied))
            return None
        candidates = [
            Candidate(
                key=_key(pod),
                spec=pod.get("spec") or {},
                claims=tuple(report.pending.get(_key(pod), ())),
                resources=pod_resources(pod_requests(pod.get("spec") or {})),
            )
            for pod in members
        ]
        templates = await self.templates.current(classes, not_before=self.reported_at.pop(report.key, None))
        steering: list[Mapping[str, str]] = []
        if templates:
            chosen, why = await asyncio.to_thread(
                _choose, candidates, templates, classes, group=report.is_group
            )
            if not chosen:
                await self._refuse(report, members, why)
                return RECHECK_S
            steering = [t.steering() for t in chosen]
        self.told.pop(report.key, None)
        demands = []
        for pod, candidate in zip(members, candidates, strict=True):
            devices = claims_resources(candidate.claims, class_map)
            demands.append(
                demand_pod(
                    pod=pod,
                    namespace=self.namespace,
                    core=candidate.resources,
                    devices=devices,
                    excluded=self._excluded(devices),
                    steering=steering,
                    group_key=report.key if report.is_group else None,
                    message=report.message,
                )
            )
        if self.provisioning_requests and report.is_group:
            await self._provisioning_request(report, members, demands)
        else:
            for pod, demand in zip(members, demands, strict=True):
                await self._make(pod, demand, steering)
        return RECHECK_S

    def _excluded(self, devices: Mapping[str, int]) -> list[str]:
        """Existing nodes an autoscaler would think the demand fits (they advertise its
        resources) but draco found no room on; nodes younger than FRESH_NODE_S are left
        out (they may be the ones launched for it)."""
        if not devices:
            return []
        now = datetime.datetime.now(datetime.UTC)
        excluded = []
        for node in self.informers.nodes.values():
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            if not any(str(allocatable.get(r, "0")) not in ("0", "") for r in devices):
                continue
            created = _parse_time(meta_of(node).get("creationTimestamp"))
            if created is not None and (now - created).total_seconds() < FRESH_NODE_S:
                continue
            excluded.append(str(meta_of(node).get("name", "")))
        return sorted(excluded)

    async def _make(
        self, pod: PodBody, demand: dict[str, Any], steering: Sequence[Mapping[str, str]]
    ) -> None:
        name = demand["metadata"]["name"]
        existing = self.informers.pods.get(f"{self.namespace}/{name}")
        if existing is not None and same_demand(cast(Obj, existing), demand):
            return
        if existing is not None:
            await self._delete(PODS, name)
        try:
            created = await self.kube.create(PODS, demand)
        except AlreadyExistsError:
            return  # the previous one is still going away: the next report makes it again
        await self._mark_unschedulable(created)
        groups = ", ".join(",".join(f"{k}={v}" for k, v in sorted(s.items())) for s in steering) or "any"
        resources = demand["spec"]["containers"][0]["resources"]["requests"]
        asks = ", ".join(f"{k}: {v}" for k, v in sorted(resources.items()))
        await self.kube.emit_event(
            pod,
            reason=REASON_DEMANDED,
            message=f"no node has room for the pod now: asked autoscalers for a new node with demand pod "
            f"{self.namespace}/{name} ({asks}; node groups: {groups})",
            type="Normal",
        )
        log.info("Made a demand pod", pod=_key(pod), demand=f"{self.namespace}/{name}", asks=resources)

    async def _mark_unschedulable(self, demand: Obj) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = meta_of(demand)
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": UNSCHEDULABLE_REASON,
            "message": f"demand of pod {meta.get('annotations', {}).get('autoscaling.resource.draco.dev/for-pod')}: "
            "no existing node has room for it",
            "lastTransitionTime": now,
        }
        await self.kube.patch(
            PODS,
            str(meta.get("name")),
            {"status": {"conditions": [condition]}},
            namespace=self.namespace,
            patch_type="strategic",
            subresource="status",
        )

    async def _refuse(self, report: UnplacedUnit, members: Sequence[PodBody], why: str) -> None:
        await self._withdraw(report)
        if self.told.get(report.key) == why:
            return
        self.told[report.key] = why
        message = f"pod didn't trigger scale-up: {why}"
        log.info("No scale-up for pods", unit=report.key, reason=why)
        for pod in members:
            await self.kube.emit_event(pod, reason=REASON_NOT_TRIGGERED, message=message, type="Normal")

    async def _withdraw(self, report: UnplacedUnit) -> None:
        """Delete the unit's demand pods and ProvisioningRequest (its pods are placed,
        gone, or cannot be helped by a new node)."""
        for pod in report.pods:
            uid = str(meta_of(pod).get("uid", ""))
            if self.informers.pods.get(f"{self.namespace}/{demand_name(uid)}") is not None:
                await self._delete(PODS, demand_name(uid))
        if self.provisioning_requests and report.is_group:
            name = _request_name(report.key)
            await self._delete(PROVISIONING_REQUESTS, name)
            await self._delete(PODTEMPLATES, name)

    async def _delete(self, resource: Resource, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            await self.kube.delete(resource, name, namespace=self.namespace)

    async def _provisioning_request(
        self, report: UnplacedUnit, members: Sequence[PodBody], demands: Sequence[dict[str, Any]]
    ) -> None:
        """One PodTemplate (the first member's demand pod) and one ProvisioningRequest of
        ``len(members)`` pods, atomic: cluster-autoscaler adds every node or none."""
        name = _request_name(report.key)
        if await self.kube.get_or_none(PROVISIONING_REQUESTS, name, namespace=self.namespace) is not None:
            return
        template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": self.namespace, "labels": {DEMAND_LABEL: "true"}},
            "template": {
                "metadata": {"labels": demands[0]["metadata"]["labels"]},
                "spec": demands[0]["spec"],
            },
        }
        uids = ",".join(str(meta_of(p).get("uid", "")) for p in members)
        request = provisioning_request(name=name, namespace=self.namespace, count=len(members), uids=uids)
        with contextlib.suppress(AlreadyExistsError):
            await self.kube.create(PODTEMPLATES, template)
        await self.kube.create(PROVISIONING_REQUESTS, request)
        for pod in members:
            await self.kube.emit_event(
                pod,
                reason=REASON_DEMANDED,
                message=f"the group needs new nodes: asked cluster-autoscaler for {len(members)} at once with "
                f"ProvisioningRequest {self.namespace}/{name} ({ATOMIC_CLASS})",
                type="Normal",
            )

    async def _label_node(self, name: str) -> None:
        node = self.informers.nodes.get(name)
        if node is None or (meta_of(node).get("labels") or {}).get(NODE_LABEL) == node_label_value(name):
            return
        with contextlib.suppress(NotFoundError):
            await self.kube.patch(NODES, name, {"metadata": {"labels": {NODE_LABEL: node_label_value(name)}}})

    # --- sweep -----------------------------------------------------------------------------------

    async def sweep(self) -> None:
        """Delete demand pods whose pod no longer waits (its uid: the annotation), and
        ProvisioningRequests none of whose pods waits."""
        for demand in [d for d in self.informers.pods.values() if _is_demand(d, self.namespace)]:
            uid = ((meta_of(demand).get("annotations") or {}).get(FOR_UID_ANNOTATION)) or ""
            owners = self.informers.pods.by_index(POD_UID, uid)
            if not owners or not _waits(owners[0]):
                await self._delete(PODS, str(meta_of(demand).get("name", "")))
        if not self.provisioning_requests:
            return
        selector = f"{DEMAND_LABEL}=true"
        for request in await self.kube.list(
            PROVISIONING_REQUESTS, namespace=self.namespace, label_selector=selector
        ):
            uids = ((meta_of(request).get("annotations") or {}).get(FOR_UID_ANNOTATION) or "").split(",")
            pods = [p for uid in uids if uid for p in self.informers.pods.by_index(POD_UID, uid)]
            if not any(_waits(p) for p in pods):
                await self._delete(PROVISIONING_REQUESTS, str(meta_of(request).get("name", "")))
                await self._delete(PODTEMPLATES, str(meta_of(request).get("name", "")))

    async def sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                await self.sweep()
            except KubeError as exc:
                log.warning("Could not sweep demand pods", error=str(exc))


def provisioning_request(*, name: str, namespace: str, count: int, uids: str) -> dict[str, Any]:
    """A ``autoscaling.x-k8s.io/v1`` ProvisioningRequest for ``count`` pods of PodTemplate
    ``name``, all or none (cluster-autoscaler's best-effort-atomic-scale-up class)."""
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {DEMAND_LABEL: "true"},
            "annotations": {FOR_UID_ANNOTATION: uids},
        },
        "spec": {
            "provisioningClassName": ATOMIC_CLASS,
            "podSets": [{"podTemplateRef": {"name": name}, "count": count}],
        },
    }


def _choose(
    candidates: Sequence[Candidate],
    templates: TemplateSet,
    classes: Sequence[Mapping[str, Any]],
    *,
    group: bool,
) -> tuple[list[NodeTemplate], str]:
    """The templates whose group could take all of ``candidates`` (in off-loop time: the
    claims are allocated on the templates' devices), or why none could (each refused
    template's own message among the reasons: its group is asked nothing)."""
    chosen: list[NodeTemplate] = []
    reasons: list[str] = []
    apart = group and any(_self_anti_affinity(c.spec) for c in candidates)
    for template in templates.usable:
        needed = nodes_needed(candidates, template, classes, apart=apart)
        if isinstance(needed, str):
            reasons.append(f"{template.name}: {needed}")
        elif template.headroom is not None and needed > template.headroom:
            reasons.append(
                f"{template.name}: {'the group needs' if group else 'it needs'} {needed} new node(s), "
                f"its limits allow {template.headroom} more ({template.headroom_reason})"
            )
        else:
            chosen.append(template)
    reasons.extend(
        f"{message} (its group is asked nothing until it is fixed)" for message in templates.invalid
    )
    return chosen, "; ".join(reasons) or "no node template"


def _self_anti_affinity(spec: Mapping[str, Any]) -> bool:
    terms = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    return any(term.get("topologyKey") == "kubernetes.io/hostname" for term in terms)


def _request_name(unit: str) -> str:
    return "demand-" + hashlib.sha256(unit.encode()).hexdigest()[:20]


def _waits(pod: PodBody) -> bool:
    return waits_for_draco(pod) and not is_pod_done(pod) and not meta_of(pod).get("deletionTimestamp")


def _is_demand(pod: PodBody, namespace: str) -> bool:
    meta = meta_of(pod)
    return meta.get("namespace") == namespace and (meta.get("labels") or {}).get(DEMAND_LABEL) == "true"


def _parse_time(text: object) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
