"""Validation of an object as the user wrote it, in any version draco serves: the rules are
``v1``'s (the object is converted first, as the API server stores it), the errors name the
fields of the version the user sent.

A ``v1beta1`` ResourceClaimTemplate refused for its device class is refused at
``spec.spec.devices.requests[0].deviceClassName``, the field the user wrote, not at
``...requests[0].exactly.deviceClassName``, a path ``v1beta1`` does not have
(`draco.api.versions.field_path_in`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draco.api.constants import GROUP, VERSION
from draco.api.versions import SERVED_VERSIONS, V1BETA1, field_name_in, field_path_in, to_storage
from draco.errors import FieldError, InvalidObjectError
from draco.validation.fielderrors import FieldPath, not_supported
from draco.validation.objects import validate_object

__all__ = ["errors_in_version", "validate_as_written", "version_of"]


def version_of(obj: Mapping[str, Any]) -> str:
    """The version of a draco object (``v1`` for anything else, e.g. ``resource.k8s.io/v1``)."""
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    return version if group == GROUP else VERSION


def errors_in_version(errors: list[FieldError], *, kind: str, version: str) -> list[FieldError]:
    """`errors` (of the ``v1`` form of a `kind`) with the paths and field names of `version`."""
    if version == VERSION:
        return errors
    mapped: list[FieldError] = []
    for error in errors:
        detail = error.detail
        if version == V1BETA1:
            detail = detail.replace("`exactly`", f"`{field_name_in(version, 'exactly')}`")
        mapped.append(FieldError(field_path_in(kind, version, error.path), error.type, detail, error.value))
    return mapped


def _in_v1(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if obj is None or version_of(obj) == VERSION:
        return obj
    return to_storage(obj)


def validate_as_written(
    obj: Mapping[str, Any],
    *,
    old: Mapping[str, Any] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
    subresource: str | None = None,
) -> list[FieldError]:
    """`draco.validation.validate_object` of `obj` in whichever served version it is, its
    errors named in that version."""
    if obj.get("kind") not in SERVED_VERSIONS:
        # Workloads, PodGroups and ResourcePoolStatusRequests have one version each.
        return validate_object(obj, old=old, namespace_labels=namespace_labels, subresource=subresource)
    version = version_of(obj)
    try:
        new, previous = _in_v1(obj), _in_v1(old)
    except InvalidObjectError:
        return [not_supported(FieldPath("apiVersion"), obj.get("apiVersion"), [f"{GROUP}/{VERSION}"])]
    assert new is not None
    errors = validate_object(new, old=previous, namespace_labels=namespace_labels, subresource=subresource)
    return errors_in_version(errors, kind=str(obj.get("kind", "")), version=version)
