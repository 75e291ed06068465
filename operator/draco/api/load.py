"""Turning JSON/YAML documents into models: one entry point for files, API responses and
webhook payloads.

``load_object`` dispatches on ``kind`` and accepts both ``resource.draco.dev/v1`` and
``resource.k8s.io/v1`` (the shapes are identical; the object keeps the apiVersion it came
with). Malformed input raises :class:`~draco.errors.InvalidObjectError` naming the kind,
the object and each broken field.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from draco.api.constants import GROUP, NATIVE_GROUP, SUPPORTED_API_VERSIONS
from draco.api.deviceclass import DeviceClass
from draco.api.devicetaintrule import DeviceTaintRule
from draco.api.resourceclaim import ResourceClaim
from draco.api.resourceclaimtemplate import ResourceClaimTemplate
from draco.api.resourceslice import ResourceSlice
from draco.errors import FieldError, InvalidObjectError

__all__ = [
    "KINDS",
    "AnyResource",
    "field_errors",
    "iter_documents",
    "iter_objects",
    "load_object",
]

AnyResource = DeviceClass | ResourceClaim | ResourceClaimTemplate | ResourceSlice | DeviceTaintRule

#: Model class per kind.
KINDS: dict[str, type[AnyResource]] = {
    model.KIND: model
    for model in (DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice, DeviceTaintRule)
}


def _path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith("function-") or part in ("tagged-union", "json-or-python"):
            continue
        else:
            path += f".{part}" if path else part
    return path


def field_errors(error: ValidationError) -> list[FieldError]:
    """A pydantic error as API-server-style field errors (``Required``/``Invalid``)."""
    result = []
    for item in error.errors(include_url=False):
        kind = "Required" if item["type"] == "missing" else "Invalid"
        message = str(item["msg"]).removeprefix("Value error, ")
        value = None if kind == "Required" else item.get("input")
        result.append(FieldError(path=_path(tuple(item["loc"])), type=kind, detail=message, value=value))
    return result


def _describe(data: Mapping[str, Any]) -> str:
    kind = data.get("kind") or "object"
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    if not name:
        return f"{kind} (unnamed)"
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _is_known_group(api_version: object) -> bool:
    return isinstance(api_version, str) and api_version.split("/", 1)[0] in (GROUP, NATIVE_GROUP)


def load_object(data: Mapping[str, Any]) -> AnyResource:
    """Build the model for one object of a kind this API serves."""
    if not isinstance(data, Mapping):
        raise InvalidObjectError(f"expected an object (a mapping), got {type(data).__name__}")
    kind = data.get("kind")
    api_version = data.get("apiVersion")
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidObjectError(
            f"{_describe(data)}: kind {kind!r} is not one of " + ", ".join(sorted(KINDS)),
            errors=[FieldError(path="kind", type="NotSupported", detail="unknown kind", value=kind)],
        )
    if api_version not in SUPPORTED_API_VERSIONS:
        raise InvalidObjectError(
            f"{_describe(data)}: apiVersion {api_version!r} is not supported; use "
            + " or ".join(SUPPORTED_API_VERSIONS),
            errors=[
                FieldError(path="apiVersion", type="NotSupported", detail="unsupported", value=api_version)
            ],
        )
    try:
        return model.from_dict(data)
    except ValidationError as error:
        raise InvalidObjectError(f"{_describe(data)} is invalid", errors=field_errors(error)) from None


def iter_documents(content: str | Mapping[str, Any] | Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    """Every object in YAML/JSON text (multi-document), a mapping or an iterable of them,
    with ``kind: List`` (and ``*List``) items flattened and empty documents skipped."""
    if isinstance(content, str):
        documents: Iterable[Any] = yaml.safe_load_all(content)
    elif isinstance(content, Mapping):
        documents = [content]
    else:
        documents = content
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, Mapping):
            raise InvalidObjectError(f"expected an object (a mapping), got {type(document).__name__}")
        kind = document.get("kind")
        items = document.get("items")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            yield from iter_documents(items)
            continue
        yield document


def iter_objects(
    content: str | Mapping[str, Any] | Iterable[Any], *, ignore_unknown: bool = False
) -> Iterator[AnyResource]:
    """Models for every object in ``content``.

    Objects of other kinds (Nodes, Pods, ...) raise unless ``ignore_unknown``; an object of
    a resource group this API serves with an unsupported version always raises.
    """
    for document in iter_documents(content):
        kind = document.get("kind")
        if ignore_unknown and (kind not in KINDS or not _is_known_group(document.get("apiVersion"))):
            continue
        yield load_object(document)
