"""What the workload webhook does to a Deployment, ReplicaSet, StatefulSet, DaemonSet, Job
or CronJob that names native claims in its pod template, as a JSONPatch (pure, no I/O).

Before 1.34, kube-apiserver drops `spec.resourceClaims` (and the containers'
`resources.claims`) from every pod template it stores unless the DynamicResourceAllocation
gate is on, which it is not by default on 1.30-1.33. The pods a controller later makes from
such a template carry no claims: the pod webhook has nothing left to translate, and the
pod runs without its devices, silently. A mutating webhook sees the object as it was sent,
before the API server's strategy drops the field, so the template is translated here, as
the pod webhook translates a pod (`draco.webhook.pods.pod_patch`): the entries move into
the template's claims annotation, the native fields are removed and the scheduling gate is
added. Every pod made from the template then names its claims the way draco reads them, on
every version, with the gate on or off.

Unlike a pod's, a template's claims may change (a Deployment's rollout): a native entry
sent again replaces the annotation's entry of the same name (`native_wins`). Sent again
unchanged (`kubectl apply` of the same manifest), it translates to the annotation already
there, so the template does not change and no rollout starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from draco.webhook.pods import native_claim_warnings, pod_patch

__all__ = ["WORKLOAD_KINDS", "template_patch"]

#: The kinds whose pod template the webhook sees, and where that template is.
WORKLOAD_KINDS: Final[Mapping[str, tuple[str, ...]]] = {
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


def template_patch(kind: str, workload: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The RFC 6902 operations on `workload` ([] when nothing changes) and the admission
    warnings for its template's entries that name no claim (Kubernetes 1.30's decoding of
    today's shape, see `native_claim_warnings`)."""
    where = WORKLOAD_KINDS.get(kind)
    if where is None:
        return [], []
    template: Any = workload
    for key in where:
        template = template.get(key) if isinstance(template, Mapping) else None
    if not isinstance(template, Mapping) or not (template.get("spec") or {}).get("resourceClaims"):
        return [], []
    prefix = "/" + "/".join(where)
    warnings = native_claim_warnings(template, path=".".join((*where, "spec")))
    ops = pod_patch(template, extended_resources={}, translate=True, native_wins=True)
    if "metadata" not in template:
        # A template without metadata: the annotation's parent does not exist yet.
        ops = [
            {"op": "add", "path": "/metadata", "value": {"annotations": op["value"]}}
            if op["path"] == "/metadata/annotations"
            else op
            for op in ops
        ]
    return [{**op, "path": prefix + op["path"]} for op in ops], warnings
