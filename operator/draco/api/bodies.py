"""Typed views of the JSON bodies the processes read without parsing them into the
models: what `metadata` holds, an owner reference, a `reservedFor` entry.

The operator reads thousands of pods and claims as the API sends them (plain JSON, kept
by its informers): validating each into the pydantic models (`draco.api.meta`) would cost
more than the rest of its work. These TypedDicts give the type checker the field names
and types at that boundary instead: :func:`meta_of` is ``obj["metadata"]`` (or an empty
one) as an :class:`ObjectMetaBody`, so a misspelt field or a wrong type is an error, not
a silent ``None``. They describe the wire form (camelCase) and are views, not copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

__all__ = ["ObjectMetaBody", "OwnerReferenceBody", "ReferenceBody", "meta_of", "reserved_for"]


class OwnerReferenceBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMetaBody(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReferenceBody]
    finalizers: list[str]
    managedFields: list[dict[str, Any]]


class ReferenceBody(TypedDict, total=False):
    """An entry of a claim's ``status.reservedFor`` (upstream's ResourceClaimConsumerReference)."""

    apiGroup: str
    resource: str
    name: str
    uid: str


def meta_of(obj: Mapping[str, Any]) -> ObjectMetaBody:
    """The object's ``metadata`` (an empty one when it has none), typed."""
    return cast(ObjectMetaBody, obj.get("metadata") or {})


def reserved_for(claim: Mapping[str, Any]) -> list[ReferenceBody]:
    """The claim's ``status.reservedFor`` (empty when it has none), typed."""
    return cast(list[ReferenceBody], (claim.get("status") or {}).get("reservedFor") or [])
