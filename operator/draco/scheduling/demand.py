"""Device demand in a form autoscalers simulate: demand pods, and what keeps a node.

Neither cluster-autoscaler nor Karpenter reads draco's claims: a gated pod is not
unschedulable yet for them (KEP-3521), and a pod draco binds asks only for cpu and memory
as far as they can tell. So for a pod (or a group of pods) that fits nowhere, draco makes
one **demand pod** per pod: a pod that no scheduler serves (``schedulerName:
draco-demand``), marked ``PodScheduled=False/Unschedulable`` by draco, that asks for what
the pod needs in the terms autoscalers know:

- its cpu, memory and other core resources, as the pod asks for them;
- per device request of its unallocated claims, the extended resource of the request's
  DeviceClass (the class's ``extendedResourceName`` where it holds one, such as
  ``nvidia.com/gpu``, which clouds' GPU instance types carry already; otherwise
  ``deviceclass.resource.draco.dev/<class>``), the count of the request; the same names
  draco advertises on Nodes and node templates declare;
- the pod's node selector, required node affinity and tolerations, and its priority;
  required pod (anti-)affinity and topology spread terms that select the pod itself
  (one per node, spread over zones) among the demand pods of its group or workload;
- a required node affinity that no existing node with those resources meets
  (``autoscaling.resource.draco.dev/node NotIn [...]``, a label draco puts on every Node):
  existing nodes advertise their devices as capacity, allocated or not, so without it an
  autoscaler would think the demand fits where draco found no free device. New nodes
  never carry the value, so the autoscaler's simulation of a new node passes;
- where node templates say which node groups could take the pod, a node affinity on those
  groups (``karpenter.sh/nodepool`` for a NodePool, the template's labels otherwise).

A demand pod lives in draco's namespace (no quota, LimitRange or policy of the user's
namespace applies; the pod webhook leaves it alone), never runs, and is deleted as soon as
its pod is placed, gone or done. The pod itself, when draco binds it, is meanwhile marked
``WaitingForCapacity`` rather than ``Unschedulable`` (:data:`WAITING_FOR_CAPACITY_REASON`),
so that only its demand pod asks. What protects a node's devices from scale-down is here
too (:func:`protection`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast

from draco.api.corebodies import PodBody
from draco.quantity import Quantity
from draco.scheduling.labels import label_selector

__all__ = [
    "DEMAND_LABEL",
    "DEMAND_SCHEDULER",
    "FOR_POD_ANNOTATION",
    "FOR_UID_ANNOTATION",
    "GROUP_LABEL",
    "NODE_LABEL",
    "NO_DEMAND",
    "PROTECTED_ANNOTATION",
    "UNSCHEDULABLE_REASON",
    "WAITING_FOR_CAPACITY_REASON",
    "DemandReports",
    "UnplacedUnit",
    "demand_name",
    "demand_pod",
    "node_label_value",
    "protection",
]

DOMAIN: Final = "autoscaling.resource.draco.dev"
#: The scheduler name of demand pods: no scheduler serves it, so nothing binds them.
DEMAND_SCHEDULER: Final = "draco-demand"
DEMAND_LABEL: Final = f"{DOMAIN}/demand"
#: Demand pods of one group (or one workload) carry the same value: their terms select it.
GROUP_LABEL: Final = f"{DOMAIN}/group"
FOR_POD_ANNOTATION: Final = f"{DOMAIN}/for-pod"
FOR_UID_ANNOTATION: Final = f"{DOMAIN}/for-uid"
#: Existing nodes the demand pod does not fit (what it was built against), comma-separated.
EXCLUDED_ANNOTATION: Final = f"{DOMAIN}/excluded-nodes"
#: The label draco puts on every Node: its name (or a digest of a long one).
NODE_LABEL: Final = f"{DOMAIN}/node"
#: On a pod draco protects from scale-down (so that draco removes only what it added).
PROTECTED_ANNOTATION: Final = f"{DOMAIN}/protected"
#: Karpenter's and cluster-autoscaler's own words for "keep this pod's node".
KARPENTER_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
CA_SAFE_TO_EVICT: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
#: Never pulled: demand pods are never bound.
DEMAND_IMAGE: Final = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class UnplacedUnit:
    """A pod, or a group of pods placed all or nothing, that fits nowhere now."""

    #: The pod's ``namespace/name``, or the group's work-queue key.
    key: str
    #: The pods to place (one; a group's gated members).
    pods: tuple[PodBody, ...]
    #: Pod ``namespace/name`` -> its unallocated claims (JSON): the devices it waits for.
    pending: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    #: Pod ``namespace/name`` -> its allocated claims (one allocated on a node ties the pod there).
    allocated: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    #: How many of ``pods`` must be placed together (1 for a single pod).
    needed: int = 1
    #: Why nothing fits (the FailedScheduling message).
    message: str = ""

    @property
    def is_group(self) -> bool:
        return len(self.pods) > 1 or self.needed > 1


#: kube-scheduler's reason for a pod it cannot place: the one autoscalers act on
#: (Karpenter's ``FailedToSchedule``, cluster-autoscaler's unschedulable pods).
UNSCHEDULABLE_REASON: Final = "Unschedulable"
#: The reason draco marks a pod it binds and cannot place with while autoscaling is on:
#: its demand pod speaks for it (with its devices); the pod itself, asking for cpu and
#: memory only as far as an autoscaler can tell, would make one launch a node that does
#: not help (or part of a group its limits cannot hold).
WAITING_FOR_CAPACITY_REASON: Final = "WaitingForCapacity"


class DemandReports(Protocol):
    """Where the allocation reports the pods it cannot place (the autoscaling controller)."""

    #: The ``PodScheduled=False`` reason for the pods draco binds and cannot place.
    @property
    def unschedulable_reason(self) -> str: ...

    def unplaced(self, report: UnplacedUnit) -> None: ...


class _NoDemand:
    unschedulable_reason: Final = UNSCHEDULABLE_REASON

    def unplaced(self, report: UnplacedUnit) -> None:
        return None


#: The collaborator when autoscaling is off.
NO_DEMAND: Final[DemandReports] = _NoDemand()


def _digest(text: str, length: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def node_label_value(node: str) -> str:
    """A node's :data:`NODE_LABEL` value: its name where that is a label value, else a digest."""
    if len(node) <= 63 and node.replace("-", "").replace(".", "").replace("_", "").isalnum():
        return node
    return "n-" + _digest(node, 40)


def demand_name(pod_uid: str) -> str:
    return f"demand-{pod_uid}"


def _owner_key(pod: PodBody) -> str:
    meta = pod.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            return f"{meta.get('namespace', '')}/{owner.get('kind', '')}/{owner.get('uid', '')}"
    return f"{meta.get('namespace', '')}/{meta.get('uid', '')}"


def group_value(pod: PodBody, group_key: str | None) -> str:
    """:data:`GROUP_LABEL`'s value: the group's, else the pod's controller's."""
    return _digest(group_key or _owner_key(pod))


def _term_selects_itself(term: Mapping[str, Any], pod: PodBody) -> bool:
    meta = pod.get("metadata") or {}
    namespaces = term.get("namespaces") or []
    if term.get("namespaceSelector") is not None or (namespaces and meta.get("namespace") not in namespaces):
        return False
    return label_selector(term.get("labelSelector")).matches(meta.get("labels") or {})


def _affinity(pod: PodBody, group: str, node_terms: list[dict[str, Any]]) -> dict[str, Any]:
    affinity: Mapping[str, Any] = cast(Mapping[str, Any], (pod.get("spec") or {}).get("affinity") or {})
    out: dict[str, Any] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}}
    }
    ours = {"matchLabels": {GROUP_LABEL: group}}
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = [
            {"labelSelector": ours, "topologyKey": term.get("topologyKey", "")}
            for term in (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []
            if _term_selects_itself(term, pod)
        ]
        if terms:
            out[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    return out


def _spread(pod: PodBody, group: str) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": constraint.get("maxSkew", 1),
            "topologyKey": constraint.get("topologyKey", ""),
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {GROUP_LABEL: group}},
        }
        for constraint in cast(
            list[Mapping[str, Any]], (pod.get("spec") or {}).get("topologySpreadConstraints") or []
        )
        if constraint.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        and _term_selects_itself(constraint, pod)
    ]


def node_terms(
    pod: PodBody, *, excluded: Sequence[str], steering: Sequence[Mapping[str, str]]
) -> list[dict[str, Any]]:
    """The demand pod's required node selector terms: each of the pod's own terms, ANDed
    with one of the node groups that could take it (``steering``: label sets, any one)
    and with "none of the ``excluded`` nodes"."""
    required = (
        (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or [{}]
    extra: list[dict[str, Any]] = []
    if excluded:
        values = sorted({node_label_value(n) for n in excluded})
        extra.append({"key": NODE_LABEL, "operator": "NotIn", "values": values})
    groups = [
        [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]
        for labels in steering
    ] or [[]]
    terms = []
    for term in required:
        for group in groups:
            expressions = [*(term.get("matchExpressions") or []), *group, *extra]
            terms.append({"matchExpressions": expressions} if expressions else {})
    return terms or [{}]


def demand_pod(
    *,
    pod: PodBody,
    namespace: str,
    core: Mapping[str, Quantity],
    devices: Mapping[str, int],
    excluded: Sequence[str],
    steering: Sequence[Mapping[str, str]] = (),
    group_key: str | None = None,
    message: str = "",
) -> dict[str, Any]:
    """The demand pod of ``pod`` (see the module docstring). ``core`` are the pod's cpu,
    memory and other requests, ``devices`` the extended resources of its claims."""
    meta = pod.get("metadata") or {}
    spec = cast(Mapping[str, Any], pod.get("spec") or {})
    group = group_value(pod, group_key)
    requests = {name: str(quantity) for name, quantity in sorted(core.items())}
    requests.update({name: str(count) for name, count in sorted(devices.items())})
    limits = {name: str(count) for name, count in sorted(devices.items())}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": demand_name(str(meta.get("uid", ""))),
            "namespace": namespace,
            "labels": {
                DEMAND_LABEL: "true",
                GROUP_LABEL: group,
                "app.kubernetes.io/managed-by": "draco",
            },
            "annotations": {
                FOR_POD_ANNOTATION: f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                FOR_UID_ANNOTATION: str(meta.get("uid", "")),
                EXCLUDED_ANNOTATION: ",".join(sorted(excluded)),
            },
        },
        "spec": {
            "schedulerName": DEMAND_SCHEDULER,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65535,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "demand",
                    "image": DEMAND_IMAGE,
                    "resources": {"requests": requests, **({"limits": limits} if limits else {})},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
            "affinity": _affinity(pod, group, node_terms(pod, excluded=excluded, steering=steering)),
        },
    }
    for key in ("nodeSelector", "tolerations", "priorityClassName", "runtimeClassName"):
        if spec.get(key):
            body["spec"][key] = spec[key]
    spread = _spread(pod, group)
    if spread:
        body["spec"]["topologySpreadConstraints"] = spread
    if message:
        body["metadata"]["annotations"][f"{DOMAIN}/why"] = message[:1024]
    return body


def excluded_of(demand: Mapping[str, Any]) -> frozenset[str]:
    text = ((demand.get("metadata") or {}).get("annotations") or {}).get(EXCLUDED_ANNOTATION) or ""
    return frozenset(n for n in text.split(",") if n)


def same_demand(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether ``existing`` asks what ``wanted`` asks (pod specs are immutable: a demand
    that asks otherwise is made again)."""
    spec = existing.get("spec") or {}
    containers = spec.get("containers") or [{}]
    return bool(
        containers[0].get("resources") == wanted["spec"]["containers"][0]["resources"]
        and spec.get("affinity") == wanted["spec"]["affinity"]
    )


# --- scale-down ----------------------------------------------------------------------------------


def protection(pod: PodBody, *, protect: bool) -> dict[str, Any] | None:
    """The annotations patch that protects ``pod``'s node from scale-down (Karpenter's
    ``do-not-disrupt``, cluster-autoscaler's ``safe-to-evict: "false"``), or lifts what draco
    put there; None when nothing changes. A user's own annotations are never lifted: draco
    only removes what it marked as its own."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    ours = annotations.get(PROTECTED_ANNOTATION) == "true"
    if protect:
        if ours:
            return None
        if (
            annotations.get(KARPENTER_DO_NOT_DISRUPT) == "true"
            and annotations.get(CA_SAFE_TO_EVICT) == "false"
        ):
            return None  # the user protects it already
        return {
            "metadata": {
                "annotations": {
                    KARPENTER_DO_NOT_DISRUPT: "true",
                    CA_SAFE_TO_EVICT: "false",
                    PROTECTED_ANNOTATION: "true",
                }
            }
        }
    if not ours:
        return None
    return {
        "metadata": {
            "annotations": {
                KARPENTER_DO_NOT_DISRUPT: None,
                CA_SAFE_TO_EVICT: None,
                PROTECTED_ANNOTATION: None,
            }
        }
    }
