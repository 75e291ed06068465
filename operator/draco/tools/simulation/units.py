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
from typing import Any, Final, cast

from draco.api import ResourceClaim, ResourceClaimTemplate, load_object
from draco.api.constants import EXTENDED_RESOURCE_CLAIM_ANNOTATION, GROUP, POD_CLAIM_NAME_ANNOTATION, VERSION
from draco.api.corebodies import PodBody, PodSpecBody
from draco.errors import InvalidObjectError
from draco.scheduling.extendedresources import (
    build_extended_resource_claim,
    extended_resource_status,
    resource_class_map,
)
from draco.scheduling.podclaims import (
    PodClaim,
    PodClaimsError,
    claim_statuses,
    generate_claim_name,
    parse_pod_claims,
)
from draco.scheduling.requests import pod_requests
from draco.tools.simulation.inputs import InputError, Objects, claim_key, object_key

__all__ = ["Unit", "units"]

Obj = Mapping[str, Any]

#: The API server's longest ``generateName`` base (a name of 63 less the 5 random characters).
_GENERATE_NAME_BASE: Final = 58


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
    pod: Obj | None = None


def _suffix(text: str) -> str:
    """A stable stand-in for the API server's random 5 characters."""
    return hashlib.sha256(text.encode()).hexdigest()[:5]


def _pod_entries(pod: Obj) -> list[PodClaim]:
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


def _generated_claim(pod: Obj, entry: PodClaim, template: ResourceClaimTemplate) -> ResourceClaim:
    metadata = pod.get("metadata") or {}
    template_data = template.to_dict()
    template_meta = (template_data.get("spec") or {}).get("metadata") or {}
    body = {
        "apiVersion": template_data.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": "ResourceClaim",
        "metadata": {
            "name": generate_claim_name(str(metadata.get("name")), entry.name)
            + _suffix(f"{object_key(metadata)}/{entry.name}"),
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


def _extended_claim(pod: Obj, class_map: Mapping[str, str]) -> ResourceClaim | None:
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
            "name": base + _suffix(f"{object_key(metadata)}/extended-resources"),
            "namespace": metadata.get("namespace") or "default",
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
        },
        "spec": built.claim_spec(),
    }
    model = load_object(body)
    assert isinstance(model, ResourceClaim)
    return model


def _pod_claims(objects: Objects, pod: Obj, class_map: Mapping[str, str]) -> list[ResourceClaim]:
    """The pod's claims (see the module docstring). Raises PodClaimsError for a broken
    annotation, InputError for a claim or template the input lacks or a claim that cannot
    be built from its template, InvalidObjectError for a special claim that cannot be built."""
    metadata = pod.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "default")
    recorded = claim_statuses(pod)
    claims = []
    for entry in _pod_entries(pod):
        if entry.resource_claim_name is not None:
            claim = objects.claims.get(f"{namespace}/{entry.resource_claim_name}")
            if claim is None:
                raise InputError(
                    f"claim {entry.name!r}: ResourceClaim {namespace}/{entry.resource_claim_name} "
                    "is not in the input"
                )
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


def _pod_unit(objects: Objects, pod: Obj, class_map: Mapping[str, str]) -> Unit:
    unit = Unit(label=f"pod {object_key(pod.get('metadata') or {})}", claims=[], pod=pod)
    try:
        claims = _pod_claims(objects, pod, class_map)
    except (PodClaimsError, InputError, InvalidObjectError) as exc:
        unit.problem = str(exc)
        return unit
    for claim in claims:
        (unit.allocated if claim.is_allocated else unit.claims).append(claim)
    return unit


def units(objects: Objects, *, pods: Sequence[str], claims: Sequence[str]) -> list[Unit]:
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
    by_key = {object_key(pod.get("metadata") or {}): pod for pod in objects.pods}
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
        return [_pod_unit(objects, by_key[key], class_map) for key in dict.fromkeys(pods)]
    found = []
    used: set[str] = set()
    ordered = sorted(
        objects.pods, key=lambda pod: str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    )
    for pod in ordered:
        unit = _pod_unit(objects, pod, class_map)
        used.update(claim_key(claim) for claim in [*unit.claims, *unit.allocated])
        if unit.claims or unit.problem:
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
    return found
