"""Admission decisions for draco's kinds, without the AdmissionReview around them: whether an
object may be written (the API server's rules, from `draco.validation`) and the defaults
to write into it. `draco.webhook.handlers` asks these from Kopf's admission handlers.

Validation is `draco.validation.versions.validate_as_written` on the object of the
admission request, in the version the user wrote, so `kubectl apply` of a bad DeviceClass
fails at once with the API server's wording (`spec.selectors[0].cel.expression: Invalid
value: ...: compilation failed: ...`) and a ``v1beta1`` object's errors name ``v1beta1``'s
fields. Creating a claim or template that asks for admin access reads the namespace's
labels through the API; so does a status write that newly allocates admin-access results.

Mutation applies upstream's write-time defaults (allocation mode, count, toleration
operator) to claims and templates and stamps `timeAdded` on taints of slices and
DeviceTaintRules (via `draco.api.defaults.stamp_taint_times`), in the version the object
is written in. Objects that fail the structural checks are left alone; validation rejects
them.

The CPU-bound parts (CEL compilation, model validation, the defaults) run in worker
threads (`asyncio.to_thread`): a selector that takes seconds to compile delays its own
answer, never the loop that serves every other request and the probes.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from draco.api.constants import GROUP, VERSION
from draco.api.versions import convert, to_storage
from draco.errors import InvalidObjectError
from draco.validation import describe, render_all, taint_rule_warnings, validate_object
from draco.validation.admin import requested_admin_access_path, result_admin_access_path
from draco.validation.defaults import apply_defaults
from draco.validation.fielderrors import FieldPath
from draco.validation.objects import structural_errors
from draco.validation.versions import validate_as_written, version_of

__all__ = [
    "ADMISSION_API_VERSION",
    "NamespaceLabels",
    "admission_verdict",
    "admission_warnings",
    "decode_review",
    "defaulted_spec",
    "warm_up",
]

#: Reads a namespace's labels; raises `draco.errors.DracoError` when it cannot.
NamespaceLabels = Callable[[str], Awaitable[Mapping[str, str]]]

ADMISSION_API_VERSION = "admission.k8s.io/v1"


def decode_review(raw: bytes) -> dict[str, Any]:
    """An AdmissionReview v1 with a request and its object; ValueError when it is not one."""
    review = json.loads(raw)
    if not isinstance(review, dict) or review.get("apiVersion") != ADMISSION_API_VERSION:
        raise ValueError(f"expected an AdmissionReview of {ADMISSION_API_VERSION}")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ValueError("the AdmissionReview has no request with a uid")
    if not isinstance(request.get("object"), dict):
        # Only CREATE and UPDATE are registered; a request without the object is malformed.
        raise ValueError(f"the AdmissionReview's {request.get('operation') or ''} request carries no object")
    return review


def _in_v1(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """`obj` in ``v1`` when it is a draco object of an older version (else as it is)."""
    if version_of(obj) == VERSION:
        return obj
    try:
        return to_storage(obj)
    except InvalidObjectError:
        return obj


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
    if (
        namespace
        and not structural_errors(v1 := _in_v1(body))
        and _needs_namespace_labels(v1, old, subresource)
    ):
        if namespace_labels is None:
            return f"{describe(body)}: could not retrieve namespace {namespace!r} to verify admin access"
        try:
            labels = await namespace_labels(namespace)
        except DracoError as err:
            return f"{describe(body)}: {err}"
    errors = await asyncio.to_thread(
        validate_as_written, body, old=old, namespace_labels=labels, subresource=subresource
    )
    if not errors:
        return None
    return f"{describe(body)} is invalid: {render_all(errors)}"


def admission_warnings(body: Mapping[str, Any], *, subresource: str | None) -> list[str]:
    """The warnings a write of `body` that may be written gets (kubectl prints them):
    Kubernetes 1.38's for a DeviceTaintRule whose selector selects every device."""
    if subresource or body.get("kind") != "DeviceTaintRule":
        return []
    v1 = _in_v1(body)
    spec = v1.get("spec")
    return taint_rule_warnings(spec) if isinstance(spec, Mapping) else []


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def _stamped_taints(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The spec fields to replace so that every taint has a `timeAdded`, or None."""
    from draco.api.defaults import stamp_taint_times
    from draco.api.load import load_object

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


def _defaulting_changes(body: Mapping[str, Any], *, old: Mapping[str, Any] | None) -> dict[str, Any]:
    """The `spec` fields (top level of `spec`) of a ``v1`` object that defaulting changes,
    with their new values."""
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


def defaulted_spec(body: Mapping[str, Any], *, old: Mapping[str, Any] | None) -> dict[str, Any]:
    """The top-level `spec` fields that defaulting changes, with their new values, in the
    version `body` is written in (defaults are upstream's, applied to the ``v1`` form)."""
    version = version_of(body)
    if version == VERSION:
        return _defaulting_changes(body, old=old)
    try:
        v1, old_v1 = to_storage(body), (to_storage(old) if old is not None else None)
    except InvalidObjectError:
        return {}
    changes = _defaulting_changes(v1, old=old_v1)
    if not changes:
        return {}
    back = convert({**v1, "spec": {**(v1.get("spec") or {}), **changes}}, f"{GROUP}/{version}")
    original = body.get("spec") or {}
    return {k: v for k, v in (back.get("spec") or {}).items() if original.get(k) != v}


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
        defaulted_spec(obj, old=None)
