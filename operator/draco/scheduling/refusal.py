"""A pod kube-scheduler refused on the node draco pinned it to, and what to do about it.

draco chooses a pod's node by kube-scheduler's rules (`draco.scheduling.framework`), but
kube-scheduler binds it, and between the two the cluster can change (another scheduler
placed a pod with the same host port, an anti-affinity peer, a volume went away) or
kube-scheduler can know a rule draco does not (another profile, a plugin of its own). It
then marks the pod ``PodScheduled=False`` with reason ``Unschedulable`` and keeps it
Pending, while the pod's claims hold their devices on that node.

A pod draco bound itself (it names draco as its scheduler) meets no kube-scheduler: the
kubelet is the one that can reject it, at admission (another scheduler filled the node
in the moment draco could not see), and the pod is then Failed. The way out is the same.

A pinned pod cannot be moved: its node affinity is immutable once the gate is off, and
a scheduling gate can only be removed. So the way out is a new pod: the pod's devices are
released, the pod is deleted and
- a pod with a controller (ReplicaSet, Job, StatefulSet, ...) is made again by it;
- a bare pod is created again by draco, under the same name, with the spec it was
  created with (draco's pin taken out, the gate back), so it goes through placement
  like any other pod.

The new pod carries how many times its line was refused and on which nodes (annotations
below, for bare pods; in the operator's memory for pods of a controller), so it is not
pinned to a refusing node again, and the next attempt waits longer (:func:`backoff_s`).

This module decides, purely: whether a pod is refused (:func:`refused_node`), the
replacement of a bare pod (:func:`replacement`), the backoff.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from draco.api.bodies import meta_of
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    GROUP,
    PLACED_UID_ANNOTATION,
    SCHEDULER_NAME,
    SCHEDULING_GATE,
)
from draco.api.corebodies import PodBody
from draco.scheduling.podclaims import bound_by_draco, is_pod_done, waits_for_draco
from draco.scheduling.view import pinned_node

__all__ = [
    "REFUSALS_ANNOTATION",
    "REFUSED_NODES_ANNOTATION",
    "backoff_s",
    "has_controller",
    "refusal_message",
    "refusals",
    "refused_by",
    "refused_node",
    "refused_nodes",
    "rejected_by_kubelet",
    "replacement",
    "unpin_affinity",
]

#: On a bare pod draco created again: the nodes kube-scheduler refused its line on, and
#: how many times it was refused.
REFUSED_NODES_ANNOTATION: Final = f"{GROUP}/refused-nodes"
REFUSALS_ANNOTATION: Final = f"{GROUP}/refusals"
#: A new pod of a refused line waits this long before its deletion, doubling per refusal.
BACKOFF_INITIAL_S: Final = 1.0
BACKOFF_MAX_S: Final = 60.0
#: At most this many refused nodes are remembered (the most recent).
REMEMBERED_NODES: Final = 16

#: The kubelet's admission rejections (besides ``OutOf<resource>``): the pod fails before
#: it runs, so it can be made again elsewhere as a refused pod is.
_KUBELET_ADMISSION_REASONS: Final = frozenset(
    {"NodeAffinity", "NodeName", "NodePorts", "TaintToleration", "UnexpectedAdmissionError"}
)
#: What draco's own annotations that describe the old pod's placement are: the copy must
#: not carry them (the claim names and placed UID were the old pod's).
_PLACEMENT_ANNOTATIONS: Final = (CLAIM_STATUSES_ANNOTATION, PLACED_UID_ANNOTATION)


def _scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    conditions: list[Mapping[str, Any]] = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def refused_node(pod: PodBody) -> str | None:
    """The node draco pinned ``pod`` to, when kube-scheduler refused it there: draco
    placed this very pod (its placed-uid annotation), it is pinned, not bound, not
    gated, not being deleted or done, and ``PodScheduled`` is False for ``Unschedulable``.

    For a pod draco bound itself (it names draco as its scheduler) nobody refuses the
    node before the kubelet: the node it was bound to when the kubelet rejected it at
    admission (`rejected_by_kubelet`)."""
    meta = meta_of(pod)
    spec = pod.get("spec") or {}
    if bound_by_draco(pod):
        placed = (meta.get("annotations") or {}).get(PLACED_UID_ANNOTATION) == meta.get("uid")
        if placed and not meta.get("deletionTimestamp") and rejected_by_kubelet(pod):
            return str(spec.get("nodeName") or "") or None
        return None
    if (
        spec.get("nodeName")
        or meta.get("deletionTimestamp")
        or waits_for_draco(pod)
        or is_pod_done(pod)
        or (meta.get("annotations") or {}).get(PLACED_UID_ANNOTATION) != meta.get("uid")
    ):
        return None
    condition = _scheduled_condition(pod)
    if condition is None or condition.get("status") != "False" or condition.get("reason") != "Unschedulable":
        return None
    return pinned_node(pod)


def rejected_by_kubelet(pod: PodBody) -> bool:
    """The kubelet rejected the pod at admission: Failed before it ran, for a reason of
    its admission (``OutOfcpu``, ``OutOfmemory``, ``OutOfpods``, ``NodeAffinity``, ...)."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    return status.get("phase") == "Failed" and (
        reason.startswith("OutOf") or reason in _KUBELET_ADMISSION_REASONS
    )


def refused_by(pod: PodBody) -> str:
    """Who refused the node: kube-scheduler (a pinned pod) or the kubelet (a pod draco bound)."""
    return "the kubelet" if bound_by_draco(pod) else "kube-scheduler"


def refusal_message(pod: PodBody) -> str:
    """kube-scheduler's words (the ``PodScheduled`` condition's message), or the kubelet's
    (the status message of a pod it rejected)."""
    if bound_by_draco(pod):
        return str((pod.get("status") or {}).get("message") or "no reason given")
    condition = _scheduled_condition(pod) or {}
    return str(condition.get("message") or "no reason given")


def has_controller(pod: Mapping[str, Any]) -> bool:
    """Another object controls the pod (it makes a new one when this one is deleted)."""
    return any(ref.get("controller") is True for ref in meta_of(pod).get("ownerReferences") or [])


def refused_nodes(pod: Mapping[str, Any]) -> list[str]:
    text = (meta_of(pod).get("annotations") or {}).get(REFUSED_NODES_ANNOTATION) or ""
    return [name for name in text.split(",") if name]


def refusals(pod: Mapping[str, Any]) -> int:
    text = (meta_of(pod).get("annotations") or {}).get(REFUSALS_ANNOTATION) or "0"
    try:
        return max(int(text), 0)
    except ValueError:
        return 0


def backoff_s(count: int) -> float:
    """How long the ``count``-th refusal of a line waits before the pod is made again."""
    if count <= 1:
        return 0.0
    return float(min(BACKOFF_INITIAL_S * 2.0 ** min(count - 2, 16), BACKOFF_MAX_S))


def unpin_affinity(affinity: Mapping[str, Any] | None, node: str) -> dict[str, Any] | None:
    """``affinity`` without draco's pin to ``node`` (the ``metadata.name In [node]``
    requirement it added to each required term); None when nothing else is left."""
    if not affinity:
        return None
    result = copy.deepcopy(dict(affinity))
    node_affinity = result.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    terms = []
    for term in required.get("nodeSelectorTerms") or []:
        fields = [f for f in term.get("matchFields") or [] if f != pin]
        kept = {k: v for k, v in term.items() if k != "matchFields"}
        if fields:
            kept["matchFields"] = fields
        if kept.get("matchExpressions") or kept.get("matchFields"):
            terms.append(kept)
    if terms:
        required["nodeSelectorTerms"] = terms
    else:
        node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    if not node_affinity:
        result.pop("nodeAffinity", None)
    return result or None


def replacement(pod: PodBody, *, node: str, remembered: Sequence[str] = ()) -> PodBody:
    """The bare pod to create in place of ``pod`` (refused on ``node``): its metadata as
    the user wrote it (name, labels, annotations but draco's record of the old placement),
    its spec without the pin and with the gate (a pod that names draco as its scheduler
    gets none), and the refusal count and nodes."""
    meta = meta_of(pod)
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k not in _PLACEMENT_ANNOTATIONS
    }
    nodes = [n for n in [*refused_nodes(pod), *remembered, node] if n]
    unique = list(dict.fromkeys(reversed(nodes)))[:REMEMBERED_NODES]
    annotations[REFUSED_NODES_ANNOTATION] = ",".join(reversed(unique))
    annotations[REFUSALS_ANNOTATION] = str(refusals(pod) + 1)
    metadata: dict[str, Any] = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "annotations": annotations,
    }
    if meta.get("labels"):
        # Not finalizers: whoever put one on the old pod puts it on the new one.
        metadata["labels"] = copy.deepcopy(meta["labels"])
    spec: dict[str, Any] = copy.deepcopy(dict(pod.get("spec") or {}))
    spec.pop("nodeName", None)
    affinity = unpin_affinity(spec.get("affinity"), node)
    if affinity is None:
        spec.pop("affinity", None)
    else:
        spec["affinity"] = affinity
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != SCHEDULING_GATE]
    if spec.get("schedulerName") != SCHEDULER_NAME:  # draco binds the others: never gated
        gates = [{"name": SCHEDULING_GATE}, *gates]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}  # type: ignore[typeddict-item]
