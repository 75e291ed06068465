"""Workload and PodGroup: the API server's rules for upstream's ``scheduling.k8s.io/v1beta1``
kinds (Kubernetes 1.37), as field errors, for draco's copies under ``scheduling.draco.dev``.

The structural pass first (unknown fields, wrong types: `schema.check_shape` over the
shapes below), then the rules: names and formats, exactly one scheduling policy and one
disruption mode, ``minCount`` at least 1, at most 8 templates, 4 claims and 1 topology
constraint, claims naming exactly one claim or template; on update, what upstream keeps
immutable (a Workload's templates may not be added or removed, a gang's ``minCount`` is the
one policy field that may change). draco's ``deviceTopology`` must name a fully qualified
device attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draco.api.constants import (
    HIGHEST_USER_DEFINABLE_PRIORITY,
    KIND_POD_GROUP,
    KIND_WORKLOAD,
    MAX_POD_GROUP_RESOURCE_CLAIMS,
    NATIVE_SCHEDULING_API_VERSION,
    POD_GROUP_TOPOLOGY_MAX,
    SCHEDULING_API_VERSION,
    WORKLOAD_MAX_POD_GROUP_TEMPLATES,
)
from draco.errors import FieldError
from draco.validation.fielderrors import (
    NO_VALUE,
    FieldPath,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    too_many,
)
from draco.validation.formats import (
    check_dns_label,
    check_dns_subdomain,
    check_fully_qualified_name,
    check_label_name,
)
from draco.validation.meta import validate_object_meta
from draco.validation.schema import INT, RAW, STRING, ListOf, Node, Obj, check_shape

__all__ = ["GROUP_API_VERSIONS", "GROUP_KINDS", "validate_group_object"]

GROUP_KINDS = (KIND_WORKLOAD, KIND_POD_GROUP)
#: draco's apiVersion and upstream's (the shapes are the same).
GROUP_API_VERSIONS = (SCHEDULING_API_VERSION, NATIVE_SCHEDULING_API_VERSION)
_PREEMPTION_POLICIES = ("Never", "PreemptLowerPriority")

_EMPTY = Obj("Empty", {})
_POLICY = Obj(
    "PodGroupSchedulingPolicy", {"basic": _EMPTY, "gang": Obj("GangSchedulingPolicy", {"minCount": INT})}
)
_CONSTRAINTS = Obj(
    "PodGroupSchedulingConstraints",
    {
        "topology": ListOf(Obj("TopologyConstraint", {"key": STRING})),
        "deviceTopology": ListOf(Obj("DeviceTopologyConstraint", {"matchAttribute": STRING})),
    },
)
_CLAIM = Obj(
    "PodGroupResourceClaim",
    {"name": STRING, "resourceClaimName": STRING, "resourceClaimTemplateName": STRING},
)
_FIELDS: dict[str, Node] = {
    "schedulingPolicy": _POLICY,
    "schedulingConstraints": _CONSTRAINTS,
    "resourceClaims": ListOf(_CLAIM),
    "disruptionMode": Obj("DisruptionMode", {"single": _EMPTY, "all": _EMPTY}),
    "priorityClassName": STRING,
    "priority": INT,
    "preemptionPolicy": STRING,
}
_TYPE_META: dict[str, Node] = {"apiVersion": STRING, "kind": STRING, "metadata": RAW}
SHAPES = {
    KIND_WORKLOAD: Obj(
        "Workload",
        {
            **_TYPE_META,
            "spec": Obj(
                "WorkloadSpec",
                {
                    "controllerRef": Obj(
                        "TypedLocalObjectReference", {"apiGroup": STRING, "kind": STRING, "name": STRING}
                    ),
                    "podGroupTemplates": ListOf(Obj("PodGroupTemplate", {"name": STRING, **_FIELDS})),
                },
            ),
        },
    ),
    KIND_POD_GROUP: Obj(
        "PodGroup",
        {
            **_TYPE_META,
            "spec": Obj(
                "PodGroupSpec",
                {
                    "workloadRef": Obj("WorkloadReference", {"workloadName": STRING, "templateName": STRING}),
                    **_FIELDS,
                },
            ),
            "status": Obj(
                "PodGroupStatus",
                {
                    "conditions": ListOf(RAW),
                    "resourceClaimStatuses": ListOf(
                        Obj("PodGroupResourceClaimStatus", {"name": STRING, "resourceClaimName": STRING})
                    ),
                },
            ),
        },
    ),
}
_SPEC = FieldPath("spec")


def validate_group_object(
    obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None, subresource: str | None = None
) -> list[FieldError]:
    """Every broken rule of a Workload or PodGroup (empty: the API server would accept it)."""
    kind = obj.get("kind")
    if obj.get("apiVersion") not in GROUP_API_VERSIONS:
        return [not_supported(FieldPath("apiVersion"), obj.get("apiVersion"), GROUP_API_VERSIONS)]
    errs = check_shape(SHAPES[str(kind)], obj, FieldPath())
    if errs or subresource == "status":
        return errs
    errs = validate_object_meta(obj.get("metadata") or {}, namespaced=True)
    spec = obj.get("spec") or {}
    old_spec = (old or {}).get("spec") if old is not None else None
    if kind == KIND_WORKLOAD:
        errs.extend(_workload(spec, old_spec))
    else:
        errs.extend(_group_fields(spec, _SPEC))
        errs.extend(_workload_ref(spec.get("workloadRef"), _SPEC.child("workloadRef")))
        if old_spec is not None:
            errs.extend(_immutable_fields(spec, old_spec, _SPEC, ("workloadRef",)))
    return errs


def _workload(spec: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    errs: list[FieldError] = []
    templates = spec.get("podGroupTemplates") or []
    path = _SPEC.child("podGroupTemplates")
    if not templates:
        errs.append(required(path, "must have at least one item"))
    if len(templates) > WORKLOAD_MAX_POD_GROUP_TEMPLATES:
        errs.append(too_many(path, len(templates), WORKLOAD_MAX_POD_GROUP_TEMPLATES))
    seen: set[str] = set()
    for i, template in enumerate(templates):
        tpath = path.index(i)
        errs.extend(_unique_name(template, tpath, seen))
        errs.extend(_group_fields(template, tpath))
    reference = spec.get("controllerRef")
    if reference is not None:
        rpath = _SPEC.child("controllerRef")
        for key in ("kind", "name"):
            if not reference.get(key):
                errs.append(required(rpath.child(key)))
        if reference.get("apiGroup"):
            errs.extend(check_dns_subdomain(str(reference["apiGroup"]), rpath.child("apiGroup")))
    if old is None:
        return errs
    if spec.get("controllerRef") != old.get("controllerRef"):
        errs.append(invalid(_SPEC.child("controllerRef"), NO_VALUE, "field is immutable"))
    before = {t.get("name"): t for t in old.get("podGroupTemplates") or []}
    if set(before) != {t.get("name") for t in templates}:
        errs.append(forbidden(path, "templates may not be added or removed"))
    for i, template in enumerate(templates):
        if template.get("name") in before:
            errs.extend(_immutable_fields(template, before[template.get("name")], path.index(i), ()))
    return errs


def _group_fields(fields: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    """The fields a PodGroupTemplate and a PodGroup share."""
    errs = _policy(fields.get("schedulingPolicy"), path.child("schedulingPolicy"))
    errs.extend(_constraints(fields.get("schedulingConstraints") or {}, path.child("schedulingConstraints")))
    errs.extend(_claims(fields.get("resourceClaims") or [], path.child("resourceClaims")))
    mode = fields.get("disruptionMode")
    if mode is not None and len([k for k in ("single", "all") if mode.get(k) is not None]) != 1:
        errs.append(
            invalid(path.child("disruptionMode"), NO_VALUE, "exactly one of `single` or `all` must be set")
        )
    if fields.get("priorityClassName"):
        errs.extend(check_dns_subdomain(str(fields["priorityClassName"]), path.child("priorityClassName")))
    priority = fields.get("priority")
    if priority is not None and priority > HIGHEST_USER_DEFINABLE_PRIORITY:
        errs.append(
            invalid(
                path.child("priority"),
                priority,
                f"must be less than or equal to {HIGHEST_USER_DEFINABLE_PRIORITY}",
            )
        )
    policy = fields.get("preemptionPolicy")
    if policy is not None and policy not in _PREEMPTION_POLICIES:
        errs.append(not_supported(path.child("preemptionPolicy"), policy, _PREEMPTION_POLICIES))
    return errs


def _policy(policy: Mapping[str, Any] | None, path: FieldPath) -> list[FieldError]:
    if policy is None:
        return [required(path)]
    chosen = [k for k in ("basic", "gang") if policy.get(k) is not None]
    if len(chosen) != 1:
        return [invalid(path, NO_VALUE, "exactly one of `basic` or `gang` must be set")]
    gang = policy.get("gang")
    if gang is not None:
        count = gang.get("minCount")
        if count is None:
            return [required(path.child("gang", "minCount"))]
        if count < 1:
            return [invalid(path.child("gang", "minCount"), count, "must be greater than or equal to 1")]
    return []


def _constraints(constraints: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    for name, key, check in (
        ("topology", "key", check_label_name),
        ("deviceTopology", "matchAttribute", check_fully_qualified_name),
    ):
        items = constraints.get(name) or []
        if len(items) > POD_GROUP_TOPOLOGY_MAX:
            errs.append(too_many(path.child(name), len(items), POD_GROUP_TOPOLOGY_MAX))
        for i, item in enumerate(items):
            value = str(item.get(key) or "")
            if not value:
                errs.append(required(path.child(name).index(i).child(key)))
            else:
                errs.extend(check(value, path.child(name).index(i).child(key)))
    return errs


def _unique_name(item: Mapping[str, Any], path: FieldPath, seen: set[str]) -> list[FieldError]:
    """An entry's ``name``: required, a DNS label, unique among `seen` (which it joins)."""
    name = str(item.get("name") or "")
    if not name:
        return [required(path.child("name"))]
    errs = check_dns_label(name, path.child("name"))
    if name in seen:
        errs.append(duplicate(path.child("name"), name))
    seen.add(name)
    return errs


def _claims(claims: list[Mapping[str, Any]], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    if len(claims) > MAX_POD_GROUP_RESOURCE_CLAIMS:
        errs.append(too_many(path, len(claims), MAX_POD_GROUP_RESOURCE_CLAIMS))
    seen: set[str] = set()
    for i, claim in enumerate(claims):
        cpath = path.index(i)
        errs.extend(_unique_name(claim, cpath, seen))
        refs = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(k)]
        if len(refs) != 1:
            errs.append(
                invalid(
                    cpath,
                    NO_VALUE,
                    "exactly one of `resourceClaimName` or `resourceClaimTemplateName` must be set",
                )
            )
        for key in refs:
            errs.extend(check_dns_subdomain(str(claim[key]), cpath.child(key)))
    return errs


def _workload_ref(reference: Mapping[str, Any] | None, path: FieldPath) -> list[FieldError]:
    if reference is None:
        return []
    errs: list[FieldError] = []
    if not reference.get("workloadName"):
        errs.append(required(path.child("workloadName")))
    else:
        errs.extend(check_dns_subdomain(str(reference["workloadName"]), path.child("workloadName")))
    if not reference.get("templateName"):
        errs.append(required(path.child("templateName")))
    else:
        errs.extend(check_dns_label(str(reference["templateName"]), path.child("templateName")))
    return errs


def _immutable_fields(
    new: Mapping[str, Any], old: Mapping[str, Any], path: FieldPath, extra: tuple[str, ...]
) -> list[FieldError]:
    """What upstream keeps immutable once written: every shared field but a gang's
    ``minCount``, the policy's choice included."""
    errs: list[FieldError] = []
    for name in (
        *extra,
        "schedulingConstraints",
        "resourceClaims",
        "disruptionMode",
        "priorityClassName",
        "priority",
        "preemptionPolicy",
    ):
        if new.get(name) != old.get(name):
            errs.append(invalid(path.child(name), NO_VALUE, "field is immutable"))
    policy, before = new.get("schedulingPolicy") or {}, old.get("schedulingPolicy") or {}
    if (policy.get("basic") is None) != (before.get("basic") is None) or (policy.get("gang") is None) != (
        before.get("gang") is None
    ):
        errs.append(
            invalid(
                path.child("schedulingPolicy"), NO_VALUE, "the policy may not change (only a gang's minCount)"
            )
        )
    return errs
