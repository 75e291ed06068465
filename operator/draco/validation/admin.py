"""The admin-access rule: `adminAccess: true` only in namespaces that opt in.

Upstream's registry checks this on create of a ResourceClaim or ResourceClaimTemplate, and
on a status update that newly allocates admin-access results, against the namespace label
`resource.kubernetes.io/admin-access: "true"`. draco's kinds accept draco's label,
`resource.draco.dev/admin-access: "true"`, or upstream's (so a namespace set up for native
DRA works unchanged); objects of the native group are judged by the native label only, so
draco and kube-apiserver agree on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from draco.api.constants import ADMIN_ACCESS_LABEL, GROUP
from draco.errors import FieldError
from draco.validation.fielderrors import FieldPath, forbidden

__all__ = [
    "NATIVE_ADMIN_ACCESS_LABEL",
    "admin_access_label_for",
    "check_admin_access",
    "requested_admin_access_path",
    "result_admin_access_path",
]

NATIVE_ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def admin_access_label_for(api_version: str) -> str:
    """The namespace label that allows admin access for objects of this apiVersion."""
    return ADMIN_ACCESS_LABEL if api_version.startswith(f"{GROUP}/") else NATIVE_ADMIN_ACCESS_LABEL


def requested_admin_access_path(claim_spec: Mapping[str, Any], path: FieldPath) -> FieldPath | None:
    """The path of the first `exactly.adminAccess: true` in a claim spec, or None."""
    for i, request in enumerate((claim_spec.get("devices") or {}).get("requests") or ()):
        exactly = request.get("exactly") or {}
        if exactly.get("adminAccess") is True:
            return path.child("devices", "requests").index(i).child("adminAccess")
    return None


def result_admin_access_path(results: Iterable[Mapping[str, Any]], path: FieldPath) -> FieldPath | None:
    for i, result in enumerate(results):
        if result.get("adminAccess") is True:
            return path.index(i).child("adminAccess")
    return None


def check_admin_access(
    path: FieldPath, *, namespace_labels: Mapping[str, str], label: str, namespace: str | None = None
) -> list[FieldError]:
    """Forbidden unless the namespace carries `label: "true"` (or, for draco's label,
    upstream's `resource.kubernetes.io/admin-access: "true"`)."""
    accepted = {label, NATIVE_ADMIN_ACCESS_LABEL} if label == ADMIN_ACCESS_LABEL else {label}
    if any(namespace_labels.get(name) == "true" for name in accepted):
        return []
    where = namespace or "<namespace>"
    return [
        forbidden(
            path,
            f"admin access to devices requires the `{label}: true` label on the containing namespace; "
            f"ask a cluster administrator to label the namespace (kubectl label namespace {where} {label}=true)",
        )
    ]
