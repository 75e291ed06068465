"""`metadata` rules every kind shares: name or generateName, labels, annotations,
finalizers, owner references — the subset of apimachinery's ObjectMeta validation that a
manifest can get wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draco.errors import FieldError
from draco.validation.fielderrors import FieldPath, forbidden, invalid, required, too_long
from draco.validation.formats import check_dns_label, is_dns1123_subdomain, is_label_value, is_qualified_name

__all__ = ["validate_labels_and_annotations", "validate_object_meta", "validate_template_meta"]

_TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
# Finalizers without a domain that Kubernetes itself defines.
_STANDARD_FINALIZERS = {"kubernetes", "orphan", "foregroundDeletion"}


def _check_name(name: str, path: FieldPath, *, prefix: bool) -> list[FieldError]:
    if prefix and name.endswith("-"):
        # A generateName may end in a dash: the server appends the random suffix after it.
        name = name[:-1] + "a"
    return [invalid(path, name, msg) for msg in is_dns1123_subdomain(name)]


def validate_labels_and_annotations(meta: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    for key, value in (meta.get("labels") or {}).items():
        errs.extend(invalid(path.child("labels"), key, msg) for msg in is_qualified_name(key))
        errs.extend(invalid(path.child("labels"), value, msg) for msg in is_label_value(value))
    annotations = meta.get("annotations") or {}
    total = 0
    for key, value in annotations.items():
        errs.extend(invalid(path.child("annotations"), key, msg) for msg in is_qualified_name(key.lower()))
        total += len(key) + len(value)
    if total > _TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(too_long(path.child("annotations"), _TOTAL_ANNOTATION_SIZE_LIMIT))
    return errs


def validate_object_meta(meta: Mapping[str, Any], *, namespaced: bool) -> list[FieldError]:
    """Rules for an object's own metadata (`metadata.*`)."""
    path = FieldPath("metadata")
    errs: list[FieldError] = []
    name = meta.get("name") or ""
    generate_name = meta.get("generateName") or ""
    if generate_name:
        errs.extend(_check_name(generate_name, path.child("generateName"), prefix=True))
    if name:
        errs.extend(_check_name(name, path.child("name"), prefix=False))
    elif not generate_name:
        errs.append(required(path.child("name"), "name or generateName is required"))
    namespace = meta.get("namespace") or ""
    if namespaced and namespace:
        errs.extend(check_dns_label(namespace, path.child("namespace")))
    if (meta.get("generation") or 0) < 0:
        errs.append(
            invalid(path.child("generation"), meta["generation"], "must be greater than or equal to 0")
        )
    errs.extend(validate_labels_and_annotations(meta, path))
    for i, finalizer in enumerate(meta.get("finalizers") or ()):
        fpath = path.child("finalizers").index(i)
        errs.extend(invalid(fpath, finalizer, msg) for msg in is_qualified_name(finalizer))
        if "/" not in finalizer and finalizer not in _STANDARD_FINALIZERS:
            errs.append(
                invalid(
                    fpath, finalizer, "name is neither a standard finalizer name nor is it fully qualified"
                )
            )
    controllers = 0
    for i, ref in enumerate(meta.get("ownerReferences") or ()):
        rpath = path.child("ownerReferences").index(i)
        for key in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(key):
                errs.append(invalid(rpath.child(key), ref.get(key, ""), f"{key} must not be empty"))
        controllers += bool(ref.get("controller"))
    if controllers > 1:
        errs.append(
            invalid(
                path.child("ownerReferences"),
                controllers,
                "Only one reference can have Controller set to true",
            )
        )
    return errs


def validate_template_meta(meta: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    """A template's embedded metadata: only labels and annotations may be set."""
    errs = validate_labels_and_annotations(meta, path)
    for key, value in meta.items():
        if key not in ("labels", "annotations") and value not in (None, "", [], {}, 0):
            errs.append(forbidden(path.child(key), "cannot be set"))
    return errs
