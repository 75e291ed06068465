"""A Node as the placement rules read it, the node-only checks draco makes first, and
the words of a FailedScheduling message.

The record (:class:`NodeInfo`, parsed once per node version by :func:`node_info_from_dict`)
is what every rule of kube-scheduler's profile reads of a node: name, labels, taints,
allocatable resources, images. Two of the profile's node-only Filters are here, the other
two in their plugins' modules (`nodeaffinity`, `tainttoleration`):

- NodeName: a pod that names its node (``spec.nodeName``) fits only there;
- NodeUnschedulable: a node with ``spec.unschedulable`` takes only pods that tolerate the
  ``node.kubernetes.io/unschedulable:NoSchedule`` taint (what upstream's node controller
  taints a cordoned node with; the record lists it last when the node has only the flag).

Reasons are short phrases in the scheduler's words so that a summary over many nodes reads
like kube-scheduler's ``0/5 nodes are available: 3 Insufficient cpu, ...``
(:func:`summarize_reasons`, :func:`unschedulable_message`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from draco.api.bodies import meta_of
from draco.api.corebodies import NodeBody
from draco.api.quantity import Quantity
from draco.api.tolerations import tolerates_any

if TYPE_CHECKING:
    from draco.scheduling.podinfo import PodInfo

__all__ = [
    "CANNOT_ALLOCATE",
    "EVENT_MESSAGE_LIMIT",
    "REASON_REFUSED",
    "REASON_SELECTOR",
    "NodeInfo",
    "NodeTaint",
    "node_info_from_dict",
    "node_name_unfit",
    "summarize_reasons",
    "taint_text",
    "unschedulable_message",
    "unschedulable_unfit",
]

UNSCHEDULABLE_TAINT_KEY: Final = "node.kubernetes.io/unschedulable"

#: What draco says of a node a pod's nodeName, node selector or required affinity refuses.
REASON_SELECTOR: Final = "node(s) didn't match Pod's node affinity/selector"
#: draco's own: kube-scheduler refused this pod's line on the node before.
REASON_REFUSED: Final = "node(s) refused this pod before (kube-scheduler)"


@dataclass(frozen=True, slots=True)
class NodeTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the placement rules read of a Node."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    #: ``spec.taints``, and last the unschedulable taint when ``unschedulable`` is set.
    taints: tuple[NodeTaint, ...] = ()
    #: ``spec.unschedulable`` (cordoned).
    unschedulable: bool = False
    #: Every resource of ``status.allocatable`` (cpu in millicores, the rest in units).
    allocatable: Mapping[str, int] = field(default_factory=dict)
    #: ``status.images``: each name an image is listed under, with the image's size in
    #: bytes (ImageLocality); empty when the node's record was read without them.
    images: Mapping[str, int] = field(default_factory=dict)


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
    unschedulable = bool(spec.get("unschedulable"))
    if unschedulable:
        taints.append(NodeTaint(UNSCHEDULABLE_TAINT_KEY, "", "NoSchedule"))
    amounts = {
        str(name): amount
        for name, value in allocatable.items()
        if (amount := _quantity(value, milli=name == "cpu")) is not None
    }
    return NodeInfo(
        name=metadata.get("name", ""),
        labels=dict(metadata.get("labels") or {}),
        taints=tuple(taints),
        unschedulable=unschedulable,
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


# --- the node-only checks of NodeName and NodeUnschedulable ----------------------------


def node_name_unfit(pod: PodInfo, node: NodeInfo) -> str | None:
    """NodeName's Filter (worded as draco words a node the pod's selector refuses)."""
    if pod.node_name is not None and pod.node_name != node.name:
        return REASON_SELECTOR
    return None


def unschedulable_unfit(pod: PodInfo, node: NodeInfo) -> str | None:
    """NodeUnschedulable's Filter: a cordoned node, unless the pod tolerates its taint."""
    if not node.unschedulable:
        return None
    taint = node.taints[-1]
    if tolerates_any(pod.tolerations, key=taint.key, value=taint.value, effect=taint.effect):
        return None
    return f"node(s) had untolerated taint {{{taint_text(taint)}}}"


def taint_text(taint: NodeTaint) -> str:
    """``key=value`` (``key`` without a value), as kube-scheduler names a taint."""
    return f"{taint.key}={taint.value}" if taint.value else taint.key


# --- messages ----------------------------------------------------------------------------


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
