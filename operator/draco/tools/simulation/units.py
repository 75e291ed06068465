"""What ``draco simulate`` allocates together: one unit at a time, as the operator would.

A unit is one pod's claims (allocated together on one node, the pod placed there), a
claim no pod in the input uses, or the claims named with ``--claim`` (together, as one
pod's). A pod's claims are those its ``resource.draco.dev/claims`` annotation (or native
``spec.resourceClaims``) names, template entries becoming the claims the operator would
generate, plus the special claim of its extended-resource requests when a DeviceClass
maps one of them (`draco.scheduling.extendedresources`): built as the operator builds it,
or the one the pod records when the input has it. Generated names take a stable suffix
instead of the API server's random one, so the same input gives the same output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, cast

from draco.api import ResourceClaim, ResourceClaimTemplate, load_object
from draco.api.bodies import ObjView, key_of
from draco.api.constants import EXTENDED_RESOURCE_CLAIM_ANNOTATION, GROUP, POD_CLAIM_NAME_ANNOTATION, VERSION
from draco.api.corebodies import PodBody, PodSpecBody
from draco.errors import InvalidObjectError
from draco.scheduling.extendedresources import (
    build_extended_resource_claim,
    extended_resource_status,
    resource_class_map,
)
from draco.scheduling.generatedclaims import generate_claim_name
from draco.scheduling.groups import GroupPolicy, GroupRef, group_of, policy_of
from draco.scheduling.podclaims import (
    PodClaim,
    PodClaimsError,
    claim_statuses,
    parse_pod_claims,
)
from draco.scheduling.requests import pod_requests
from draco.tools.simulation.inputs import InputError, Objects

__all__ = ["GroupUnit", "Unit", "units"]


#: The API server's longest ``generateName`` base (a name of 63 less the 5 random characters).
_GENERATE_NAME_BASE: Final = 58


@dataclass
class GroupUnit:
    """A gang: its members' units, decided at once (all or nothing, `draco.scheduling.groups`)."""

    label: str
    ref: GroupRef
    policy: GroupPolicy
    members: list[Unit]
    #: Members that run already (not in the input's gated pods): they count toward minCount.
    placed: int = 0


@dataclass
class Unit:
    """What is allocated together: one pod's claims, a lone claim, or the ``--claim`` set."""

    label: str
    #: Claims of the unit without an allocation: these are allocated.
    claims: list[ResourceClaim]
    #: Claims of the unit that are allocated already: they constrain the node.
    allocated: list[ResourceClaim] = field(default_factory=list)
    #: Why the unit cannot be simulated (a missing claim or template, a broken annotation).
    problem: str | None = None
    #: The pod (its body) whose claims these are; None for claims without a pod.
    pod: ObjView | None = None


def _suffix(text: str) -> str:
    """A stable stand-in for the API server's random 5 characters."""
    return hashlib.sha256(text.encode()).hexdigest()[:5]


def _pod_entries(pod: ObjView) -> list[PodClaim]:
    """The pod's claims: draco's annotation, else the native `spec.resourceClaims`."""
    entries = parse_pod_claims(pod)
    if entries:
        return entries
    native = (pod.get("spec") or {}).get("resourceClaims") or []
    return [
        PodClaim(
            name=str(item.get("name")),
            resource_claim_name=item.get("resourceClaimName"),
            resource_claim_template_name=item.get("resourceClaimTemplateName"),
        )
        for item in native
        if isinstance(item, Mapping)
    ]


def _generated_claim(pod: ObjView, entry: PodClaim, template: ResourceClaimTemplate) -> ResourceClaim:
    metadata = pod.get("metadata") or {}
    template_data = template.to_dict()
    template_meta = (template_data.get("spec") or {}).get("metadata") or {}
    body = {
        "apiVersion": template_data.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": "ResourceClaim",
        "metadata": {
            "name": generate_claim_name(str(metadata.get("name")), entry.name)
            + _suffix(f"{key_of(pod)}/{entry.name}"),
            "namespace": metadata.get("namespace") or "default",
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": {
                **(template_meta.get("annotations") or {}),
                POD_CLAIM_NAME_ANNOTATION: entry.name,
            },
        },
        "spec": (template_data.get("spec") or {}).get("spec") or {},
    }
    if not body["metadata"]["labels"]:
        del body["metadata"]["labels"]
    model = load_object(body)
    assert isinstance(model, ResourceClaim)
    return model


def _extended_claim(pod: ObjView, class_map: Mapping[str, str]) -> ResourceClaim | None:
    """The special claim the operator creates for the pod's extended-resource requests
    (`generateName` ``<pod>-extended-resources-``); None when no class maps one of them."""
    spec = cast(PodSpecBody, pod.get("spec") or {})
    requests = pod_requests(spec)
    if not requests.asks_for_extended_resources:
        return None
    built = build_extended_resource_claim(spec, class_map, requests=requests)
    if built is None:
        return None
    metadata = pod.get("metadata") or {}
    base = f"{metadata.get('name')}-extended-resources-"[:_GENERATE_NAME_BASE]
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {
            "name": base + _suffix(f"{key_of(pod)}/extended-resources"),
            "namespace": metadata.get("namespace") or "default",
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
        },
        "spec": built.claim_spec(),
    }
    model = load_object(body)
    assert isinstance(model, ResourceClaim)
    return model


def _pod_claims(
    objects: Objects, pod: ObjView, class_map: Mapping[str, str], group_claims: Mapping[str, ResourceClaim]
) -> list[ResourceClaim]:
    """The pod's claims (see the module docstring). Raises PodClaimsError for a broken
    annotation, InputError for a claim or template the input lacks or a claim that cannot
    be built from its template, InvalidObjectError for a special claim that cannot be built.
    ``group_claims``: the pod's entries that are its PodGroup's claims, resolved."""
    metadata = pod.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "default")
    recorded = claim_statuses(pod)
    claims = []
    for entry in _pod_entries(pod):
        if entry.name in group_claims:
            claim = group_claims[entry.name]
        elif entry.resource_claim_name is not None:
            named = objects.claims.get(f"{namespace}/{entry.resource_claim_name}")
            if named is None:
                raise InputError(
                    f"claim {entry.name!r}: ResourceClaim {namespace}/{entry.resource_claim_name} "
                    "is not in the input"
                )
            claim = named
        elif recorded.get(entry.name) and f"{namespace}/{recorded[entry.name]}" in objects.claims:
            claim = objects.claims[f"{namespace}/{recorded[entry.name]}"]
        elif entry.name in recorded and recorded[entry.name] is None:
            continue  # the template's claim was deliberately skipped (upstream: no claim needed)
        else:
            template = objects.templates.get(f"{namespace}/{entry.resource_claim_template_name}")
            if template is None:
                raise InputError(
                    f"claim {entry.name!r}: ResourceClaimTemplate "
                    f"{namespace}/{entry.resource_claim_template_name} is not in the input"
                )
            try:
                claim = _generated_claim(pod, entry, template)
            except InvalidObjectError as exc:
                raise InputError(f"claim {entry.name!r}: {exc}") from None
        claims.append(claim)
    special = extended_resource_status(cast(PodBody, pod))
    if special is not None and f"{namespace}/{special.resource_claim_name}" in objects.claims:
        claims.append(objects.claims[f"{namespace}/{special.resource_claim_name}"])
    else:
        built = _extended_claim(pod, class_map)
        if built is not None:
            claims.append(built)
    return claims


def _group_of(objects: Objects, pod: ObjView) -> tuple[GroupRef, GroupPolicy] | None:
    ref = group_of(pod)
    if ref is None:
        return None
    groups = objects.coscheduling_groups if ref.convention == "coscheduling" else objects.pod_groups
    return ref, policy_of(ref, groups.get(f"{ref.namespace}/{ref.name}"))


def _group_claims(objects: Objects, pod: ObjView, made: dict[str, ResourceClaim]) -> dict[str, ResourceClaim]:
    """The pod's entries that are its draco PodGroup's claims (KEP-5729): the claim by
    name, or the one claim made for the group from the template (``made``, shared by the
    members: built once, named ``<group>-<claim>-`` and a stable suffix)."""
    found = _group_of(objects, pod)
    if found is None:
        return {}
    ref, policy = found
    claims: dict[str, ResourceClaim] = {}
    for entry_name, group_claim in policy.claims_of(_pod_entries(pod)).items():
        key = f"{ref.namespace}/{entry_name}@{ref.name}"
        if group_claim.resource_claim_name is not None:
            claim = objects.claims.get(f"{ref.namespace}/{group_claim.resource_claim_name}")
            if claim is None:
                raise InputError(
                    f"claim {entry_name!r}: ResourceClaim {ref.namespace}/{group_claim.resource_claim_name} is not in the input"
                )
        elif (
            recorded := policy.claim_statuses.get(entry_name)
        ) and f"{ref.namespace}/{recorded}" in objects.claims:
            claim = objects.claims[f"{ref.namespace}/{recorded}"]
        elif key in made:
            claim = made[key]
        else:
            template = objects.templates.get(f"{ref.namespace}/{group_claim.resource_claim_template_name}")
            if template is None:
                raise InputError(
                    f"claim {entry_name!r} of {ref.describe()}: ResourceClaimTemplate "
                    f"{ref.namespace}/{group_claim.resource_claim_template_name} is not in the input"
                )
            owner = {"metadata": {"namespace": ref.namespace, "name": ref.name}}
            claim = made[key] = _generated_claim(owner, PodClaim(name=entry_name), template)
        claims[entry_name] = claim
    return claims


def _pod_unit(
    objects: Objects, pod: ObjView, class_map: Mapping[str, str], made: dict[str, ResourceClaim] | None = None
) -> Unit:
    unit = Unit(label=f"pod {key_of(pod)}", claims=[], pod=pod)
    try:
        claims = _pod_claims(
            objects, pod, class_map, _group_claims(objects, pod, {} if made is None else made)
        )
    except (PodClaimsError, InputError, InvalidObjectError) as exc:
        unit.problem = str(exc)
        return unit
    for claim in claims:
        (unit.allocated if claim.is_allocated else unit.claims).append(claim)
    return unit


def _gangs(objects: Objects, found: list[Unit]) -> list[Unit | GroupUnit]:
    """The pod units whose pods are in a gang gathered into one unit per group, where its
    first member was (a basic group's pods, and a gang that runs already, stay single)."""
    result: list[Unit | GroupUnit] = []
    gangs: dict[str, GroupUnit] = {}
    for unit in found:
        group = _group_of(objects, unit.pod) if unit.pod is not None else None
        if group is None or (group[1].min_count is None and group[1].problem is None):
            result.append(unit)
            continue
        ref, policy = group
        gang = gangs.get(ref.key)
        if gang is None:
            gang = gangs[ref.key] = GroupUnit(f"group {ref.key}", ref, policy, [])
            result.append(gang)
        gang.members.append(unit)
    for gang in gangs.values():
        gang.placed = sum(
            1
            for pod in objects.pods
            if group_of(pod) == gang.ref
            and all(unit.pod is not pod for unit in gang.members)
            and (pod.get("spec") or {}).get("nodeName")
        )
    return result


def units(objects: Objects, *, pods: Sequence[str], claims: Sequence[str]) -> list[Unit | GroupUnit]:
    """The units to allocate, in order: the ``claims`` together, else the ``pods``, else
    every pod with a claim to allocate (by creation) and then every claim without a pod."""
    if claims:
        missing = [key for key in claims if key not in objects.claims]
        if missing:
            raise InputError(
                "no ResourceClaim "
                + ", ".join(missing)
                + " in the input; name claims as NAMESPACE/NAME (known: "
                + (", ".join(sorted(objects.claims)) or "none")
                + ")"
            )
        chosen = list(dict.fromkeys(claims))
        return [Unit(label="claims " + ", ".join(chosen), claims=[objects.claims[k] for k in chosen])]
    class_map = resource_class_map([device_class.to_dict() for device_class in objects.classes])
    by_key = {key_of(pod): pod for pod in objects.pods}
    if pods:
        missing = [key for key in pods if key not in by_key]
        if missing:
            raise InputError(
                "no Pod "
                + ", ".join(missing)
                + " in the input; name pods as NAMESPACE/NAME (known: "
                + (", ".join(sorted(by_key)) or "none")
                + ")"
            )
        made: dict[str, ResourceClaim] = {}
        return _gangs(
            objects, [_pod_unit(objects, by_key[key], class_map, made) for key in dict.fromkeys(pods)]
        )
    found = []
    used: set[str] = set()
    made = {}
    ordered = sorted(
        objects.pods, key=lambda pod: str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    )
    for pod in ordered:
        unit = _pod_unit(objects, pod, class_map, made)
        used.update(claim.key for claim in [*unit.claims, *unit.allocated])
        member = group_of(pod) is not None and not (pod.get("spec") or {}).get("nodeName")
        if unit.claims or unit.problem or member:
            found.append(unit)
    for key, claim in objects.claims.items():
        if key not in used and not claim.is_allocated:
            found.append(Unit(label=f"claim {key}", claims=[claim]))
    if not found:
        raise InputError(
            "nothing to allocate: every ResourceClaim in the input is allocated and no Pod waits for "
            "one (or for an extended resource a DeviceClass maps); name a claim with --claim NS/NAME "
            "(did `kubectl get` fetch draco's kinds? name them in full, e.g. "
            "resourceclaims.resource.draco.dev, or all five as `draco`)"
        )
    return _gangs(objects, found)
