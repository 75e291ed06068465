"""Admission for draco's kinds, as AdmissionReview v1 in and out: validate all five kinds
(the API server's rules, from `draco.validation`) and default them on write.

Validation is `draco.validation.validate_object` on the object of the admission request,
so `kubectl apply` of a bad DeviceClass fails at once with the API server's wording
(`spec.selectors[0].cel.expression: Invalid value: ...: compilation failed: ...`).
Creating a claim or template that asks for admin access reads the namespace's labels
through the API; so does a status write that newly allocates admin-access results.

Mutation applies upstream's write-time defaults (allocation mode, count, toleration
operator) to claims and templates and stamps `timeAdded` on taints of slices and
DeviceTaintRules (via `draco.api.defaults.stamp_taint_times`), as a JSONPatch. Objects
that fail the structural checks are left alone; validation rejects them.

The CPU-bound parts (decoding the request, CEL compilation, model validation, the patch)
run in worker threads (`asyncio.to_thread`): a selector that takes seconds to compile
delays its own answer, never the loop that serves every other request and the probes.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from draco.validation import describe, render_all, validate_object
from draco.validation.admin import requested_admin_access_path, result_admin_access_path
from draco.validation.defaults import apply_defaults
from draco.validation.fielderrors import FieldPath
from draco.validation.objects import structural_errors

__all__ = [
    "AdmissionOutcome",
    "NamespaceLabels",
    "admission_verdict",
    "allowance",
    "decode_review",
    "defaulting_patch",
    "denial",
    "json_patch",
    "mutate",
    "validate",
    "warm_up",
]

#: Reads a namespace's labels; raises `draco.errors.DracoError` when it cannot.
NamespaceLabels = Callable[[str], Awaitable[Mapping[str, str]]]
Verdict = Literal["allowed", "denied", "patched", "error"]

ADMISSION_API_VERSION = "admission.k8s.io/v1"


@dataclass(frozen=True)
class AdmissionOutcome:
    """What one review decided: the AdmissionReview to send back and, for metrics and
    logs, the kind, operation and verdict."""

    review: dict[str, Any]
    kind: str
    operation: str
    verdict: Verdict


def decode_review(raw: bytes) -> dict[str, Any]:
    """The `request` of an AdmissionReview v1; ValueError when it is not one."""
    review = json.loads(raw)
    if not isinstance(review, dict) or review.get("apiVersion") != ADMISSION_API_VERSION:
        raise ValueError(f"expected an AdmissionReview of {ADMISSION_API_VERSION}")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ValueError("the AdmissionReview has no request with a uid")
    if not isinstance(request.get("object"), dict):
        # Only CREATE and UPDATE are registered; a request without the object is malformed.
        raise ValueError(f"the AdmissionReview's {request.get('operation') or ''} request carries no object")
    return request


def _response(uid: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "AdmissionReview",
        "response": {"uid": uid, **fields},
    }


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
    body: Mapping[str, Any],
    *,
    old: Mapping[str, Any] | None,
    subresource: str | None,
    namespace_labels: NamespaceLabels | None = None,
) -> str | None:
    """None when `body` may be written; otherwise the message to reject it with.

    Validation runs in a worker thread. `namespace_labels` is asked only when the object
    newly requests admin access; without it such a request is refused (it cannot be
    verified)."""
    from draco.errors import DracoError

    labels: Mapping[str, str] | None = None
    namespace = (body.get("metadata") or {}).get("namespace")
    if namespace and not structural_errors(body) and _needs_namespace_labels(body, old, subresource):
        if namespace_labels is None:
            return f"{describe(body)}: could not retrieve namespace {namespace!r} to verify admin access"
        try:
            labels = await namespace_labels(namespace)
        except DracoError as err:
            return f"{describe(body)}: {err}"
    errors = await asyncio.to_thread(
        validate_object, body, old=old, namespace_labels=labels, subresource=subresource
    )
    if not errors:
        return None
    return f"{describe(body)} is invalid: {render_all(errors)}"


def _request_parts(request: Mapping[str, Any]) -> tuple[str, str, dict[str, Any], dict[str, Any] | None]:
    operation = str(request.get("operation") or "")
    kind = str((request.get("kind") or {}).get("kind") or "")
    body = request.get("object")
    if not isinstance(body, dict):
        raise ValueError(f"{operation} of {kind or 'an object'}: the request carries no object")
    old = request.get("oldObject") if operation == "UPDATE" else None
    return operation, kind, body, old if isinstance(old, dict) else None


async def validate(
    request: Mapping[str, Any], *, namespace_labels: NamespaceLabels | None
) -> AdmissionOutcome:
    """Answer a validating AdmissionReview request: allowed, or denied with 422 Invalid
    and the API server's wording."""
    uid = str(request["uid"])
    operation, kind, body, old = _request_parts(request)
    subresource = request.get("subResource") or None
    message = await admission_verdict(
        body, old=old, subresource=subresource, namespace_labels=namespace_labels
    )
    if message is None:
        return AdmissionOutcome(_response(uid, allowed=True), kind, operation, "allowed")
    status = {"code": 422, "reason": "Invalid", "message": message}
    return AdmissionOutcome(_response(uid, allowed=False, status=status), kind, operation, "denied")


def allowance(request: Mapping[str, Any]) -> AdmissionOutcome:
    """The answer admitting `request` as it is."""
    operation, kind, _body, _old = _request_parts(request)
    return AdmissionOutcome(_response(str(request["uid"]), allowed=True), kind, operation, "allowed")


def denial(request: Mapping[str, Any], *, code: int, reason: str, message: str) -> AdmissionOutcome:
    """The answer refusing `request` with an HTTP status `code`, its `reason` and `message`."""
    operation, kind, _body, _old = _request_parts(request)
    status = {"code": code, "reason": reason, "message": message}
    return AdmissionOutcome(
        _response(str(request["uid"]), allowed=False, status=status), kind, operation, "denied"
    )


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


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def json_patch(changes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations setting each top-level `spec` field of `changes` (an `add` of an
    object member replaces an existing value)."""
    return [{"op": "add", "path": f"/spec/{_pointer(key)}", "value": value} for key, value in changes.items()]


def _encoded_patch(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
    """The base64 JSONPatch of `defaulting_patch`, or None (a slice's patch can be 1 MiB:
    encoded off the loop too)."""
    changes = defaulting_patch(body, old=old)
    if not changes:
        return None
    return base64.b64encode(json.dumps(json_patch(changes)).encode()).decode()


async def mutate(request: Mapping[str, Any]) -> AdmissionOutcome:
    """Answer a mutating AdmissionReview request: always allowed, with a JSONPatch when
    defaulting changes something."""
    uid = str(request["uid"])
    operation, kind, body, old = _request_parts(request)
    patch = await asyncio.to_thread(_encoded_patch, body, old)
    if patch is None:
        return AdmissionOutcome(_response(uid, allowed=True), kind, operation, "allowed")
    review = _response(uid, allowed=True, patchType="JSONPatch", patch=patch)
    return AdmissionOutcome(review, kind, operation, "patched")


_WARM_UP_OBJECTS: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "warm-up"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": 'device.driver == "warm.up" && device.attributes'
                        '["warm.up"].index > 0 && device.capacity["warm.up"].memory'
                        '.compareTo(quantity("1Gi")) >= 0'
                    }
                }
            ]
        },
    },
    {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "warm-up", "namespace": "warm-up"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "warm-up"}}]}},
    },
    {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "warm-up"},
        "spec": {
            "driver": "warm.up",
            "nodeName": "warm-up",
            "pool": {"name": "warm-up", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "d", "taints": [{"key": "warm.up/t", "effect": "NoSchedule"}]}],
        },
    },
)


def warm_up() -> None:
    """Validate and default one object of each common kind, so the first real request
    does not pay for building the CEL parser and the models' validators (seconds on a
    busy node: longer than the API server waits). Blocking: run it in a thread."""
    for obj in _WARM_UP_OBJECTS:
        validate_object(obj, old=None, namespace_labels=None, subresource=None)
        defaulting_patch(obj, old=None)
