"""ResourcePoolStatusRequest: the API server's rules for upstream's ``resource.k8s.io/v1alpha3``
kind (Kubernetes 1.37, KEP-5677), as field errors, for draco's copy under
``resource.draco.dev/v1alpha3``.

The structural pass first (unknown fields, wrong types), then: ``spec.driver`` is a driver
name, ``poolName`` a pool name, ``limit`` 1 to 1000 (100 when unset),
``defaultPartitionTypeAttribute`` a fully qualified name; the spec is immutable. The status
is written once: while unset anything well-formed may be written (at most 1000 pools, 10
conditions, 32 partition types and capacities per pool, a ``validationError`` of at most 256
bytes), once set it never changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draco.api.constants import (
    KIND_RESOURCE_POOL_STATUS_REQUEST,
    NATIVE_POOL_STATUS_API_VERSION,
    POOL_STATUS_API_VERSION,
    POOL_STATUS_CONDITIONS_MAX,
    POOL_STATUS_LIMIT_DEFAULT,
    POOL_STATUS_LIST_MAX,
    POOL_STATUS_MAX_POOLS,
    POOL_STATUS_VALIDATION_ERROR_MAX_BYTES,
)
from draco.errors import FieldError
from draco.validation.common import validate_conditions
from draco.validation.fielderrors import (
    NO_VALUE,
    FieldPath,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
)
from draco.validation.formats import check_driver_name, check_fully_qualified_name, check_pool_name
from draco.validation.meta import validate_object_meta
from draco.validation.schema import INT, QUANTITY, RAW, STRING, ListOf, Obj, check_shape
from draco.validation.shapes import CONDITION

__all__ = ["POOL_STATUS_API_VERSIONS", "POOL_STATUS_KINDS", "validate_pool_status_request"]

POOL_STATUS_KINDS = (KIND_RESOURCE_POOL_STATUS_REQUEST,)
#: draco's apiVersion and upstream's (the shapes are the same but draco's sums).
POOL_STATUS_API_VERSIONS = (POOL_STATUS_API_VERSION, NATIVE_POOL_STATUS_API_VERSION)

_SPEC = FieldPath("spec")
_STATUS = FieldPath("status")

_POOL = Obj(
    "PoolStatus",
    {
        "driver": STRING,
        "poolName": STRING,
        "generation": INT,
        "nodeName": STRING,
        "resourceSliceCount": INT,
        "totalDevices": INT,
        "allocatedDevices": INT,
        "availableDevices": INT,
        "unavailableDevices": INT,
        "validationError": STRING,
        "partitionSummary": ListOf(
            Obj(
                "PartitionTypeStatus", {"attribute": STRING, "type": STRING, "total": INT, "allocatable": INT}
            )
        ),
        "shareableSummary": Obj(
            "ShareableSummaryStatus",
            {
                "fullyAvailableDevices": INT,
                "partiallyAvailableDevices": INT,
                "capacity": ListOf(
                    Obj(
                        "ShareableCapacityStatus",
                        {"name": STRING, "total": QUANTITY, "consumed": QUANTITY, "available": QUANTITY},
                    )
                ),
            },
        ),
    },
)
SHAPE = Obj(
    KIND_RESOURCE_POOL_STATUS_REQUEST,
    {
        "apiVersion": STRING,
        "kind": STRING,
        "metadata": RAW,
        "spec": Obj(
            "ResourcePoolStatusRequestSpec",
            {"driver": STRING, "poolName": STRING, "limit": INT, "defaultPartitionTypeAttribute": STRING},
        ),
        "status": Obj(
            "ResourcePoolStatusRequestStatus",
            {
                "poolCount": INT,
                "pools": ListOf(_POOL),
                "conditions": ListOf(CONDITION),
                "totalDevices": INT,
                "allocatedDevices": INT,
                "availableDevices": INT,
                "unavailableDevices": INT,
                "invalidPools": INT,
            },
        ),
    },
)


def validate_pool_status_request(
    obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None, subresource: str | None = None
) -> list[FieldError]:
    """Every broken rule of a ResourcePoolStatusRequest (empty: the API server would accept it)."""
    if obj.get("apiVersion") not in POOL_STATUS_API_VERSIONS:
        return [not_supported(FieldPath("apiVersion"), obj.get("apiVersion"), POOL_STATUS_API_VERSIONS)]
    errs = check_shape(SHAPE, obj, FieldPath())
    if errs:
        return errs
    if subresource == "status":
        return _status_update(obj.get("status"), (old or {}).get("status"))
    errs = validate_object_meta(obj.get("metadata") or {}, namespaced=False)
    spec = obj.get("spec") or {}
    if old is not None:
        if spec != (old.get("spec") or {}):
            errs.append(invalid(_SPEC, NO_VALUE, "field is immutable"))
        return errs
    return errs + _spec(spec)


def _spec(spec: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    errs.extend(check_driver_name(str(spec.get("driver") or ""), _SPEC.child("driver")))
    if spec.get("poolName") is not None:
        errs.extend(check_pool_name(str(spec["poolName"]), _SPEC.child("poolName")))
    limit = spec.get("limit", POOL_STATUS_LIMIT_DEFAULT)
    if not 1 <= int(limit) <= POOL_STATUS_MAX_POOLS:
        errs.append(
            invalid(_SPEC.child("limit"), limit, f"must be between 1 and {POOL_STATUS_MAX_POOLS}, inclusive")
        )
    attribute = spec.get("defaultPartitionTypeAttribute")
    if attribute is not None:
        errs.extend(check_fully_qualified_name(str(attribute), _SPEC.child("defaultPartitionTypeAttribute")))
    return errs


def _status_update(status: Mapping[str, Any] | None, old: Mapping[str, Any] | None) -> list[FieldError]:
    if old:
        # Written once: the answer of a request never changes (create a new request instead).
        return [] if status == old else [invalid(_STATUS, NO_VALUE, "field is immutable once set")]
    if not status:
        return []
    errs: list[FieldError] = []
    if status.get("poolCount") is None:
        errs.append(required(_STATUS.child("poolCount")))
    elif int(status["poolCount"]) < 0:
        errs.append(
            invalid(_STATUS.child("poolCount"), status["poolCount"], "must be greater than or equal to 0")
        )
    pools = status.get("pools") or []
    if len(pools) > POOL_STATUS_MAX_POOLS:
        errs.append(too_many(_STATUS.child("pools"), len(pools), POOL_STATUS_MAX_POOLS))
    for i, pool in enumerate(pools):
        errs.extend(_pool(pool, _STATUS.child("pools").index(i)))
    conditions = status.get("conditions") or []
    errs.extend(validate_conditions(conditions, _STATUS.child("conditions")))
    if len(conditions) > POOL_STATUS_CONDITIONS_MAX:
        errs.append(too_many(_STATUS.child("conditions"), len(conditions), POOL_STATUS_CONDITIONS_MAX))
    return errs


def _pool(pool: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    for name in ("driver", "poolName"):
        if not pool.get(name):
            errs.append(required(path.child(name)))
    if pool.get("generation") is None:
        errs.append(required(path.child("generation")))
    error = pool.get("validationError")
    if error is not None and len(str(error).encode()) > POOL_STATUS_VALIDATION_ERROR_MAX_BYTES:
        errs.append(too_long(path.child("validationError"), POOL_STATUS_VALIDATION_ERROR_MAX_BYTES))
    partitions = pool.get("partitionSummary") or []
    if len(partitions) > POOL_STATUS_LIST_MAX:
        errs.append(too_many(path.child("partitionSummary"), len(partitions), POOL_STATUS_LIST_MAX))
    capacity = (pool.get("shareableSummary") or {}).get("capacity") or []
    if len(capacity) > POOL_STATUS_LIST_MAX:
        errs.append(too_many(path.child("shareableSummary", "capacity"), len(capacity), POOL_STATUS_LIST_MAX))
    return errs
