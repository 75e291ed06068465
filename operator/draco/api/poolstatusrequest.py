"""ResourcePoolStatusRequest: ask once what is free in a driver's pools (cluster-scoped).

Upstream's ``resource.k8s.io/v1alpha3`` kind of Kubernetes 1.37 (KEP-5677), served by draco
as ``resource.draco.dev/v1alpha3``: a user creates a request naming a driver (and perhaps a
pool), the operator computes every matching pool's devices once and writes the answer to
``status`` (condition ``Complete``), the way a CertificateSigningRequest is answered. The
spec never changes and a written status is final: to look again, create a new request.
Requests are deleted an hour after they were answered, and a day after they were made when
nobody answered them.

draco adds four sums of the pools to the status (``totalDevices``, ``allocatedDevices``,
``availableDevices``, ``unavailableDevices``), as ``kubectl get`` shows them: upstream's
printer computes them when it prints, a CRD's printer columns can only read stored fields.
"""

from __future__ import annotations

from typing import ClassVar

from draco.api.constants import KIND_RESOURCE_POOL_STATUS_REQUEST, POOL_STATUS_API_VERSION
from draco.api.meta import ApiModel, Condition, TypedObject
from draco.api.quantity import Quantity

__all__ = [
    "PartitionTypeStatus",
    "PoolStatus",
    "ResourcePoolStatusRequest",
    "ResourcePoolStatusRequestSpec",
    "ResourcePoolStatusRequestStatus",
    "ShareableCapacityStatus",
    "ShareableSummaryStatus",
]


class ResourcePoolStatusRequestSpec(ApiModel):
    """Which pools to report; immutable."""

    driver: str
    """The driver whose pools are reported (a DNS subdomain). Required."""
    pool_name: str | None = None
    """Only the pool of this name."""
    limit: int | None = None
    """At most this many pools are reported, the first by driver and name (1 to 1000; default 100)."""
    default_partition_type_attribute: str | None = None
    """The fully qualified attribute that names a device's partition type in pools whose slices name
    none (``partitionTypeAttribute``)."""


class PartitionTypeStatus(ApiModel):
    """One partition type of a pool: its devices, and how many more of them still fit."""

    attribute: str
    """The attribute whose value is the partition type."""
    type: str
    """The partition type (the attribute's value), e.g. a MIG profile."""
    total: int
    """The pool's devices of this type."""
    allocatable: int
    """How many more devices of this type can be allocated with the counters left (each type is measured
    on its own: the entries are alternatives, not to be added up)."""


class ShareableCapacityStatus(ApiModel):
    """One capacity summed over a pool's devices that allow multiple allocations."""

    name: str
    """The capacity's name, as the devices publish it."""
    total: Quantity
    """What the devices have."""
    consumed: Quantity
    """What allocated shares consume."""
    available: Quantity
    """What is left (never below zero)."""


class ShareableSummaryStatus(ApiModel):
    """A pool's devices that allow multiple allocations."""

    fully_available_devices: int
    """Such devices no claim holds a share of."""
    partially_available_devices: int
    """Such devices some claim holds a share of, however much is left of them."""
    capacity: list[ShareableCapacityStatus] | None = None
    """Their capacities, by name (at most 32)."""


class PoolStatus(ApiModel):
    """One pool's devices at its newest generation."""

    driver: str
    """The pool's driver."""
    pool_name: str
    """The pool's name."""
    generation: int
    """The pool's newest generation."""
    node_name: str | None = None
    """The node whose devices these are; unset for a pool of several nodes."""
    resource_slice_count: int | None = None
    """The slices seen at that generation."""
    total_devices: int | None = None
    """The devices the pool publishes."""
    allocated_devices: int | None = None
    """The devices an allocated claim holds (a shared device counts once)."""
    available_devices: int | None = None
    """``totalDevices - allocatedDevices - unavailableDevices``, at least 0."""
    unavailable_devices: int | None = None
    """The devices with a NoSchedule or NoExecute taint."""
    validation_error: str | None = None
    """Why some of the pool could not be computed, with a machine-readable prefix (at most 256 bytes)."""
    partition_summary: list[PartitionTypeStatus] | None = None
    """Per partition type, for a partitionable pool whose partition types are named (at most 32)."""
    shareable_summary: ShareableSummaryStatus | None = None
    """The pool's devices that allow multiple allocations, when it has some."""


class ResourcePoolStatusRequestStatus(ApiModel):
    """The answer, written once."""

    pool_count: int
    """How many pools matched (``pools`` holds at most ``spec.limit`` of them). Required."""
    pools: list[PoolStatus] | None = None
    """The first matching pools, by driver and name (at most 1000)."""
    conditions: list[Condition] | None = None
    """``Complete`` (the answer is written) or ``Failed`` (it could not be computed); at most 10."""
    total_devices: int | None = None
    """draco: the pools' ``totalDevices`` added up (what ``kubectl get`` shows)."""
    allocated_devices: int | None = None
    """draco: the pools' ``allocatedDevices`` added up."""
    available_devices: int | None = None
    """draco: the pools' ``availableDevices`` added up."""
    unavailable_devices: int | None = None
    """draco: the pools' ``unavailableDevices`` added up."""
    invalid_pools: int | None = None
    """draco: how many pools have a ``validationError``."""


class ResourcePoolStatusRequest(TypedObject):
    """A one-time question: what is free in a driver's pools. The operator writes the answer to its
    status. draco's copy of ``resource.k8s.io/v1alpha3`` ResourcePoolStatusRequest (cluster-scoped)."""

    KIND: ClassVar[str] = KIND_RESOURCE_POOL_STATUS_REQUEST
    NAMESPACED: ClassVar[bool] = False
    DEFAULT_API_VERSION: ClassVar[str] = POOL_STATUS_API_VERSION

    spec: ResourcePoolStatusRequestSpec
    """Which pools to report. Required."""
    status: ResourcePoolStatusRequestStatus | None = None
    """The answer; unset until the operator has computed it."""
