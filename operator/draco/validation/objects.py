"""Whole-object validation for the five kinds, on create, update and status update.

Input is the raw JSON dict, as admission delivers it: it may not even parse as a model
(wrong types, unknown fields), and the API server's answer for those is an error too. So
the order is the API server's: the structural pass (`schema`), defaulting (`defaults`),
then the rules of the kind. Both apiVersions are accepted, `resource.draco.dev/v1` and
`resource.k8s.io/v1`; they have the same shape (draco's DeviceClass adds a `status`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draco.api.constants import (
    GROUP,
    KIND_DEVICE_CLASS,
    KIND_DEVICE_TAINT_RULE,
    KIND_RESOURCE_CLAIM,
    KIND_RESOURCE_CLAIM_TEMPLATE,
    KIND_RESOURCE_SLICE,
    SUPPORTED_API_VERSIONS,
)
from draco.errors import FieldError, InvalidObjectError
from draco.validation.admin import (
    admin_access_label_for,
    check_admin_access,
    requested_admin_access_path,
    result_admin_access_path,
)
from draco.validation.claims import validate_claim_spec, validate_claim_status_update, validate_template_spec
from draco.validation.classes import validate_device_class_spec
from draco.validation.defaults import apply_defaults
from draco.validation.fielderrors import NO_VALUE, FieldPath, invalid, not_supported, render_all
from draco.validation.groups import GROUP_API_VERSIONS, GROUP_KINDS, validate_group_object
from draco.validation.groups import SHAPES as GROUP_SHAPES
from draco.validation.meta import validate_object_meta
from draco.validation.poolstatus import (
    POOL_STATUS_API_VERSIONS,
    POOL_STATUS_KINDS,
    validate_pool_status_request,
)
from draco.validation.poolstatus import SHAPE as POOL_STATUS_SHAPE
from draco.validation.schema import RAW, STRING, Obj, check_shape, strip_nulls
from draco.validation.shapes import KIND_SHAPES, RESOURCE_CLAIM_STATUS
from draco.validation.slices import validate_slice_spec
from draco.validation.taintrules import validate_taint_rule_spec, validate_taint_rule_status

__all__ = ["KINDS", "NAMESPACED_KINDS", "validate", "validate_object"]

KINDS = (
    KIND_DEVICE_CLASS,
    KIND_RESOURCE_CLAIM,
    KIND_RESOURCE_CLAIM_TEMPLATE,
    KIND_RESOURCE_SLICE,
    KIND_DEVICE_TAINT_RULE,
)
NAMESPACED_KINDS = frozenset({KIND_RESOURCE_CLAIM, KIND_RESOURCE_CLAIM_TEMPLATE})
# draco's CRDs add a DeviceClass status and three fields to the claim status (two printer
# fields and the node agents select on).
_DRACO_SHAPES = {
    KIND_DEVICE_CLASS: Obj("DeviceClass", {**KIND_SHAPES[KIND_DEVICE_CLASS].fields, "status": RAW}),
    KIND_RESOURCE_CLAIM: Obj(
        "ResourceClaim",
        {
            **KIND_SHAPES[KIND_RESOURCE_CLAIM].fields,
            "status": Obj(
                "ResourceClaimStatus",
                {
                    **RESOURCE_CLAIM_STATUS.fields,
                    "state": STRING,
                    "allocatedDevices": STRING,
                    "nodeName": STRING,
                },
            ),
        },
    ),
}
_SPEC = FieldPath("spec")
_STATUS = FieldPath("status")


def shape_for(kind: str, api_version: str) -> Obj:
    """The structural shape of `kind` under `api_version` (draco's adds a few status fields)."""
    if kind in GROUP_KINDS:
        return GROUP_SHAPES[kind]
    if kind in POOL_STATUS_KINDS:
        return POOL_STATUS_SHAPE
    if api_version.startswith(f"{GROUP}/") and kind in _DRACO_SHAPES:
        return _DRACO_SHAPES[kind]
    return KIND_SHAPES[kind]


def _immutable(path: FieldPath, new: Any, old: Any) -> list[FieldError]:
    return [] if new == old else [invalid(path, NO_VALUE, "field is immutable")]


def _admin_on_create(
    spec: Mapping[str, Any],
    path: FieldPath,
    *,
    api_version: str,
    namespace_labels: Mapping[str, str] | None,
    namespace: str | None = None,
) -> list[FieldError]:
    if namespace_labels is None:
        return []
    where = requested_admin_access_path(spec, path)
    if where is None:
        return []
    return check_admin_access(
        where,
        namespace_labels=namespace_labels,
        label=admin_access_label_for(api_version),
        namespace=namespace,
    )


def _validate_claim(
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    *,
    subresource: str | None,
    namespace_labels: Mapping[str, str] | None,
) -> list[FieldError]:
    spec = obj.get("spec") or {}
    if subresource == "status":
        old_status = (old or {}).get("status") or {}
        status = obj.get("status") or {}
        errs = validate_claim_status_update(
            status,
            old_status,
            spec=spec,
            deleting=bool((obj.get("metadata") or {}).get("deletionTimestamp")),
        )
        old_results = ((old_status.get("allocation") or {}).get("devices") or {}).get("results") or ()
        new_results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
        results_path = _STATUS.child("allocation", "devices", "results")
        if namespace_labels is not None and result_admin_access_path(old_results, results_path) is None:
            where = result_admin_access_path(new_results, results_path)
            if where is not None:
                errs.extend(
                    check_admin_access(
                        where,
                        namespace_labels=namespace_labels,
                        label=admin_access_label_for(str(obj.get("apiVersion") or "")),
                        namespace=(obj.get("metadata") or {}).get("namespace"),
                    )
                )
        return errs
    errs = validate_object_meta(obj.get("metadata") or {}, namespaced=True)
    if old is not None:
        return errs + _immutable(_SPEC, spec, old.get("spec") or {})
    errs.extend(validate_claim_spec(spec, _SPEC))
    errs.extend(
        _admin_on_create(
            spec,
            _SPEC,
            api_version=str(obj.get("apiVersion") or ""),
            namespace_labels=namespace_labels,
            namespace=(obj.get("metadata") or {}).get("namespace"),
        )
    )
    return errs


def _validate_template(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None, *, namespace_labels: Mapping[str, str] | None
) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs = validate_object_meta(obj.get("metadata") or {}, namespaced=True)
    if old is not None:
        return errs + _immutable(_SPEC, spec, old.get("spec") or {})
    errs.extend(validate_template_spec(spec, _SPEC))
    errs.extend(
        _admin_on_create(
            spec.get("spec") or {},
            _SPEC.child("spec"),
            api_version=str(obj.get("apiVersion") or ""),
            namespace_labels=namespace_labels,
            namespace=(obj.get("metadata") or {}).get("namespace"),
        )
    )
    return errs


def structural_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """Only the structural pass: unsupported kind or apiVersion, unknown fields, wrong types."""
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if kind in GROUP_KINDS:
        if api_version not in GROUP_API_VERSIONS:
            return [not_supported(FieldPath("apiVersion"), api_version, GROUP_API_VERSIONS)]
        return check_shape(GROUP_SHAPES[str(kind)], obj, FieldPath())
    if kind in POOL_STATUS_KINDS:
        if api_version not in POOL_STATUS_API_VERSIONS:
            return [not_supported(FieldPath("apiVersion"), api_version, POOL_STATUS_API_VERSIONS)]
        return check_shape(shape_for(str(kind), str(api_version)), obj, FieldPath())
    if kind not in KINDS:
        return [not_supported(FieldPath("kind"), kind, (*KINDS, *GROUP_KINDS, *POOL_STATUS_KINDS))]
    if api_version not in SUPPORTED_API_VERSIONS:
        return [not_supported(FieldPath("apiVersion"), api_version, SUPPORTED_API_VERSIONS)]
    return check_shape(shape_for(str(kind), str(api_version)), obj, FieldPath())


def validate_object(
    obj: Mapping[str, Any],
    *,
    old: Mapping[str, Any] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
    subresource: str | None = None,
) -> list[FieldError]:
    """Every broken rule of `obj` (any of the five kinds), empty when the API server would
    accept it.

    `old` makes it an update (immutability, ratcheting of stored values);
    `subresource="status"` judges a status write against `old`. `namespace_labels` are the
    labels of the claim's namespace; without them the admin-access rule is not checked
    (the caller could not look the namespace up).
    """
    kind = obj.get("kind")
    if kind in POOL_STATUS_KINDS:
        return validate_pool_status_request(
            strip_nulls(dict(obj)),
            old=strip_nulls(dict(old)) if old is not None else None,
            subresource=subresource,
        )
    if kind in GROUP_KINDS:
        return validate_group_object(
            strip_nulls(dict(obj)),
            old=strip_nulls(dict(old)) if old is not None else None,
            subresource=subresource,
        )
    structural = structural_errors(obj)
    if old is not None:
        # The stored object passed once; a broken one must not hide the new object's errors.
        old = apply_defaults(strip_nulls(dict(old)))
    if structural:
        return structural
    new = apply_defaults(strip_nulls(dict(obj)))
    old_spec = (old or {}).get("spec")
    if kind == KIND_RESOURCE_CLAIM:
        return _validate_claim(new, old, subresource=subresource, namespace_labels=namespace_labels)
    if kind == KIND_RESOURCE_CLAIM_TEMPLATE:
        return _validate_template(new, old, namespace_labels=namespace_labels)
    if kind == KIND_DEVICE_TAINT_RULE and subresource == "status":
        return validate_taint_rule_status(new.get("status") or {}, _STATUS)
    if subresource == "status":
        return []
    errs = validate_object_meta(new.get("metadata") or {}, namespaced=False)
    spec = new.get("spec") or {}
    if kind == KIND_DEVICE_CLASS:
        errs.extend(validate_device_class_spec(spec, old_spec=old_spec))
    elif kind == KIND_RESOURCE_SLICE:
        errs.extend(validate_slice_spec(spec, old_spec=old_spec))
    else:
        errs.extend(validate_taint_rule_spec(spec, old_spec=old_spec))
    return errs


def describe(obj: Mapping[str, Any]) -> str:
    """`ResourceClaim ns/name` — how messages name an object."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    namespace = meta.get("namespace")
    return (
        f"{obj.get('kind', 'object')} {namespace}/{name}"
        if namespace
        else f"{obj.get('kind', 'object')} {name}"
    )


def validate(
    obj: Mapping[str, Any],
    *,
    old: Mapping[str, Any] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
    subresource: str | None = None,
) -> None:
    """Raise `InvalidObjectError` (carrying every field error) unless `obj` is valid."""
    errors = validate_object(obj, old=old, namespace_labels=namespace_labels, subresource=subresource)
    if errors:
        raise InvalidObjectError(f"{describe(obj)} is invalid: {render_all(errors)}", errors=errors)


__all__ += ["describe", "shape_for", "structural_errors"]
