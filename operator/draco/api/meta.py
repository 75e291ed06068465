"""Shared building blocks of every kind: the model base, object metadata, times, node
selectors and conditions.

All models follow one convention so that what the API server returns dumps back
unchanged: Python attributes are snake_case with the exact camelCase JSON names as
aliases; an absent field is ``None`` (never an empty default), fields this version does
not know are kept (``extra="allow"``) and written back; ``to_dict()`` writes camelCase,
leaves out ``None`` fields and writes quantities as strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, model_validator
from pydantic.alias_generators import to_camel

from draco.api.bodies import object_key
from draco.api.constants import API_VERSION

__all__ = [
    "ApiModel",
    "Condition",
    "JSONValue",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectMeta",
    "OwnerReference",
    "Time",
    "TypedObject",
    "format_time",
]

#: Any JSON value, kept verbatim (opaque driver parameters, status data, managedFields).
JSONValue = Any


def _as_utc(value: datetime) -> datetime:
    # The API server speaks UTC; a naive datetime from Python code means UTC as well.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC the way the API server writes ``metav1.Time`` (``...Z``; fractional
    seconds only when present, as in ``metav1.MicroTime``)."""
    value = _as_utc(value)
    if value.microsecond:
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


#: A ``metav1.Time``: parsed to an aware UTC datetime, written back as RFC 3339 ``Z``.
Time = Annotated[datetime, AfterValidator(_as_utc), PlainSerializer(format_time, return_type=str)]


class ApiModel(BaseModel):
    """Base of every API model: camelCase aliases, unknown fields kept, exact round-trip."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        validate_default=False,
        ser_json_inf_nan="strings",
        # The string literal under each field is its description; `draco.api.crds` reads
        # them from the source. Not `use_attribute_docstrings`: that re-reads the source
        # for every class and doubles the import time of every draco process.
    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build from the JSON shape (camelCase keys), applying upstream's defaults."""
        return cls.model_validate(data)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: camelCase keys, ``None`` fields left out, quantities as strings."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class OwnerReference(ApiModel):
    """``metav1.OwnerReference``: an object this one depends on (garbage collection)."""

    api_version: str
    """API version of the owner."""
    kind: str
    """Kind of the owner."""
    name: str
    """Name of the owner."""
    uid: str
    """UID of the owner."""
    controller: bool | None = None
    """True if the owner is the managing controller; at most one owner reference may say so."""
    block_owner_deletion: bool | None = None
    """If true, the owner cannot be deleted in the foreground before this object is removed."""


class ObjectMeta(ApiModel):
    """``metav1.ObjectMeta``; ``managedFields`` and anything else are kept verbatim."""

    name: str | None = None
    """Name of the object, unique within its namespace (or the cluster)."""
    generate_name: str | None = None
    """Prefix from which the API server generates a unique name when ``name`` is empty."""
    namespace: str | None = None
    """Namespace of a namespaced object."""
    uid: str | None = None
    """Unique ID the API server assigns; never reused."""
    resource_version: str | None = None
    """Opaque version of the object, for optimistic concurrency and watches."""
    generation: int | None = None
    """Sequence number of the desired state, bumped by the API server on spec changes."""
    creation_timestamp: Time | None = None
    """When the object was created (set by the API server)."""
    deletion_timestamp: Time | None = None
    """When deletion was requested; the object is gone once its finalizers are removed."""
    deletion_grace_period_seconds: int | None = None
    """Seconds the object is given to terminate gracefully before it is removed."""
    labels: dict[str, str] | None = None
    """Key/value pairs for organizing and selecting objects."""
    annotations: dict[str, str] | None = None
    """Key/value pairs for arbitrary, non-identifying metadata."""
    owner_references: list[OwnerReference] | None = None
    """Objects this one depends on; it is garbage-collected when they are all gone."""
    finalizers: list[str] | None = None
    """Keys that must be removed before the object is deleted from storage."""
    managed_fields: list[dict[str, JSONValue]] | None = None
    """Server-side apply field ownership, kept verbatim."""


class Condition(ApiModel):
    """``metav1.Condition``."""

    type: str
    """Type of the condition in CamelCase, e.g. ``Ready``; unique within the list."""
    status: str
    """``True``, ``False`` or ``Unknown``."""
    observed_generation: int | None = None
    """The ``metadata.generation`` the condition was set for."""
    last_transition_time: Time | None = None
    """When the status last changed."""
    reason: str | None = None
    """Machine-readable CamelCase reason for the last transition."""
    message: str | None = None
    """Human-readable details about the last transition."""


class NodeSelectorRequirement(ApiModel):
    """``core/v1.NodeSelectorRequirement``: a key, an operator and values."""

    key: str
    """The label key (or, in ``matchFields``, the field name) the requirement applies to."""
    operator: str
    """How the key relates to the values: In, NotIn, Exists, DoesNotExist, Gt or Lt."""
    values: list[str] | None = None
    """The values: some for In and NotIn, none for Exists and DoesNotExist, one integer for Gt and Lt."""


class NodeSelectorTerm(ApiModel):
    """``core/v1.NodeSelectorTerm``: requirements that are ANDed."""

    match_expressions: list[NodeSelectorRequirement] | None = None
    """Requirements on node labels."""
    match_fields: list[NodeSelectorRequirement] | None = None
    """Requirements on node fields (``metadata.name``)."""


class NodeSelector(ApiModel):
    """``core/v1.NodeSelector``: the terms are ORed, the requirements within a term ANDed."""

    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)
    """The terms; a node matches if it matches any of them."""


class TypedObject(ApiModel):
    """A top-level object: apiVersion, kind, metadata. Subclasses set ``KIND``."""

    KIND: ClassVar[str] = ""
    NAMESPACED: ClassVar[bool] = False
    #: The apiVersion an object built without one gets.
    DEFAULT_API_VERSION: ClassVar[str] = API_VERSION

    api_version: str | None = None
    """Versioned schema of this representation of the object."""
    kind: str | None = None
    """REST resource this object represents."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""

    @model_validator(mode="after")
    def _fill_type_meta(self) -> Self:
        if self.kind is None:
            self.kind = self.KIND
        elif self.kind != self.KIND:
            raise ValueError(f"kind must be {self.KIND!r} for this model, not {self.kind!r}")
        if self.api_version is None:
            self.api_version = self.DEFAULT_API_VERSION
        return self

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        """``namespace/name`` for namespaced objects, ``name`` otherwise (for logs)."""
        return object_key(self.metadata.namespace, self.name)

    def to_dict(self, *, api_version: str | None = None) -> dict[str, Any]:
        """The JSON shape; ``api_version`` overrides the apiVersion written."""
        data = super().to_dict()
        if api_version is not None:
            data["apiVersion"] = api_version
        return data
