"""The defaults kube-apiserver applies before it validates, applied to a copy.

Validation judges the defaulted object, as the API server does: `allocationMode` empty
becomes `ExactCount`, `count` 0 under ExactCount becomes 1, a toleration's empty
`operator` becomes `Equal`. Without this, `count` left out would read as "must be greater
than zero" although the server accepts it.
"""

from __future__ import annotations

import copy
from typing import Any

from draco.api.constants import ALLOCATION_MODE_EXACT_COUNT, TOLERATION_OP_EQUAL

__all__ = ["apply_defaults"]


def _default_tolerations(holder: dict[str, Any]) -> None:
    for toleration in holder.get("tolerations") or ():
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = TOLERATION_OP_EQUAL


def _default_request(request: dict[str, Any]) -> None:
    if not request.get("allocationMode"):
        request["allocationMode"] = ALLOCATION_MODE_EXACT_COUNT
    if request["allocationMode"] == ALLOCATION_MODE_EXACT_COUNT and not request.get("count"):
        request["count"] = 1
    _default_tolerations(request)


def _default_claim_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    devices = spec.get("devices")
    if not isinstance(devices, dict):
        return
    for request in devices.get("requests") or ():
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _default_request(request["exactly"])
        for sub in request.get("firstAvailable") or ():
            if isinstance(sub, dict):
                _default_request(sub)


def _default_claim_status(status: Any) -> None:
    if not isinstance(status, dict):
        return
    allocation = status.get("allocation")
    if not isinstance(allocation, dict) or not isinstance(allocation.get("devices"), dict):
        return
    for result in allocation["devices"].get("results") or ():
        if isinstance(result, dict):
            _default_tolerations(result)


def apply_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A defaulted deep copy of a structurally valid object (any of the five kinds)."""
    out = copy.deepcopy(obj)
    kind = out.get("kind")
    if kind == "ResourceClaim":
        _default_claim_spec(out.get("spec"))
        _default_claim_status(out.get("status"))
    elif kind == "ResourceClaimTemplate" and isinstance(out.get("spec"), dict):
        _default_claim_spec(out["spec"].get("spec"))
    return out
