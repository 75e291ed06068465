"""What the pod-mutating webhook does to a pod on CREATE, as a JSONPatch (pure, no I/O).

Two things, both idempotent (a pod already mutated gets an empty patch):

- **Translate the native shape** (only when asked: where native DRA does not serve the
  pod). `spec.resourceClaims` entries become entries of draco's claims annotation, with
  `containers:` naming the containers (and `{name, request}` for upstream's
  `containers[].resources.claims[].request`) that reference each claim; init containers
  count as containers. A claim no container references gets `containers: []`: allocated
  and reserved, injected nowhere, as upstream does. The native fields are removed, since
  the stock scheduler would otherwise wait for a native ResourceClaim that never exists.
  Entries already in the annotation win over native entries of the same name. Kubernetes
  1.30's shape (`source: {resourceClaimName | resourceClaimTemplateName}`) is read too.
- **Warn about entries that name nothing** (`native_claim_warnings`): a kube-apiserver
  before 1.31 decodes today's shape (`resourceClaimTemplateName` beside `name`) into its
  own, which has no such field, so the webhook receives `{name, source: {}}`. Such an
  entry is not translated (there is no claim to name) and the review carries a warning
  that kubectl prints, instead of a pod that silently lost its claim.
- **Add the scheduling gate** `resource.draco.dev/allocation` to a pod that names claims in
  the annotation (after translation), asks for an extended resource that a DeviceClass
  backs (`extended_resources`: resource name → class name, from
  `draco.scheduling.extendedresources.resource_class_map`), or is in a draco PodGroup
  (the label `scheduling.draco.dev/pod-group`: the group is placed whole, claims or not).

And on UPDATE (`reapply_patch`), only where it translates: `kubectl apply` of the same
manifest again compares the manifest with the live pod, finds the native fields the
translation removed and sends them back, which the API server would refuse (a pod's claims
are immutable: "spec: Forbidden"). When the native fields of the update say exactly what
the pod's claims annotation already says (each native entry translates to the annotation's
entry of that name), they are removed again and the annotation kept, so the update changes
nothing there. Anything else (a claim added or changed) is left for the API server to refuse.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from draco.api.constants import (
    CLAIMS_ANNOTATION,
    DEFAULT_SCHEDULER_NAME,
    POD_GROUP_LABEL,
    SCHEDULER_NAME,
    SCHEDULING_GATE,
)
from draco.errors import PodClaimsError
from draco.scheduling.demand import DEMAND_SCHEDULER
from draco.scheduling.podclaims import PodClaim, parse_claims_annotation
from draco.scheduling.requests import resource_names

__all__ = [
    "POD_BINDINGS",
    "PodBinding",
    "changed_claims_warnings",
    "native_claim_warnings",
    "pod_patch",
    "reapply_patch",
    "requested_resource_names",
]

#: Who binds a pod the webhook hands to draco: kube-scheduler (draco's gate; draco pins the
#: pod and un-gates it) or draco itself (the pod names draco as its scheduler).
PodBinding = Literal["kube-scheduler", "draco"]
POD_BINDINGS: Final[tuple[PodBinding, ...]] = ("kube-scheduler", "draco")

_CONTAINER_LISTS = ("initContainers", "containers")
_SOURCE_FIELDS = ("resourceClaimName", "resourceClaimTemplateName")


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def requested_resource_names(pod: Mapping[str, Any]) -> set[str]:
    """Every resource name the pod's (init) containers request or limit."""
    return resource_names(pod.get("spec") or {})


def _native_entries(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The native `spec.resourceClaims` as annotation entries, with their containers."""
    users: dict[str, list[Any]] = {}
    for key in _CONTAINER_LISTS:
        for container in spec.get(key) or ():
            cname = str(container.get("name", ""))
            for ref in (container.get("resources") or {}).get("claims") or ():
                claim = str(ref.get("name", ""))
                request = ref.get("request")
                users.setdefault(claim, []).append({"name": cname, "request": request} if request else cname)
    entries: list[dict[str, Any]] = []
    for native in spec.get("resourceClaims") or ():
        source = _claim_source(native)
        if not source:
            continue  # names nothing: see native_claim_warnings
        entry: dict[str, Any] = {"name": native.get("name"), **source}
        entry["containers"] = users.get(str(native.get("name")), [])
        entries.append(entry)
    return entries


def _claim_source(native: Mapping[str, Any]) -> dict[str, Any]:
    """`{resourceClaimName | resourceClaimTemplateName: ...}` of a native entry, in the
    current shape or in Kubernetes 1.30's (under `source`); {} when it names nothing."""
    source = native.get("source")
    for where in (native, source if isinstance(source, Mapping) else {}):
        found = {f: where[f] for f in _SOURCE_FIELDS if where.get(f) is not None}
        if found:
            return found
    return {}


def native_claim_warnings(pod: Mapping[str, Any], *, path: str = "spec") -> list[str]:
    """Admission warnings (kubectl prints them) for `spec.resourceClaims` entries that name
    no claim and no template; `path`: where the pod spec is (a workload's template's)."""
    warnings: list[str] = []
    for index, native in enumerate((pod.get("spec") or {}).get("resourceClaims") or ()):
        if isinstance(native, Mapping) and not _claim_source(native):
            warnings.append(
                f"{path}.resourceClaims[{index}] ({native.get('name')}): names neither a "
                "resourceClaimName nor a resourceClaimTemplateName as this API server received "
                "it, so draco cannot allocate it and the pod runs without it. Kubernetes before "
                "1.31 drops those fields of the current shape: write the claim in the "
                f"annotation {CLAIMS_ANNOTATION} (docs/pods.md) or in 1.30's shape "
                "(source: {resourceClaimTemplateName: ...})"
            )
    return warnings


def pod_patch(
    pod: Mapping[str, Any],
    *,
    extended_resources: Mapping[str, str],
    translate: bool,
    native_wins: bool = False,
    binding: PodBinding = "kube-scheduler",
) -> list[dict[str, Any]]:
    """The RFC 6902 operations for `pod` ([] when nothing changes). `native_wins`: a native
    entry replaces the annotation's entry of the same name (a workload's template, whose
    claims may change; a pod's may not, and there the annotation wins). `binding`: who
    binds the pod once draco placed it (`POD_BINDINGS`)."""
    ops: list[dict[str, Any]] = []
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") == DEMAND_SCHEDULER:
        return ops  # a demand pod asks autoscalers for a node and is never placed (docs/autoscaling.md)
    raw = annotations.get(CLAIMS_ANNOTATION)
    names_claims = raw is not None
    natives = _native_entries(spec) if translate else []
    if natives:
        existing: list[dict[str, Any]] = []
        try:
            existing = [c.to_json() for c in parse_claims_annotation(str(raw))] if raw is not None else []
        except PodClaimsError:
            existing = []  # a broken annotation is the operator's to report; leave it as is
        else:
            taken = {e["name"] for e in existing}
            if native_wins:
                replacing = {e["name"]: e for e in natives if e["name"] in taken}
                merged = [replacing.get(e["name"], e) for e in existing]
            else:
                merged = list(existing)
            merged += [e for e in natives if e["name"] not in taken]
            value = json.dumps(merged, separators=(",", ":"))
            if not annotations:
                ops.append(
                    {"op": "add", "path": "/metadata/annotations", "value": {CLAIMS_ANNOTATION: value}}
                )
            else:
                path = f"/metadata/annotations/{_pointer(CLAIMS_ANNOTATION)}"
                ops.append({"op": "add", "path": path, "value": value})
            names_claims = True
            ops.extend(_native_removals(spec))
    in_group = POD_GROUP_LABEL in (metadata.get("labels") or {})  # placed with its draco PodGroup
    wants_gate = (
        names_claims or in_group or any(name in extended_resources for name in requested_resource_names(pod))
    )
    gates = spec.get("schedulingGates") or []
    scheduler = spec.get("schedulerName")
    if wants_gate and binding == "draco" and scheduler in (None, "", DEFAULT_SCHEDULER_NAME):
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER_NAME})
        scheduler = SCHEDULER_NAME
    if wants_gate and scheduler == SCHEDULER_NAME:
        # draco binds it: kube-scheduler leaves a pod that names another scheduler alone,
        # so no gate is needed (a gate would even make the binding fail). A gate that came
        # with a workload's template goes.
        ops.extend(
            {"op": "remove", "path": f"/spec/schedulingGates/{index}"}
            for index in reversed(range(len(gates)))
            if gates[index].get("name") == SCHEDULING_GATE
        )
        return ops
    if wants_gate and not any(g.get("name") == SCHEDULING_GATE for g in gates):
        if "schedulingGates" in spec and isinstance(spec["schedulingGates"], list):
            ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": SCHEDULING_GATE}})
        else:
            ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]})
    return ops


def _native_removals(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Remove `spec.resourceClaims` and every container's `resources.claims`."""
    ops: list[dict[str, Any]] = [{"op": "remove", "path": "/spec/resourceClaims"}]
    for key in _CONTAINER_LISTS:
        for index, container in enumerate(spec.get(key) or ()):
            if "claims" in (container.get("resources") or {}):
                ops.append({"op": "remove", "path": f"/spec/{key}/{index}/resources/claims"})
    return ops


def _reapplied(pod: Mapping[str, Any], old: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """For an UPDATE that brings native claims back to a translated pod: the claims
    annotation `old` carries and the names of the native entries that say something else
    than it; None for any other update."""
    spec = pod.get("spec") or {}
    if not spec.get("resourceClaims") or (old.get("spec") or {}).get("resourceClaims"):
        return None
    old_raw = ((old.get("metadata") or {}).get("annotations") or {}).get(CLAIMS_ANNOTATION)
    if old_raw is None:
        return None
    try:
        recorded: dict[str, PodClaim] = {c.name: c for c in parse_claims_annotation(str(old_raw))}
        native = parse_claims_annotation(json.dumps(_native_entries(spec)))
    except PodClaimsError:
        return None
    return str(old_raw), [entry.name for entry in native if recorded.get(entry.name) != entry]


def changed_claims_warnings(pod: Mapping[str, Any], *, old: Mapping[str, Any]) -> list[str]:
    """An admission warning for an UPDATE that changes a translated pod's claims: 1.34+ (or
    the DynamicResourceAllocation gate on) refuses it, but before that the API server drops
    the field and the update succeeds without the change, which kubectl would not show."""
    found = _reapplied(pod, old)
    if found is None or not found[1]:
        return []
    return [
        f"spec.resourceClaims ({', '.join(found[1])}): differ from the claims this pod was created "
        f"with (annotation {CLAIMS_ANNOTATION}), and a pod's claims cannot change: the pod keeps "
        "its claims. Delete and recreate the pod to change them"
    ]


def reapply_patch(pod: Mapping[str, Any], *, old: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 operations for an UPDATE of `old` to `pod` ([] when nothing changes):
    see "And on UPDATE" in the module docstring."""
    found = _reapplied(pod, old)
    if found is None:
        return []
    old_raw, changed = found
    if changed:
        return []  # a change of the pod's claims: the API server refuses it (or drops it)
    spec = pod.get("spec") or {}
    ops = _native_removals(spec)
    annotations = (pod.get("metadata") or {}).get("annotations")
    if not annotations:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {CLAIMS_ANNOTATION: old_raw}})
    elif annotations.get(CLAIMS_ANNOTATION) != old_raw:
        ops.append(
            {"op": "add", "path": f"/metadata/annotations/{_pointer(CLAIMS_ANNOTATION)}", "value": old_raw}
        )
    return ops
