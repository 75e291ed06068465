"""The words of the allocation's Events that are not a decision: what was allocated, and
why a pod cannot use one of its claims yet (`allocation.py` decides when to say them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from draco.api.bodies import ResourceClaimBody, meta_of
from draco.api.corebodies import PodBody
from draco.api.names import natural_sorted
from draco.kube.client import key_of
from draco.scheduling.podclaims import bound_by_draco, is_claim_for_entry

__all__ = ["REASON_ALLOCATED", "REASON_SCHEDULED", "allocated_message", "claim_problem", "placed_event"]

#: draco's reason for a pod it allocated, pinned and un-gated (kube-scheduler binds it).
REASON_ALLOCATED: Final = "Allocated"
#: kube-scheduler's reason for a pod it bound: draco's too, for the pods it binds itself.
REASON_SCHEDULED: Final = "Scheduled"


def placed_event(pod: PodBody, node: str, claims: Sequence[ResourceClaimBody]) -> tuple[str, str]:
    """The reason and message of the one Event a placed pod gets: kube-scheduler's
    ``Scheduled`` for a pod draco bound itself (what its devices are included), draco's
    ``Allocated`` for a pod it pinned and un-gated (kube-scheduler then says ``Scheduled``)."""
    if not bound_by_draco(pod):
        return REASON_ALLOCATED, allocated_message(node, claims)
    what = _claims_text(claims)
    devices = f"; allocated {what}" if claims else ""
    return REASON_SCHEDULED, f"Successfully assigned {key_of(pod)} to {node}{devices}"


def allocated_message(node: str, claims: Sequence[ResourceClaimBody]) -> str:
    """``Allocated claims ns/a (gpu-0, gpu-1), ns/b (nic-3) on node node-1; pinned and un-gated``."""
    return f"Allocated {_claims_text(claims)} on node {node}; the pod is pinned there and its scheduling gate is removed"


def _claims_text(claims: Sequence[ResourceClaimBody]) -> str:
    """``claims ns/a (gpu-0, gpu-1), ns/b (nic-3)``, or ``no claims needed``."""
    parts = []
    for claim in claims:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        devices = natural_sorted(r.get("device", "") for r in results)
        parts.append(f"{key_of(claim)} ({', '.join(devices)})" if devices else key_of(claim))
    return ("claim " if len(parts) == 1 else "claims ") + ", ".join(parts) if parts else "no claims needed"


def claim_problem(
    key: str, claim: ResourceClaimBody | None, pod: PodBody, *, entry: str | None
) -> str | None:
    """Why the pod cannot use ``claim`` now (None: it can). ``entry``: the pod's template
    entry the claim was recorded for (its claim must be the one generated for it), None
    for a claim named by the pod."""
    if claim is None:
        if entry is not None:
            return (
                f"ResourceClaim {key}, recorded for the pod's claim {entry!r}, does not exist; "
                "the pod waits for a new one generated from its template"
            )
        return f"ResourceClaim {key} does not exist yet; the pod waits for it"
    if meta_of(claim).get("deletionTimestamp"):
        return f"ResourceClaim {key} is being deleted; the pod waits until it is gone and recreated"
    if entry is not None and not is_claim_for_entry(claim, pod, entry):
        return (
            f"ResourceClaim {key}, recorded for the pod's claim {entry!r}, was not generated for it "
            "(another object controls it, or it serves another entry); "
            "the pod waits for a new one generated from its template"
        )
    return None
