"""Does a node admit a pod? The scheduler's node checks that draco must make itself.

draco picks the node for a gated pod's claims, so the node it picks must be one the
kube-scheduler will accept afterwards; otherwise the pod would be pinned (required
affinity on ``metadata.name``) to a node it can never run on. This module answers that
question for one pod and one node, purely, from compact records the view keeps:

- ``spec.nodeSelector``: every label must be present with the same value;
- required node affinity: terms are ORed, the requirements of a term ANDed, a term with no
  requirement matches nothing; ``matchExpressions`` with In/NotIn/Exists/DoesNotExist/Gt/Lt
  on labels, ``matchFields`` on ``metadata.name`` only;
- node taints with effect NoSchedule or NoExecute that the pod does not tolerate
  (``spec.unschedulable`` counts as the ``node.kubernetes.io/unschedulable`` taint, which
  upstream's node controller would have added);
- allocatable cpu, memory and pod count: the pod's effective requests (init containers,
  sidecars and overhead included, as upstream computes them) beside the requests of the
  pods already on the node.

Reasons are short phrases in the scheduler's words so that a summary over many nodes reads
like kube-scheduler's ``0/5 nodes are available: 3 Insufficient cpu, ...``.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.allocator.nodeselect import node_selector_matches
from draco.api.bodies import NodeSelectorTermBody, TolerationBody, meta_of
from draco.api.corebodies import NodeBody, PodSpecBody
from draco.api.quantity import Quantity
from draco.api.tolerations import tolerates_any
from draco.scheduling.requests import PodRequests, pod_requests

__all__ = [
    "CANNOT_ALLOCATE",
    "EVENT_MESSAGE_LIMIT",
    "NodeInfo",
    "NodeTaint",
    "PodNeeds",
    "Usage",
    "node_info_from_dict",
    "pod_needs_from_dict",
    "resources_unfit_reason",
    "static_unfit_reason",
    "summarize_reasons",
    "unfit_reason",
    "unschedulable_message",
]

UNSCHEDULABLE_TAINT_KEY: Final = "node.kubernetes.io/unschedulable"
_BLOCKING_EFFECTS: Final = ("NoSchedule", "NoExecute")

REASON_SELECTOR: Final = "node(s) didn't match Pod's node affinity/selector"
REASON_CPU: Final = "Insufficient cpu"
REASON_MEMORY: Final = "Insufficient memory"
REASON_PODS: Final = "Too many pods"
#: draco's own: kube-scheduler refused this pod's line on the node before.
REASON_REFUSED: Final = "node(s) refused this pod before (kube-scheduler)"


@dataclass(frozen=True, slots=True)
class NodeTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the fit checks need of a Node; ``None`` allocatable means "not reported"."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[NodeTaint, ...] = ()
    milli_cpu: int | None = None
    memory: int | None = None
    pods: int | None = None
    #: Every resource of ``status.allocatable`` (cpu in millicores, the rest in units).
    allocatable: Mapping[str, int] = field(default_factory=dict)
    #: ``status.images``: each name an image is listed under, with the image's size in
    #: bytes (ImageLocality); empty when the node's record was read without them.
    images: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Usage:
    """Requests of the pods already on (or already promised to) a node."""

    milli_cpu: int = 0
    memory: int = 0
    pods: int = 0

    def plus(self, other: Usage) -> Usage:
        return Usage(self.milli_cpu + other.milli_cpu, self.memory + other.memory, self.pods + other.pods)

    def minus(self, other: Usage) -> Usage:
        return Usage(self.milli_cpu - other.milli_cpu, self.memory - other.memory, self.pods - other.pods)


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """What a pod asks of its node, computed once per pod."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    #: ``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``; None = no affinity.
    affinity_terms: tuple[NodeSelectorTermBody, ...] | None = None
    tolerations: tuple[TolerationBody, ...] = ()
    #: ``spec.nodeName`` when the pod names its node itself.
    node_name: str | None = None
    usage: Usage = Usage(pods=1)
    #: Nodes kube-scheduler refused this pod's line on before (`draco.scheduling.refusal`).
    avoid: frozenset[str] = frozenset()
    #: ``preferredDuringSchedulingIgnoredDuringExecution`` of the node affinity, as
    #: (weight, term) pairs (scoring only; not part of :attr:`placement_key`).
    preferred_affinity: tuple[tuple[int, NodeSelectorTermBody], ...] = ()

    @property
    def placement_key(self) -> str:
        """Equal for pods whose label, affinity and taint checks give equal answers."""
        return json.dumps(
            [self.node_selector, self.affinity_terms, self.tolerations, self.node_name, sorted(self.avoid)],
            sort_keys=True,
            default=str,
        )


# --- parsing ---------------------------------------------------------------------------


def _quantity(text: object, *, milli: bool) -> int | None:
    if text is None:
        return None
    try:
        quantity = Quantity.parse(str(text))
    except ValueError:
        return None
    return quantity.milli_value() if milli else quantity.value()


def node_info_from_dict(node: NodeBody) -> NodeInfo:
    """The compact record of a core/v1 Node in its JSON shape."""
    metadata = meta_of(node)
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    taints = [
        NodeTaint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
        for t in spec.get("taints") or []
    ]
    if spec.get("unschedulable"):
        taints.append(NodeTaint(UNSCHEDULABLE_TAINT_KEY, "", "NoSchedule"))
    pods = _quantity(allocatable.get("pods"), milli=False)
    amounts = {
        str(name): amount
        for name, value in allocatable.items()
        if (amount := _quantity(value, milli=name == "cpu")) is not None
    }
    return NodeInfo(
        name=metadata.get("name", ""),
        labels=dict(metadata.get("labels") or {}),
        taints=tuple(taints),
        milli_cpu=_quantity(allocatable.get("cpu"), milli=True),
        memory=_quantity(allocatable.get("memory"), milli=False),
        pods=pods,
        allocatable=amounts,
        images=_images(status.get("images") or ()),
    )


def _images(images: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Name -> size of ``status.images``; names are interned, as the same few images are
    listed by many nodes."""
    sizes: dict[str, int] = {}
    for image in images:
        size = int(image.get("sizeBytes") or 0)
        for name in image.get("names") or ():
            sizes.setdefault(sys.intern(str(name)), size)
    return sizes


def _usage(requests: Mapping[str, str]) -> tuple[int, int]:
    return (
        _quantity(requests.get("cpu"), milli=True) or 0,
        _quantity(requests.get("memory"), milli=False) or 0,
    )


def pod_usage(spec: PodSpecBody, *, requests: PodRequests | None = None) -> Usage:
    """Effective requests the way upstream's resource helpers compute them.

    Regular containers and restartable init containers (sidecars) run together and add
    up; each ordinary init container runs alone beside the sidecars started before it;
    the pod needs the larger of the two, plus its overhead. ``requests``: the pod's, when
    the caller has read them already (`requests.pod_requests`).
    """
    if requests is None:
        requests = pod_requests(spec)
    cpu = memory = 0
    sidecar_cpu = sidecar_memory = 0
    init_cpu = init_memory = 0
    for container in requests.containers:
        c, m = _usage(container.requests)
        if not container.init:
            cpu, memory = cpu + c, memory + m
        elif container.sidecar:
            sidecar_cpu, sidecar_memory = sidecar_cpu + c, sidecar_memory + m
            init_cpu, init_memory = max(init_cpu, sidecar_cpu), max(init_memory, sidecar_memory)
        else:
            init_cpu, init_memory = max(init_cpu, sidecar_cpu + c), max(init_memory, sidecar_memory + m)
    cpu, memory = max(cpu + sidecar_cpu, init_cpu), max(memory + sidecar_memory, init_memory)
    overhead_cpu, overhead_memory = _usage(requests.overhead)
    return Usage(milli_cpu=cpu + overhead_cpu, memory=memory + overhead_memory, pods=1)


def pod_needs_from_dict(
    spec: PodSpecBody, *, requests: PodRequests | None = None, avoid: frozenset[str] = frozenset()
) -> PodNeeds:
    """The compact needs of a pod, from its ``spec`` in the JSON shape (and its requests,
    when the caller has read them already; ``avoid``: nodes that refused its line)."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    terms = None if required is None else tuple(required.get("nodeSelectorTerms") or [])
    preferred = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    return PodNeeds(
        preferred_affinity=tuple((int(p.get("weight") or 0), p.get("preference") or {}) for p in preferred),
        node_selector=dict(spec.get("nodeSelector") or {}),
        affinity_terms=terms,
        tolerations=tuple(spec.get("tolerations") or []),
        node_name=spec.get("nodeName") or None,
        usage=pod_usage(spec, requests=requests),
        avoid=avoid,
    )


# --- checks ----------------------------------------------------------------------------


def selector_matches(needs: PodNeeds, node: NodeInfo) -> bool:
    """nodeName, nodeSelector and required node affinity."""
    if needs.node_name is not None and needs.node_name != node.name:
        return False
    if any(node.labels.get(key) != value for key, value in needs.node_selector.items()):
        return False
    if needs.affinity_terms is None:
        return True
    # The scheduler's node-affinity semantics are the allocator's for slice selectors.
    selector = {"nodeSelectorTerms": list(needs.affinity_terms)}
    return node_selector_matches(selector, name=node.name, labels=node.labels)


def untolerated_taint(needs: PodNeeds, node: NodeInfo) -> NodeTaint | None:
    """The first NoSchedule/NoExecute taint of the node the pod does not tolerate."""
    for taint in node.taints:
        if taint.effect in _BLOCKING_EFFECTS and not tolerates_any(
            needs.tolerations, key=taint.key, value=taint.value, effect=taint.effect
        ):
            return taint
    return None


def static_unfit_reason(needs: PodNeeds, node: NodeInfo) -> str | None:
    """The checks that depend on the node's labels and taints only (cacheable per node)."""
    if node.name in needs.avoid:
        return REASON_REFUSED
    if not selector_matches(needs, node):
        return REASON_SELECTOR
    taint = untolerated_taint(needs, node)
    if taint is not None:
        text = f"{taint.key}={taint.value}" if taint.value else taint.key
        return f"node(s) had untolerated taint {{{text}}}"
    return None


def resources_unfit_reason(needs: PodNeeds, node: NodeInfo, *, used: Usage) -> str | None:
    """Allocatable cpu, memory and pods beside ``used``."""
    if node.milli_cpu is not None and used.milli_cpu + needs.usage.milli_cpu > node.milli_cpu:
        return REASON_CPU
    if node.memory is not None and used.memory + needs.usage.memory > node.memory:
        return REASON_MEMORY
    if node.pods is not None and used.pods + needs.usage.pods > node.pods:
        return REASON_PODS
    return None


def unfit_reason(needs: PodNeeds, node: NodeInfo, *, used: Usage) -> str | None:
    """``None`` when ``node`` admits the pod next to ``used``; else why not, in the
    scheduler's words (one reason, the first check that fails)."""
    return static_unfit_reason(needs, node) or resources_unfit_reason(needs, node, used=used)


#: Upstream's DRA plugin reason for a node whose devices cannot hold the pod's claims.
CANNOT_ALLOCATE: Final = "cannot allocate all claims"

#: What an Event's message may hold (the API's limit on an Event note, in bytes).
EVENT_MESSAGE_LIMIT: Final = 1024


def summarize_reasons(total: int, reasons: Iterable[str]) -> str:
    """``0/5 nodes are available: 3 Insufficient cpu, 2 node(s) didn't match ...``."""
    counts = Counter(reasons)
    available = max(0, total - sum(counts.values()))
    parts = [f"{count} {reason}" for reason, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    head = f"{available}/{total} nodes are available"
    return f"{head}: {', '.join(parts)}" if parts else head


def unschedulable_message(
    *,
    total: int,
    node_reasons: Sequence[str],
    device_unfit_nodes: int,
    explanation: str = "",
    limit: int = EVENT_MESSAGE_LIMIT,
) -> str:
    """The FailedScheduling message, as upstream words it, within `limit` bytes.

    ``0/N nodes are available: <counts of reasons>.`` where nodes that admit the pod but
    whose devices cannot hold its claims count as "cannot allocate all claims"; then the
    allocator's explanation, one line per reason. When it does not fit, whole lines are
    dropped from the end and counted, so what is kept is never cut mid-word and the
    headline is always there.
    """
    if not total:
        return "0/0 nodes are available: no Node objects exist"
    reasons = [*node_reasons, *([CANNOT_ALLOCATE] * device_unfit_nodes)]
    head = summarize_reasons(total, reasons) + "."
    lines = [line for line in explanation.splitlines() if line.strip()]

    def more(count: int) -> str:
        return f"\n(and {count} more; the operator's log has the whole explanation)" if count else ""

    message = head
    for index, line in enumerate(lines):
        candidate = f"{message}\n{line}" if index else f"{message} {line}"
        # Room is kept for the note about what is left out, so it always fits after a line.
        if len((candidate + more(len(lines) - index - 1)).encode()) > limit:
            message += more(len(lines) - index)
            break
        message = candidate
    return message.encode()[:limit].decode(errors="ignore")
