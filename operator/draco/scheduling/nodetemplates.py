"""Node templates: what a new node of an autoscaled node group would bring, devices included.

A node group at zero nodes has no node to copy devices from, and no autoscaler knows what
draco's agent would publish on a node it has not made yet. A node template says it:

- **a Karpenter NodePool** carries its devices in the annotation
  ``autoscaling.resource.draco.dev/devices``: a YAML list of ResourceSlice specs
  (``driver``, ``devices``, ``sharedCounters``: the shape of ``ResourceSlice.spec`` without
  ``nodeName`` and ``pool``, which are the new node's); its labels and taints are the
  NodePool's ``spec.template``, its headroom the NodePool's ``spec.limits`` less its
  ``status.resources``;
- **any node group** (cluster-autoscaler's) gets a ConfigMap labelled
  ``autoscaling.resource.draco.dev/node-template: "true"`` whose key ``template.yaml`` is a
  :data:`KIND` document, the same file ``draco simulate --node-template`` reads::

      apiVersion: autoscaling.resource.draco.dev/v1alpha1
      kind: NodeTemplate
      metadata: {name: gpu-a100}
      spec:
        nodeGroup: gpu-a100            # the autoscaler's name for the group (informational)
        maxNodes: 4                    # optional: the group's largest size
        labels: {node.kubernetes.io/instance-type: p4d.24xlarge}
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        allocatable: {cpu: "96", memory: 1100Gi, pods: "110"}
        devices:                       # what draco's agent publishes there
        - driver: gpu.example.com
          devices:
          - name: gpu-0
            attributes: {model: {string: A100}}

A template is read whole or not at all: every field is checked (the devices by the API's
own ResourceSlice rules) and the first read that fails raises :class:`NodeTemplateError`
naming the template, the field and what is wrong; nothing of it is used.

From a template this module answers, without I/O: the extended resources a new node would
carry (per DeviceClass, the names draco advertises on Nodes: :func:`template_resources`),
whether a pod and its claims would fit such a node (:func:`template_refusal`: labels,
taints, cpu and memory, and the claims allocated by draco's allocator on the template's
devices), and how many new nodes a set of pods needs (:func:`nodes_needed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from draco.allocator import Allocated, Inventory, allocate
from draco.allocator.nodeselect import node_selector_matches
from draco.allocator.outcome import Node
from draco.api.constants import GROUP, KIND_RESOURCE_SLICE, VERSION
from draco.api.tolerations import tolerates_any
from draco.errors import AllocationError, CELError, FieldError, InvalidObjectError
from draco.quantity import Quantity
from draco.scheduling.extendedresources import implicit_resource_name, resource_class_map
from draco.scheduling.requests import PodRequests
from draco.validation import validate_object

__all__ = [
    "API_VERSION",
    "DEVICES_ANNOTATION",
    "KIND",
    "TEMPLATE_KEY",
    "TEMPLATE_LABEL",
    "NodeTemplate",
    "NodeTemplateError",
    "claims_resources",
    "class_resource",
    "from_nodepool",
    "nodes_needed",
    "parse_template",
    "pod_resources",
    "template_refusal",
    "template_resources",
]

API_VERSION: Final = "autoscaling.resource.draco.dev/v1alpha1"
KIND: Final = "NodeTemplate"
#: The NodePool annotation holding the devices of its nodes.
DEVICES_ANNOTATION: Final = "autoscaling.resource.draco.dev/devices"
#: The label of ConfigMaps holding a node template, and the key of the template in them.
TEMPLATE_LABEL: Final = "autoscaling.resource.draco.dev/node-template"
TEMPLATE_KEY: Final = "template.yaml"
#: The NodePool's own label on the nodes it makes (Karpenter's well-known label).
NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
#: The name a template's node has while it is only thought of.
VIRTUAL_NODE: Final = "node-template"
_SPEC_FIELDS: Final = frozenset({"nodeGroup", "maxNodes", "labels", "taints", "allocatable", "devices"})
_SLICE_FIELDS: Final = frozenset({"driver", "devices", "sharedCounters"})
_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


class NodeTemplateError(InvalidObjectError):
    """A node template that cannot be used (none of it is)."""


@dataclass(frozen=True)
class NodeTemplate:
    """A new node of one node group, as the autoscaler would make it."""

    #: How messages name it: ``NodePool gpu``, ``node template gpu-a100``.
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    #: cpu, memory, pods of the new node; None: not known (a NodePool picks sizes itself).
    allocatable: Mapping[str, str] | None = None
    #: ResourceSlice specs of the new node (``driver``, ``devices``, ``sharedCounters``).
    slices: tuple[Mapping[str, Any], ...] = ()
    #: How many more nodes the group may make (None: no limit known), and why.
    headroom: int | None = None
    headroom_reason: str = ""
    #: The Karpenter NodePool it is (demand pods are steered to it by its label).
    nodepool: str | None = None

    def steering(self) -> dict[str, str]:
        """Labels that tell this group's nodes (and only them) apart."""
        if self.nodepool is not None:
            return {NODEPOOL_LABEL: self.nodepool}
        return dict(self.labels)

    def inventory(self, classes: Sequence[Mapping[str, Any]], nodes: int = 1) -> Inventory:
        """The devices of ``nodes`` new nodes (``node-template-0`` ...) over ``classes``."""
        return Inventory.build(classes=classes, slices=list(self._slices(nodes)))

    def node(self, index: int) -> Node:
        return Node(name=f"{VIRTUAL_NODE}-{index}", labels=self.labels)

    def slice_bodies(self, node: str) -> list[dict[str, Any]]:
        """The ResourceSlices a new node named ``node`` would publish (one pool per driver)."""
        return [
            _slice_body(spec, node=node, position=position, count=len(self.slices))
            for position, spec in enumerate(self.slices)
        ]

    def _slices(self, nodes: int) -> list[dict[str, Any]]:
        return [body for index in range(nodes) for body in self.slice_bodies(f"{VIRTUAL_NODE}-{index}")]


def _slice_body(spec: Mapping[str, Any], *, node: str, position: int, count: int) -> dict[str, Any]:
    driver = str(spec.get("driver", ""))
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND_RESOURCE_SLICE,
        "metadata": {"name": f"{node}-{position}"},
        "spec": {
            **spec,
            "nodeName": node,
            "pool": {"name": f"{node}-{driver}", "generation": 1, "resourceSliceCount": count},
        },
    }


# --- reading -------------------------------------------------------------------------------------


def _fail(name: str, path: str, detail: str, value: object = None) -> NodeTemplateError:
    error = FieldError(path=path, type="Invalid", detail=detail, value=value)
    return NodeTemplateError(f"{name} is invalid", errors=[error])


def _string_map(name: str, path: str, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _fail(name, path, "must be a map of strings", value)
    return {k: str(v) for k, v in value.items()}


def _taints(name: str, value: object) -> tuple[dict[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(name, "spec.taints", "must be a list of taints", value)
    taints = []
    for index, taint in enumerate(value):
        if (
            not isinstance(taint, Mapping)
            or not taint.get("key")
            or taint.get("effect") not in _TAINT_EFFECTS
        ):
            raise _fail(
                name,
                f"spec.taints[{index}]",
                "a taint needs a key and an effect (NoSchedule, PreferNoSchedule or NoExecute)",
                taint,
            )
        taints.append(
            {"key": str(taint["key"]), "value": str(taint.get("value") or ""), "effect": taint["effect"]}
        )
    return tuple(taints)


def _allocatable(name: str, value: object) -> dict[str, str] | None:
    if value is None:
        return None
    quantities = _string_map(name, "spec.allocatable", value)
    for resource, text in quantities.items():
        try:
            Quantity.parse(text)
        except ValueError:
            raise _fail(name, f"spec.allocatable[{resource}]", "not a quantity", text) from None
    return quantities


def _device_slices(name: str, value: object, *, path: str) -> tuple[dict[str, Any], ...]:
    """The template's slice specs, each checked by the ResourceSlice rules."""
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise _fail(name, path, f"not YAML: {exc}") from None
    if not isinstance(value, list) or not value:
        raise _fail(name, path, "must be a non-empty list of ResourceSlice specs (driver, devices)", value)
    slices: list[dict[str, Any]] = []
    for index, spec in enumerate(value):
        where = f"{path}[{index}]"
        if not isinstance(spec, Mapping):
            raise _fail(name, where, "must be a ResourceSlice spec (driver, devices, sharedCounters)", spec)
        unknown = sorted(set(spec) - _SLICE_FIELDS)
        if unknown:
            raise _fail(name, f"{where}.{unknown[0]}", "unknown field (nodeName and pool are the new node's)")
        if not spec.get("devices") and not spec.get("sharedCounters"):
            raise _fail(name, f"{where}.devices", "lists no device")
        body = _slice_body(spec, node=VIRTUAL_NODE, position=index, count=len(value))
        errors = validate_object(body)
        if errors:
            moved = [
                FieldError(
                    path=where + e.path.removeprefix("spec"), type=e.type, detail=e.detail, value=e.value
                )
                for e in errors
            ]
            raise NodeTemplateError(f"{name} is invalid", errors=moved)
        slices.append(dict(spec))
    return tuple(slices)


def parse_template(document: object, *, source: str) -> NodeTemplate:
    """A :data:`KIND` document (from a file or a ConfigMap), checked whole."""
    if not isinstance(document, Mapping):
        raise _fail(source, "", f"expected a {KIND} document (a map)", type(document).__name__)
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        raise _fail(
            source,
            "kind",
            f"expected apiVersion {API_VERSION} and kind {KIND}",
            f"{document.get('apiVersion')}/{document.get('kind')}",
        )
    meta_name = (document.get("metadata") or {}).get("name")
    if not isinstance(meta_name, str) or not meta_name:
        raise _fail(source, "metadata.name", "required")
    name = f"node template {meta_name}"
    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        raise _fail(name, "spec", "required")
    unknown = sorted(set(spec) - _SPEC_FIELDS)
    if unknown:
        raise _fail(
            name, f"spec.{unknown[0]}", "unknown field, expected one of " + ", ".join(sorted(_SPEC_FIELDS))
        )
    max_nodes = spec.get("maxNodes")
    if max_nodes is not None and (
        not isinstance(max_nodes, int) or isinstance(max_nodes, bool) or max_nodes < 0
    ):
        raise _fail(name, "spec.maxNodes", "must be a whole number, 0 or more", max_nodes)
    return NodeTemplate(
        name=name,
        labels=_string_map(name, "spec.labels", spec.get("labels")),
        taints=_taints(name, spec.get("taints")),
        allocatable=_allocatable(name, spec.get("allocatable")),
        slices=_device_slices(name, spec.get("devices"), path="spec.devices"),
        headroom=max_nodes,
        headroom_reason=f"spec.maxNodes is {max_nodes}" if max_nodes is not None else "",
    )


def from_nodepool(nodepool: Mapping[str, Any], *, nodes_now: int | None = None) -> NodeTemplate | None:
    """The template of a Karpenter NodePool that carries :data:`DEVICES_ANNOTATION` (None
    when it carries none). Its headroom is what ``spec.limits`` leave of
    ``status.resources``, counted in nodes (``limits.nodes``) and in the extended resources
    its devices bring (a limit on ``nvidia.com/gpu`` or ``deviceclass.resource.draco.dev/...``
    needs the per-node count: :func:`nodepool_headroom`)."""
    meta = nodepool.get("metadata") or {}
    devices = (meta.get("annotations") or {}).get(DEVICES_ANNOTATION)
    if devices is None:
        return None
    pool = str(meta.get("name", ""))
    name = f"NodePool {pool}"
    template = (nodepool.get("spec") or {}).get("template") or {}
    labels = _string_map(
        name, "spec.template.metadata.labels", (template.get("metadata") or {}).get("labels")
    )
    for requirement in (template.get("spec") or {}).get("requirements") or []:
        values = requirement.get("values") or []
        if requirement.get("operator") == "In" and len(values) == 1:
            labels.setdefault(str(requirement.get("key")), str(values[0]))
    labels[NODEPOOL_LABEL] = pool
    return NodeTemplate(
        name=name,
        labels=labels,
        taints=_taints(name, (template.get("spec") or {}).get("taints")),
        slices=_device_slices(name, devices, path=f"metadata.annotations[{DEVICES_ANNOTATION}]"),
        nodepool=pool,
    )


def nodepool_headroom(
    template: NodeTemplate, nodepool: Mapping[str, Any], per_node: Mapping[str, int]
) -> NodeTemplate:
    """``template`` with the headroom the NodePool's limits leave, in new nodes."""
    limits = (nodepool.get("spec") or {}).get("limits") or {}
    used = (nodepool.get("status") or {}).get("resources") or {}
    best: tuple[int, str] | None = None
    for resource, limit in sorted(limits.items()):
        each = 1 if resource == "nodes" else per_node.get(resource)
        if not each:
            continue  # cpu and memory depend on the instance type Karpenter picks
        try:
            left = Quantity.parse(str(limit)).value() - Quantity.parse(str(used.get(resource, "0"))).value()
        except ValueError:
            continue
        nodes = max(left, 0) // each
        if best is None or nodes < best[0]:
            best = (nodes, f"limits.{resource} is {limit}, {used.get(resource, '0')} in use")
    if best is None:
        return template
    return NodeTemplate(
        name=template.name,
        labels=template.labels,
        taints=template.taints,
        allocatable=template.allocatable,
        slices=template.slices,
        headroom=best[0],
        headroom_reason=best[1],
        nodepool=template.nodepool,
    )


# --- what a node brings, what a pod needs ---------------------------------------------------------


def class_resource(class_name: str, class_map: Mapping[str, str]) -> str | None:
    """The extended resource a demand for ``class_name`` is expressed in: the class's own
    ``extendedResourceName`` when the class holds it (what clouds' GPU instance types
    already carry: ``nvidia.com/gpu``), else ``deviceclass.resource.draco.dev/<class>``."""
    explicit = sorted(r for r, c in class_map.items() if c == class_name and "deviceclass." not in r)
    if explicit:
        return explicit[0]
    return implicit_resource_name(class_name)


def template_resources(template: NodeTemplate, classes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Extended resource -> count a new node of ``template`` would be advertised with (as
    draco's operator advertises them on Nodes: every name a class maps, its devices)."""
    inventory = template.inventory(classes)
    by_name = {str((c.get("metadata") or {}).get("name", "")): c for c in classes}
    wanted: dict[str, int] = {}
    counts: dict[str, int] = {}
    for resource, class_name in sorted(resource_class_map(classes).items()):
        if class_name not in counts:
            counts[class_name] = _class_count(inventory, by_name[class_name])
        if counts[class_name]:
            wanted[resource] = counts[class_name]
    return wanted


def _class_count(inventory: Inventory, device_class: Mapping[str, Any]) -> int:
    chain = [
        str((s.get("cel") or {}).get("expression", ""))
        for s in (device_class.get("spec") or {}).get("selectors") or []
        if (s.get("cel") or {}).get("expression")
    ]
    try:
        evaluators = [inventory.cache.evaluator(expression) for expression in chain]
        return sum(1 for device in inventory.devices if all(check(device) is True for check in evaluators))
    except CELError:
        return 0


def claims_resources(claims: Sequence[Mapping[str, Any]], class_map: Mapping[str, str]) -> dict[str, int]:
    """The extended resources that stand for the device requests of unallocated ``claims``:
    per request its class's resource (:func:`class_resource`) times its count (``All``,
    and a prioritized list's first choice, count one each; admin access counts none)."""
    wanted: dict[str, int] = {}
    for claim in claims:
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly") or next(iter(request.get("firstAvailable") or []), None) or {}
            if exactly.get("adminAccess"):
                continue
            resource = class_resource(str(exactly.get("deviceClassName", "")), class_map)
            if resource is None:
                continue
            count = (
                int(exactly.get("count") or 1)
                if exactly.get("allocationMode", "ExactCount") == "ExactCount"
                else 1
            )
            wanted[resource] = wanted.get(resource, 0) + count
    return wanted


def pod_resources(requests: PodRequests) -> dict[str, Quantity]:
    """cpu, memory and the other core resources the pod takes on a node (upstream's
    effective requests: the largest init container or the sum of the others, plus
    overhead); extended resources left out (the claims stand for the devices)."""
    long_lived: dict[str, Quantity] = {}
    init: dict[str, Quantity] = {}
    for container in requests.containers:
        target = long_lived if (not container.init or container.sidecar) else None
        for resource, text in container.requests.items():
            if "/" in resource:
                continue
            value = Quantity.parse(text)
            if target is None:
                init[resource] = max(init.get(resource, value), value, key=lambda q: q.nanos)
            else:
                target[resource] = Quantity.from_nanos(
                    target.get(resource, Quantity.parse("0")).nanos + value.nanos
                )
    total = {
        r: max(
            long_lived.get(r, Quantity.parse("0")), init.get(r, Quantity.parse("0")), key=lambda q: q.nanos
        )
        for r in set(long_lived) | set(init)
    }
    for resource, text in requests.overhead.items():
        total[resource] = Quantity.from_nanos(
            total.get(resource, Quantity.parse("0")).nanos + Quantity.parse(text).nanos
        )
    return total


# --- would it fit ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A pod as a template judges it."""

    key: str
    spec: Mapping[str, Any]
    claims: tuple[Mapping[str, Any], ...]
    resources: Mapping[str, Quantity]


def _rules_refusal(candidate: Candidate, template: NodeTemplate) -> str | None:
    spec = candidate.spec
    labels = template.labels
    selector = spec.get("nodeSelector") or {}
    for key, value in selector.items():
        if labels.get(key) != value:
            return f"its nodeSelector {key}={value} is not among the template's labels"
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or None
    if required and not node_selector_matches(required, name=VIRTUAL_NODE, labels=labels):
        return "its required node affinity does not match the template's labels"
    tolerations = spec.get("tolerations") or []
    for taint in template.taints:
        if taint["effect"] == "PreferNoSchedule":
            continue
        if not tolerates_any(
            tolerations, key=taint["key"], value=taint.get("value", ""), effect=taint["effect"]
        ):
            return f"it does not tolerate the taint {taint['key']}:{taint['effect']}"
    if template.allocatable is not None:
        for resource, need in sorted(candidate.resources.items()):
            have = template.allocatable.get(resource)
            if have is not None and Quantity.parse(have).nanos < need.nanos:
                return f"it asks for {resource} {need}, a new node has {have}"
    return None


def template_refusal(
    candidate: Candidate, template: NodeTemplate, classes: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why ``candidate`` would not fit a new node of ``template`` (None: it would)."""
    refusal = _rules_refusal(candidate, template)
    if refusal is not None or not candidate.claims:
        return refusal
    inventory = template.inventory(classes)
    try:
        outcome = allocate(inventory=inventory, node=template.node(0), claims=list(candidate.claims))
    except AllocationError as exc:
        return f"its claims cannot be allocated there: {exc}"
    except CELError as exc:
        return f"a device selector fails on the template's devices: {exc}"
    if isinstance(outcome, Allocated):
        return None
    return f"its claims do not fit the template's devices: {outcome.explanation}"


def nodes_needed(
    candidates: Sequence[Candidate],
    template: NodeTemplate,
    classes: Sequence[Mapping[str, Any]],
    *,
    apart: bool = False,
) -> int | str:
    """How many new nodes of ``template`` ``candidates`` need, placed first fit in order
    (each on the first new node whose devices, cpu and memory are left for it; ``apart``:
    one pod per node, the members' own anti-affinity); or why one of them fits none."""
    if not candidates:
        return 0
    inventory = template.inventory(classes, nodes=len(candidates))
    used: list[dict[str, int]] = []
    for candidate in candidates:
        refusal = _rules_refusal(candidate, template)
        if refusal is not None:
            return f"pod {candidate.key}: {refusal}"
        placed = False
        for index in range(len(candidates)):
            if index < len(used) and apart:
                continue
            if index > len(used):
                break
            if index < len(used) and not _room(template, used[index], candidate):
                continue
            try:
                outcome = allocate(
                    inventory=inventory, node=template.node(index), claims=list(candidate.claims)
                )
            except (AllocationError, CELError) as exc:
                return f"pod {candidate.key}: its claims cannot be allocated on the template's devices: {exc}"
            if not isinstance(outcome, Allocated):
                if index == len(used):
                    return f"pod {candidate.key}: its claims do not fit the template's devices: {outcome.explanation}"
                continue
            for claim in candidate.claims:
                key = f"{(claim.get('metadata') or {}).get('namespace', '')}/{(claim.get('metadata') or {}).get('name', '')}"
                allocation = outcome.results.json().get(key)
                if allocation is not None:
                    inventory.mark_allocated({**claim, "status": {"allocation": allocation}})
            if index == len(used):
                used.append({})
            for resource, need in candidate.resources.items():
                used[index][resource] = used[index].get(resource, 0) + need.nanos
            placed = True
            break
        if not placed:
            return f"pod {candidate.key}: fits no new node"
    return len(used)


def _room(template: NodeTemplate, used: Mapping[str, int], candidate: Candidate) -> bool:
    if template.allocatable is None:
        return True
    for resource, need in candidate.resources.items():
        have = template.allocatable.get(resource)
        if have is not None and used.get(resource, 0) + need.nanos > Quantity.parse(have).nanos:
            return False
    return True
