"""The claims made from templates: a pod's for its template entries, a draco PodGroup's for
its own (KEP-5729), named and owned the upstream way; pure.

The lifecycle creates them (`draco.operator.resourceclaim`), `draco simulate` names its
generated claims the same way. What the pod's annotations say about them is
`podclaims.py`'s.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

from draco.api.bodies import ResourceClaimBody, ResourceClaimTemplateBody, meta_of
from draco.api.constants import FINALIZER, KIND_POD_GROUP, POD_CLAIM_NAME_ANNOTATION, SCHEDULING_GROUP
from draco.api.corebodies import PodBody
from draco.scheduling.podclaims import PodClaim

__all__ = [
    "MAX_GENERATE_NAME_BASE",
    "generate_claim_name",
    "generated_claim",
    "generated_group_claim",
    "without_generated_names",
]

#: Leave room for the 5 random characters the API server appends (63 in all, one spare).
MAX_GENERATE_NAME_BASE: Final = 57


def generate_claim_name(pod_name: str, pod_claim_name: str) -> str:
    """The `generateName` of a claim generated for a pod (upstream's rule).

    `<pod>-<claim>-`, or when that is longer than 57 characters both parts cut in
    proportion to their length and joined by one dash, with no trailing dash.
    """
    base = f"{pod_name}-{pod_claim_name}-"
    if len(base) <= MAX_GENERATE_NAME_BASE:
        return base
    pod_part = pod_name[: len(pod_name) * MAX_GENERATE_NAME_BASE // len(base)]
    claim_part = pod_claim_name[: len(pod_claim_name) * MAX_GENERATE_NAME_BASE // len(base)]
    return f"{pod_part}-{claim_part}"


#: What the API server appends to a `generateName` (apiserver's SimpleNameGenerator).
_GENERATED_SUFFIX: Final = r"[bcdfghjklmnpqrstvwxz2456789]{5}\b"


def without_generated_names(message: str, generate_name: str) -> str:
    """`message` with every name the API server generated from `generate_name` written as
    `<generate_name>*`: a refused create names a fresh one on every try, so one pod's
    repeated refusal reads the same each time (one Event series, not one Event per try)."""
    if not generate_name:
        return message
    return re.sub(re.escape(generate_name) + _GENERATED_SUFFIX, generate_name + "*", message)


def generated_claim(pod: PodBody, entry: PodClaim, template: ResourceClaimTemplateBody) -> ResourceClaimBody:
    """The claim to create for the pod's template entry: named with ``generateName``,
    owned by the pod as controller with blockOwnerDeletion, annotated with the pod claim
    name, labels, annotations and spec from the template, draco's finalizer from the start."""
    meta = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    return _claim_from_template(owner, meta["namespace"], entry.name, template)


def generated_group_claim(
    group: Mapping[str, Any], entry_name: str, template: ResourceClaimTemplateBody
) -> ResourceClaimBody:
    """The claim to create for a draco PodGroup's template entry (KEP-5729): as a pod's,
    owned by the PodGroup (deleted with it), annotated with the group's claim name."""
    meta = meta_of(group)
    owner = {
        "apiVersion": str(group.get("apiVersion") or f"{SCHEDULING_GROUP}/v1beta1"),
        "kind": KIND_POD_GROUP,
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
    }
    return _claim_from_template(owner, str(meta.get("namespace", "")), entry_name, template)


def _claim_from_template(
    owner: Mapping[str, str], namespace: str, entry_name: str, template: ResourceClaimTemplateBody
) -> ResourceClaimBody:
    template_spec = template.get("spec") or {}
    template_meta = meta_of(template_spec)
    body: ResourceClaimBody = {
        "metadata": {
            "generateName": generate_claim_name(owner["name"], entry_name),
            "namespace": namespace,
            "finalizers": [FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["name"],
                    "uid": owner["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "annotations": {
                **(template_meta.get("annotations") or {}),
                POD_CLAIM_NAME_ANNOTATION: entry_name,
            },
        },
        "spec": copy.deepcopy(template_spec.get("spec") or {}),
    }
    if template_meta.get("labels"):
        body["metadata"]["labels"] = dict(template_meta["labels"])
    return body
