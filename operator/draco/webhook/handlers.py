"""Kopf admission handlers: validate all five kinds of `resource.draco.dev`, and default
them the way kube-apiserver does on write.

Validation is `draco.validation.validate_object` on the raw object from the admission
request, so `kubectl apply` of a bad DeviceClass fails at once with the API server's
wording (`spec.selectors[0].cel.expression: Invalid value: ...: compilation failed: ...`).
Creating a claim or template that asks for admin access reads the namespace's labels
through the API; so does a status write that newly allocates admin-access results.

Mutation applies upstream's write-time defaults (allocation mode, count, toleration
operator) to claims and templates and stamps `timeAdded` on taints of slices and
DeviceTaintRules (via `draco.api.defaults.stamp_taint_times`). Objects that fail the
structural checks are left alone; validation rejects them.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Literal

import kopf

from draco.api.constants import (
    GROUP,
    PLURAL_DEVICE_CLASSES,
    PLURAL_DEVICE_TAINT_RULES,
    PLURAL_RESOURCE_CLAIM_TEMPLATES,
    PLURAL_RESOURCE_CLAIMS,
    PLURAL_RESOURCE_SLICES,
    VERSION,
)
from draco.logs import get_logger
from draco.validation import describe, render_all, validate_object
from draco.validation.admin import requested_admin_access_path, result_admin_access_path
from draco.validation.defaults import apply_defaults
from draco.validation.fielderrors import FieldPath
from draco.validation.objects import structural_errors
from draco.webhook.namespaces import NamespaceLookupError, namespace_labels

__all__ = ["admission_verdict", "defaulting_patch"]

log = get_logger(__name__)

_WRITES: list[Literal["CREATE", "UPDATE"]] = ["CREATE", "UPDATE"]
_PLURALS = (
    PLURAL_DEVICE_CLASSES,
    PLURAL_RESOURCE_CLAIMS,
    PLURAL_RESOURCE_CLAIM_TEMPLATES,
    PLURAL_RESOURCE_SLICES,
    PLURAL_DEVICE_TAINT_RULES,
)
_WITH_STATUS = (PLURAL_RESOURCE_CLAIMS, PLURAL_DEVICE_TAINT_RULES)


def _needs_namespace_labels(
    body: Mapping[str, Any], old: Mapping[str, Any] | None, subresource: str | None
) -> bool:
    kind = body.get("kind")
    spec = body.get("spec") or {}
    if kind == "ResourceClaimTemplate" and old is None and isinstance(spec, dict):
        claim_spec = spec.get("spec") or {}
        return (
            isinstance(claim_spec, dict) and requested_admin_access_path(claim_spec, FieldPath()) is not None
        )
    if kind != "ResourceClaim" or not isinstance(spec, dict):
        return False
    if subresource == "status":
        results = ((body.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or ()
        return result_admin_access_path(results, FieldPath()) is not None
    return old is None and requested_admin_access_path(spec, FieldPath()) is not None


async def admission_verdict(
    body: Mapping[str, Any], *, old: Mapping[str, Any] | None, subresource: str | None
) -> str | None:
    """None when `body` may be written; otherwise the message to reject it with."""
    labels: Mapping[str, str] | None = None
    namespace = (body.get("metadata") or {}).get("namespace")
    if namespace and not structural_errors(body) and _needs_namespace_labels(body, old, subresource):
        try:
            labels = await namespace_labels(namespace)
        except NamespaceLookupError as err:
            return f"{describe(body)}: {err}"
    errors = validate_object(body, old=old, namespace_labels=labels, subresource=subresource)
    if not errors:
        return None
    return f"{describe(body)} is invalid: {render_all(errors)}"


async def _validate(**kwargs: Any) -> None:
    body: kopf.Body = kwargs["body"]
    old: kopf.Body | None = kwargs.get("old")
    subresource: str | None = kwargs.get("subresource")
    operation: str | None = kwargs.get("operation")
    message = await admission_verdict(
        dict(body),
        old=dict(old) if old is not None and operation == "UPDATE" else None,
        subresource=subresource,
    )
    if message is not None:
        log.info("Rejected a write", object=describe(body), operation=operation, subresource=subresource)
        raise kopf.AdmissionError(message, code=422)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def _stamped_taints(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The spec fields to replace so that every taint has a `timeAdded`, or None."""
    from draco.api.defaults import stamp_taint_times
    from draco.api.load import load_object
    from draco.errors import InvalidObjectError

    try:
        model = load_object(dict(body))
        old_model = load_object(dict(old)) if old is not None else None
    except InvalidObjectError:
        return None
    if not stamp_taint_times(model, now=_now(), old=old_model):  # type: ignore[arg-type]
        return None
    dumped = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    spec = dumped.get("spec") or {}
    if body.get("kind") == "DeviceTaintRule":
        return {"taint": spec.get("taint")}
    stamped = {d.get("name"): d.get("taints") for d in spec.get("devices") or ()}
    devices = [dict(d) for d in (body.get("spec") or {}).get("devices") or ()]
    for device in devices:
        if device.get("taints"):
            device["taints"] = stamped.get(device.get("name"), device["taints"])
    return {"devices": devices}


def defaulting_patch(body: Mapping[str, Any], *, old: Mapping[str, Any] | None) -> dict[str, Any]:
    """The `spec` fields (top level of `spec`) that defaulting changes, with their new values."""
    if structural_errors(body):
        return {}
    kind = body.get("kind")
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        if old is not None:
            return {}  # the spec is immutable; it was defaulted on create
        defaulted = apply_defaults(dict(body)).get("spec") or {}
        original = body.get("spec") or {}
        return {k: v for k, v in defaulted.items() if original.get(k) != v}
    if kind in ("ResourceSlice", "DeviceTaintRule"):
        return _stamped_taints(body, old) or {}
    return {}


async def _mutate(**kwargs: Any) -> None:
    body: kopf.Body = kwargs["body"]
    old: kopf.Body | None = kwargs.get("old")
    operation: str | None = kwargs.get("operation")
    patch: kopf.Patch = kwargs["patch"]
    changes = defaulting_patch(
        dict(body), old=dict(old) if old is not None and operation == "UPDATE" else None
    )
    for key, value in changes.items():
        patch.setdefault("spec", {})[key] = value


for _plural in _PLURALS:
    kopf.on.validate(GROUP, VERSION, _plural, id=f"validate-{_plural}", operations=_WRITES)(_validate)
    if _plural in _WITH_STATUS:
        kopf.on.validate(
            GROUP,
            VERSION,
            _plural,
            id=f"validate-{_plural}-status",
            operations=["UPDATE"],
            subresource="status",
        )(_validate)
for _plural in (
    PLURAL_RESOURCE_CLAIMS,
    PLURAL_RESOURCE_CLAIM_TEMPLATES,
    PLURAL_RESOURCE_SLICES,
    PLURAL_DEVICE_TAINT_RULES,
):
    kopf.on.mutate(GROUP, VERSION, _plural, id=f"default-{_plural}", operations=_WRITES)(_mutate)
