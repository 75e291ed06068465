"""The API server's rules for draco's five kinds, as field errors a user can act on.

`validate_object(obj)` takes the raw JSON of a DeviceClass, ResourceClaim,
ResourceClaimTemplate, ResourceSlice or DeviceTaintRule (`resource.draco.dev/v1` or
`resource.k8s.io/v1`) and returns every broken rule — unknown fields and wrong types
included, because admission sees objects that may not parse as models. `validate(obj)`
raises `InvalidObjectError` instead. `render`/`render_all` print errors the way
kube-apiserver does. The admission webhooks (`draco.webhook`) and the operator use these;
an e2e test checks that draco and a real kube-apiserver give the same verdict on a corpus.
"""

from __future__ import annotations

from draco.validation.claims import validate_claim_spec, validate_claim_status_update, validate_template_spec
from draco.validation.classes import validate_device_class_spec
from draco.validation.fielderrors import FieldPath, render, render_all
from draco.validation.objects import KINDS, NAMESPACED_KINDS, describe, validate, validate_object
from draco.validation.slices import validate_slice_spec
from draco.validation.taintrules import (
    taint_rule_warnings,
    validate_taint_rule_spec,
    validate_taint_rule_status,
)

__all__ = [
    "KINDS",
    "NAMESPACED_KINDS",
    "FieldPath",
    "describe",
    "render",
    "render_all",
    "taint_rule_warnings",
    "validate",
    "validate_claim_spec",
    "validate_claim_status_update",
    "validate_device_class_spec",
    "validate_object",
    "validate_slice_spec",
    "validate_taint_rule_spec",
    "validate_taint_rule_status",
    "validate_template_spec",
]
