"""Repair of a claim status another writer damaged: what to put back, decided without I/O.

draco's writers keep a claim's status consistent: the allocation and `reservedFor` are
written together, and every write recomputes the derived fields (`state`,
`allocatedDevices`, `nodeName`, see `summarize_claim_status`). A writer outside draco
with the right to write `resourceclaims/status` (an administrator, a misbehaving client;
the chart's admission policy keeps node agents to `status.devices`) can break that: a
`reservedFor` emptied while the pod still runs lets the claim be deallocated under the
pod when its last other reservation goes, and its devices be given to another claim.

`repair_claim_status` decides, from the claim and the pods the lifecycle's cache knows to
use it, whether its status needs a repair and what the repaired status is:

- a pod gets its reservation back when it uses the claim (names it in its claims
  annotation, resolved as the pod does, owner-checked for generated claims, or controls
  it), is not done, no longer carries draco's scheduling gate (while it does, the
  allocation is in progress and its own writes decide), was placed by draco itself (its
  `resource.draco.dev/placed-uid` annotation, written when draco removed the gate, is its
  own UID: a pod recreated from a copy of another under the same name, with the old pin
  and annotations, is a new consumer, not the one the reservation was taken from), and is
  on the claim's node: bound there, or pinned there by draco's required node affinity.
  Only for an allocated claim that is not being deleted (no reservation is added to a
  claim being deleted), within the 256-entry limit;
- `state`, `allocatedDevices` and `nodeName` are recomputed from the allocation and the
  reservations (a one-node allocation names its node); a `state` that lacks only the
  `deleted` mark is not damage (deletion alone writes no status).

Nothing is ever removed here: reservations of pods that are gone are pruned by the
lifecycle's usual sync.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from draco.api import allocated_node, summarize_claim_status
from draco.api.bodies import ResourceClaimBody, ResourceClaimStatusBody, meta_of
from draco.api.constants import PLACED_UID_ANNOTATION, RESERVED_FOR_MAX_SIZE
from draco.api.corebodies import PodBody
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaimsError,
    claim_statuses,
    is_controlled_by_pod,
    is_pod_done,
    is_reserved_for,
    parse_pod_claims,
    pod_reference,
    resolve_claim,
    waits_for_draco,
)

__all__ = ["REASON_STATUS_REPAIRED", "StatusRepair", "placed_by_draco", "pod_node", "repair_claim_status"]

#: draco's Event (Warning, on the claim) when it repaired the claim's status.
REASON_STATUS_REPAIRED: Final = "ResourceClaimStatusRepaired"

_DERIVED: Final = ("state", "allocatedDevices", "nodeName")


@dataclass(frozen=True, kw_only=True)
class StatusRepair:
    """The repaired status and what was repaired in it."""

    status: ResourceClaimStatusBody
    #: Names of the pods whose reservation was put back.
    restored: tuple[str, ...]
    #: Derived fields recomputed: (field, value before, value after); None means absent.
    corrected: tuple[tuple[str, str | None, str | None], ...]

    @property
    def message(self) -> str:
        """The Event's note: what another writer had changed and what draco put back."""
        parts = []
        if self.restored:
            parts.append("reservedFor lacked pod " + ", ".join(self.restored) + " that uses the claim")
        parts.extend(
            f"{name} was {_shown(before)}, is {_shown(after)}" for name, before, after in self.corrected
        )
        return "Repaired the status another writer changed: " + "; ".join(parts)


def _shown(value: str | None) -> str:
    return "absent" if value is None else f'"{value}"'


def pod_node(pod: PodBody) -> str | None:
    """The node a pod is on (`spec.nodeName`) or pinned to by draco (every required node
    affinity term names one and the same node by `metadata.name`); None when neither."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    nodes: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        named = [
            set(r.get("values") or [])
            for r in term.get("matchFields") or []
            if r.get("key") == "metadata.name" and r.get("operator") == "In"
        ]
        if not named:
            return None
        nodes |= set.intersection(*named)
    return next(iter(nodes)) if len(nodes) == 1 else None


def placed_by_draco(pod: PodBody) -> bool:
    """draco removed this very pod's gate (its placed-uid annotation is its own UID)."""
    meta = meta_of(pod)
    uid = meta.get("uid")
    return bool(uid) and (meta.get("annotations") or {}).get(PLACED_UID_ANNOTATION) == uid


def _uses(claim: ResourceClaimBody, pod: PodBody) -> bool:
    """The pod names the claim in its claims annotation (as it resolves it) or controls it."""
    if is_controlled_by_pod(claim, pod):
        return True
    name = meta_of(claim).get("name")
    try:
        entries = parse_pod_claims(pod)
    except PodClaimsError:
        return False
    statuses = claim_statuses(pod)
    for entry in entries:
        try:
            resolved = resolve_claim(pod, entry, statuses=statuses)
        except ClaimNotCreatedError:
            continue
        if resolved.claim_name == name and not resolved.check_owner:
            return True
    return False


def _normalized_state(state: str | None) -> tuple[str, ...]:
    return tuple(p for p in (state or "").split(",") if p and p not in ("deleted", "pending"))


def repair_claim_status(claim: ResourceClaimBody, *, pods: Iterable[PodBody]) -> StatusRepair | None:
    """What to write back into the claim's status, or None when it needs nothing (see the
    module docstring); `pods` are the pods the cache knows that may use the claim."""
    meta = meta_of(claim)
    status: ResourceClaimStatusBody = copy.deepcopy(claim.get("status") or {})
    #: The same status, read by field names that are not literals.
    fields: Mapping[str, Any] = status
    deleting = bool(meta.get("deletionTimestamp"))
    restored: list[str] = []
    if status.get("allocation") and not deleting:
        reserved = list(status.get("reservedFor") or [])
        node = status.get("nodeName")
        for pod in sorted(pods, key=lambda p: meta_of(p).get("name", "")):
            pod_meta = meta_of(pod)
            if (
                len(reserved) >= RESERVED_FOR_MAX_SIZE
                or pod_meta.get("namespace") != meta.get("namespace")
                or is_pod_done(pod)
                or waits_for_draco(pod)
                or is_reserved_for({"status": {"reservedFor": reserved}}, pod)
                or not placed_by_draco(pod)
                or not _uses(claim, pod)
            ):
                continue
            on = pod_node(pod)
            if on is None or (node and on != node):
                continue
            reserved.append(pod_reference(pod))
            restored.append(pod_meta.get("name", ""))
        if restored:
            status["reservedFor"] = reserved
    before = {name: fields.get(name) for name in _DERIVED}
    if status.get("allocation") and (node := allocated_node(status)) is not None:
        status["nodeName"] = node
    summarize_claim_status(status, deleting=deleting)
    corrected = tuple(
        (name, before[name], fields.get(name))
        for name in _DERIVED
        if (
            _normalized_state(before[name]) != _normalized_state(fields.get(name))
            if name == "state"
            else before[name] != fields.get(name)
        )
    )
    if not restored and not corrected:
        return None
    return StatusRepair(status=status, restored=tuple(restored), corrected=corrected)
