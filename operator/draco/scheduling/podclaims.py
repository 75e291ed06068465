"""A pod's claims, as draco spells them: the `resource.draco.dev/claims` annotation.

A core Pod cannot reference a custom resource in `spec.resourceClaims`, so a pod lists its
claims in an annotation with the same fields (plus the containers that get each claim), and
the names of claims generated from templates are recorded in a second annotation,
`resource.draco.dev/claim-statuses` (the role of `status.resourceClaimStatuses`). This
module is the pure part of that contract, shared by the lifecycle and scheduling services:
parse both annotations, resolve a pod claim to a claim name the way upstream's
`resourceclaim.Name` does (with the owner check), and the pod predicates the resourceclaim
controller uses (done, bound, reserved). The claims generated from templates are made in
`generatedclaims.py` (upstream's names, truncated in proportion to 57 characters).

"Bound" keeps upstream's meaning, `spec.nodeName` set. A pod un-gated by draco but not yet
bound by kube-scheduler is not bound; if it is being deleted it counts as done, which is safe
because the API server refuses to bind a pod that is being deleted.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from draco.api.bodies import (
    ReferenceBody,
    ResourceClaimBody,
    ResourceClaimSpecBody,
    key_of,
    meta_of,
)
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    KIND_POD_GROUP,
    POD_CLAIM_NAME_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_RESOURCE,
    SCHEDULER_NAME,
    SCHEDULING_GATE,
    SCHEDULING_GROUP,
)
from draco.api.corebodies import PodBody
from draco.errors import ClaimNotCreatedError, FieldError, PodClaimsError

__all__ = [
    "ClaimNotCreatedError",
    "PodClaim",
    "PodClaimsError",
    "ResolvedClaim",
    "bound_by_draco",
    "claim_statuses",
    "claim_statuses_annotation",
    "controller_group_uid",
    "controller_pod_name",
    "controller_pod_uid",
    "device_class_names",
    "group_reference",
    "is_claim_for_entry",
    "is_controlled_by_pod",
    "is_group_reference",
    "is_pod_bound",
    "is_pod_done",
    "is_reserved_for",
    "names_claims",
    "parse_claims_annotation",
    "parse_pod_claims",
    "pod_reference",
    "resolve_claim",
    "resolve_claims",
    "waits_for_draco",
]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ENTRY_FIELDS: Final = frozenset({"name", "resourceClaimName", "resourceClaimTemplateName", "containers"})


#: How many claims one pod may name. The pod API sets no limit on `spec.resourceClaims`,
#: but every claim draco creates or allocates for a pod is API work done at once: without a
#: cap one pod could make the operator create hundreds of claims in one sync.
MAX_CLAIMS_PER_POD: Final = 64


@dataclass(frozen=True)
class PodClaim:
    """One entry of the claims annotation (a `spec.resourceClaims[]` entry plus containers)."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None
    #: The containers that get this claim; None means all of them.
    containers: tuple[str, ...] | None = None
    #: ``(container, request)`` pairs from entries ``{name: <container>, request: <req>}``:
    #: a container named only in such pairs gets only the devices of those requests
    #: (upstream's ``containers[].resources.claims[].request``); a container named plainly
    #: in ``containers`` gets the whole claim.
    container_requests: tuple[tuple[str, str], ...] = ()

    def gives_to(self, container: str) -> bool:
        """The claim (all of it, or some of its requests) goes to ``container``."""
        return self.containers is None or container in self.containers

    def requests_for(self, container: str) -> frozenset[str] | None:
        """The requests whose devices ``container`` gets; None means the whole claim."""
        if self.containers is None:
            return None
        restricted = frozenset(r for c, r in self.container_requests if c == container)
        if not restricted or self.containers.count(container) > sum(
            1 for c, _ in self.container_requests if c == container
        ):
            return None  # named plainly (as well): the whole claim
        return restricted

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.name}
        if self.resource_claim_name is not None:
            entry["resourceClaimName"] = self.resource_claim_name
        if self.resource_claim_template_name is not None:
            entry["resourceClaimTemplateName"] = self.resource_claim_template_name
        if self.containers is not None:
            pairs = list(self.container_requests)
            listed: list[Any] = []
            for name in self.containers:
                match = next((p for p in pairs if p[0] == name), None)
                if match is not None:
                    pairs.remove(match)
                    listed.append({"name": name, "request": match[1]})
                else:
                    listed.append(name)
            entry["containers"] = listed
        return entry


@dataclass(frozen=True)
class ResolvedClaim:
    """Where a pod claim points: `claim_name` None means "no claim needed, skip it".

    `check_owner` is True for generated claims: the claim must be controlled by the pod, or
    it is somebody else's claim that happens to be recorded in the annotation.
    """

    pod_claim: PodClaim
    claim_name: str | None
    check_owner: bool
    #: The claim is the pod's group's (KEP-5729): reserved for the PodGroup, not the pod.
    for_group: bool = False


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return meta_of(pod).get("annotations") or {}


def names_claims(pod: Mapping[str, Any]) -> bool:
    """Whether the pod carries the claims annotation at all (valid or not)."""
    return CLAIMS_ANNOTATION in _annotations(pod)


def parse_pod_claims(pod: Mapping[str, Any]) -> list[PodClaim]:
    """The pod's claims, in annotation order; [] without the annotation.

    Raises `PodClaimsError` naming every broken entry when the annotation is not a YAML or
    JSON list of `{name, resourceClaimName | resourceClaimTemplateName, containers?}`.
    """
    raw = _annotations(pod).get(CLAIMS_ANNOTATION)
    if raw is None:
        return []
    return parse_claims_annotation(str(raw))


def parse_claims_annotation(raw: str) -> list[PodClaim]:
    """Parse the text of a `resource.draco.dev/claims` annotation (see `parse_pod_claims`)."""
    return list(_parse_claims_annotation(raw))


# Every watch event of a pod re-reads its annotation, and a Job's pods share the same
# text: parsing YAML was the largest single cost of the operator under load. Results are
# immutable (frozen PodClaims in a tuple); errors are not cached and are raised each time.
@functools.lru_cache(maxsize=4096)
def _parse_claims_annotation(raw: str) -> tuple[PodClaim, ...]:
    where = f"metadata.annotations[{CLAIMS_ANNOTATION}]"
    try:
        data = yaml.safe_load(raw) if raw.strip() else []
    except yaml.YAMLError as exc:
        raise PodClaimsError(
            f"annotation {CLAIMS_ANNOTATION} is not valid YAML or JSON",
            errors=[FieldError(where, "Invalid", f"cannot parse: {str(exc).splitlines()[0]}")],
        ) from None
    if data is None:
        return ()
    if not isinstance(data, list):
        raise PodClaimsError(
            f"annotation {CLAIMS_ANNOTATION} must be a list of claims",
            errors=[
                FieldError(
                    where,
                    "Invalid",
                    "expected a list of {name, resourceClaimName | resourceClaimTemplateName}",
                )
            ],
        )
    if len(data) > MAX_CLAIMS_PER_POD:
        raise PodClaimsError(
            f"annotation {CLAIMS_ANNOTATION} names {len(data)} claims; a pod may use at most "
            f"{MAX_CLAIMS_PER_POD}",
            errors=[
                FieldError(
                    where,
                    "TooMany",
                    f"must have at most {MAX_CLAIMS_PER_POD} items: combine requests into fewer claims "
                    "(a claim holds up to 32 requests)",
                    len(data),
                )
            ],
        )
    errors: list[FieldError] = []
    claims: list[PodClaim] = []
    seen: set[str] = set()
    for index, entry in enumerate(data):
        path = f"{where}[{index}]"
        if not isinstance(entry, dict):
            errors.append(FieldError(path, "Invalid", "each entry must be a mapping with a name"))
            continue
        claim = _parse_entry(entry, path=path, errors=errors)
        if claim is None:
            continue
        if claim.name in seen:
            errors.append(
                FieldError(
                    f"{path}.name", "Duplicate", f"claim name {claim.name!r} is used twice", claim.name
                )
            )
            continue
        seen.add(claim.name)
        claims.append(claim)
    if errors:
        raise PodClaimsError(f"annotation {CLAIMS_ANNOTATION} is invalid", errors=errors)
    return tuple(claims)


def _parse_entry(entry: dict[Any, Any], *, path: str, errors: list[FieldError]) -> PodClaim | None:
    before = len(errors)
    for unknown in sorted(str(k) for k in entry if k not in _ENTRY_FIELDS):
        errors.append(
            FieldError(
                f"{path}.{unknown}",
                "NotSupported",
                "unknown field: use name, resourceClaimName, resourceClaimTemplateName, containers",
            )
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(f"{path}.name", "Required", "every claim needs a name"))
    elif len(name) > 63 or not _DNS_LABEL.match(name):
        errors.append(
            FieldError(f"{path}.name", "Invalid", "must be a DNS label (lower case, digits, '-')", name)
        )
    by_name = entry.get("resourceClaimName")
    by_template = entry.get("resourceClaimTemplateName")
    if (by_name is None) == (by_template is None):
        errors.append(
            FieldError(
                path, "Invalid", "exactly one of resourceClaimName or resourceClaimTemplateName must be set"
            )
        )
    for field, value in (("resourceClaimName", by_name), ("resourceClaimTemplateName", by_template)):
        if value is not None and (
            not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.match(value)
        ):
            errors.append(
                FieldError(f"{path}.{field}", "Invalid", "must be a DNS subdomain (an object name)", value)
            )
    containers = entry.get("containers")
    names: list[str] = []
    pairs: list[tuple[str, str]] = []
    if containers is not None:
        if not isinstance(containers, list):
            containers = [containers]
            errors.append(
                FieldError(
                    f"{path}.containers",
                    "Invalid",
                    "must be a list of container names or {name, request} mappings",
                    entry.get("containers"),
                )
            )
        for index, item in enumerate(containers):
            item_path = f"{path}.containers[{index}]"
            if isinstance(item, str) and item:
                names.append(item)
            elif isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
                extra = sorted(str(k) for k in item if k not in ("name", "request"))
                request = item.get("request")
                if extra:
                    errors.append(
                        FieldError(
                            f"{item_path}.{extra[0]}", "NotSupported", "unknown field: use name, request"
                        )
                    )
                if request is None or request == "":
                    names.append(item["name"])
                elif isinstance(request, str) and len(request) <= 63 and _DNS_LABEL.match(request):
                    names.append(item["name"])
                    pairs.append((item["name"], request))
                else:
                    errors.append(
                        FieldError(
                            f"{item_path}.request", "Invalid", "must be a request name (a DNS label)", request
                        )
                    )
            else:
                errors.append(
                    FieldError(item_path, "Invalid", "must be a container name or {name, request}", item)
                )
    if len(errors) > before:
        return None
    return PodClaim(
        name=str(name),
        resource_claim_name=by_name,
        resource_claim_template_name=by_template,
        containers=tuple(names) if containers is not None else None,
        container_requests=tuple(pairs),
    )


def claim_statuses(pod: Mapping[str, Any]) -> dict[str, str | None]:
    """The pod's `claim-statuses` annotation: pod claim name → generated claim name (None:
    no claim needed). A missing or unreadable annotation is empty: the lifecycle rewrites it."""
    raw = _annotations(pod).get(CLAIM_STATUSES_ANNOTATION)
    if not raw:
        return {}
    try:
        data = json.loads(str(raw))
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k): (str(v) if v is not None else None)
        for k, v in data.items()
        if v is None or isinstance(v, str)
    }


def claim_statuses_annotation(statuses: Mapping[str, str | None]) -> str:
    """The annotation value for `statuses` (compact JSON, keys sorted so rewrites are stable)."""
    return json.dumps(dict(sorted(statuses.items())), separators=(",", ":"))


def resolve_claim(
    pod: Mapping[str, Any],
    pod_claim: PodClaim,
    *,
    statuses: Mapping[str, str | None] | None = None,
    group_claims: Mapping[str, str | None] | None = None,
) -> ResolvedClaim:
    """The claim a pod claim refers to (upstream `resourceclaim.Name`).

    An entry that is its PodGroup's (``group_claims``: entry name -> the group's claim, None
    while it is not made yet): the group's claim. By name: that name, no owner check. From
    a template: the name recorded in the claim-statuses annotation, to be owner-checked;
    `ClaimNotCreatedError` when nothing is recorded yet.
    """
    if group_claims is not None and pod_claim.name in group_claims:
        name = group_claims[pod_claim.name]
        if name is None:
            raise ClaimNotCreatedError(
                f"pod {key_of(pod)}: claim {pod_claim.name!r} is its PodGroup's: ResourceClaim not created yet"
            )
        return ResolvedClaim(pod_claim, name, check_owner=False, for_group=True)
    if pod_claim.resource_claim_name is not None:
        return ResolvedClaim(pod_claim, pod_claim.resource_claim_name, check_owner=False)
    recorded = claim_statuses(pod) if statuses is None else statuses
    if pod_claim.name not in recorded:
        raise ClaimNotCreatedError(
            f"pod {key_of(pod)}: claim {pod_claim.name!r} from template "
            f"{pod_claim.resource_claim_template_name!r}: ResourceClaim not created yet"
        )
    return ResolvedClaim(pod_claim, recorded[pod_claim.name], check_owner=True)


def resolve_claims(pod: Mapping[str, Any]) -> list[ResolvedClaim]:
    """Every claim of the pod resolved; raises `PodClaimsError` or `ClaimNotCreatedError`."""
    statuses = claim_statuses(pod)
    return [resolve_claim(pod, entry, statuses=statuses) for entry in parse_pod_claims(pod)]


def is_controlled_by_pod(claim: ResourceClaimBody, pod: PodBody) -> bool:
    """The claim's controller owner reference is this pod (apiVersion v1, kind Pod, same
    UID), or the draco PodGroup the pod belongs to (a claim made from the group's template,
    which each member names as its own)."""
    uid = meta_of(pod).get("uid")
    if uid is not None and controller_pod_uid(claim) == uid:
        return True
    group = (meta_of(pod).get("labels") or {}).get(POD_GROUP_LABEL)
    return bool(group) and _controller_group(claim) == group


def is_claim_for_entry(claim: ResourceClaimBody, pod: PodBody, entry_name: str) -> bool:
    """Whether the claim recorded for the pod's template entry ``entry_name`` still is its
    claim: the pod (or its draco PodGroup) controls it, and it was generated for that entry
    (its pod-claim-name annotation, where it has one). Anything else is a stale record (a
    claim of a deleted pod of the same name, a user's claim, the pod's claim of another
    entry): upstream's handleClaim then makes a new claim and records that one instead."""
    made_for = (meta_of(claim).get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
    return is_controlled_by_pod(claim, pod) and made_for in (None, entry_name)


def _is_group_owner(ref: Mapping[str, Any]) -> bool:
    return (
        ref.get("controller") is True
        and str(ref.get("apiVersion", "")).split("/", 1)[0] == SCHEDULING_GROUP
        and ref.get("kind") == KIND_POD_GROUP
    )


def _controller_group(claim: Mapping[str, Any]) -> str | None:
    for ref in meta_of(claim).get("ownerReferences") or []:
        if _is_group_owner(ref):
            return str(ref.get("name") or "") or None
    return None


def controller_group_uid(claim: Mapping[str, Any]) -> str | None:
    """The UID of the draco PodGroup that controls the claim, if one does."""
    for ref in meta_of(claim).get("ownerReferences") or []:
        if _is_group_owner(ref):
            uid = ref.get("uid")
            return str(uid) if uid else None
    return None


def controller_pod_uid(claim: Mapping[str, Any]) -> str | None:
    """The UID of the pod that controls the claim, if a pod does."""
    for ref in meta_of(claim).get("ownerReferences") or []:
        if ref.get("controller") is True and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
            uid = ref.get("uid")
            return str(uid) if uid else None
    return None


def controller_pod_name(claim: Mapping[str, Any]) -> str | None:
    """The name of the pod that controls the claim, if a pod does."""
    for ref in meta_of(claim).get("ownerReferences") or []:
        if ref.get("controller") is True and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
            return str(ref.get("name") or "") or None
    return None


def is_pod_bound(pod: PodBody) -> bool:
    """The pod is on a node (`spec.nodeName` set)."""
    return bool((pod.get("spec") or {}).get("nodeName"))


def is_pod_done(pod: PodBody) -> bool:
    """The pod will never use its claims again: terminal, or being deleted before it was bound."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return True
    return bool(meta_of(pod).get("deletionTimestamp")) and not is_pod_bound(pod)


def waits_for_draco(pod: PodBody) -> bool:
    """The pod waits for draco to place it: it carries draco's scheduling gate, or it names
    draco as its scheduler and is not bound yet."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") == SCHEDULER_NAME and not spec.get("nodeName"):
        return True
    return any(gate.get("name") == SCHEDULING_GATE for gate in spec.get("schedulingGates") or [])


def bound_by_draco(pod: PodBody) -> bool:
    """The pod names draco as its scheduler: draco binds it itself (no gate, no pin)."""
    return (pod.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME


def pod_reference(pod: PodBody) -> ReferenceBody:
    """The pod's `status.reservedFor` entry."""
    meta = meta_of(pod)
    return {
        "apiGroup": "",
        "resource": "pods",
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }


def group_reference(name: str, uid: str) -> ReferenceBody:
    """A draco PodGroup's `status.reservedFor` entry (a claim of the group, KEP-5729)."""
    return {"apiGroup": SCHEDULING_GROUP, "resource": POD_GROUP_RESOURCE, "name": name, "uid": uid}


def is_group_reference(ref: Mapping[str, Any]) -> bool:
    return ref.get("apiGroup") == SCHEDULING_GROUP and ref.get("resource") == POD_GROUP_RESOURCE


def is_reserved_for(claim: ResourceClaimBody, pod: PodBody) -> bool:
    """The claim's `status.reservedFor` holds this pod (matched by UID), or the draco
    PodGroup the pod belongs to (matched by name: a claim of the group serves every member)."""
    meta = meta_of(pod)
    uid = meta.get("uid")
    group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
    for ref in (claim.get("status") or {}).get("reservedFor") or []:
        if ref.get("resource") == "pods" and not ref.get("apiGroup") and ref.get("uid") == uid:
            return True
        if group and is_group_reference(ref) and ref.get("name") == group:
            return True
    return False


def device_class_names(claim_spec: ResourceClaimSpecBody) -> list[str]:
    """Every DeviceClass a claim spec's requests and subrequests name, in order, once."""
    names: list[str] = []
    for request in (claim_spec.get("devices") or {}).get("requests") or []:
        candidates = [request.get("exactly") or {}, *(request.get("firstAvailable") or [])]
        for candidate in candidates:
            name = candidate.get("deviceClassName")
            if name and name not in names:
                names.append(str(name))
    return names
