"""ResourceClaim and ResourceClaimTemplate rules: the claim spec (requests, subrequests,
constraints, configs and the references between them), its immutability, and the status
(allocation results, reservations, device status).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draco.api.constants import (
    ALLOCATION_CONFIG_MAX_SIZE,
    ALLOCATION_CONFIG_SOURCES,
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    ALLOCATION_RESULTS_MAX_SIZE,
    DEVICE_CONFIG_MAX_SIZE,
    DEVICE_CONSTRAINTS_MAX_SIZE,
    DEVICE_REQUESTS_MAX_SIZE,
    DEVICE_STATUS_CONDITIONS_MAX,
    DEVICE_STATUS_DATA_MAX_BYTES,
    FIRST_AVAILABLE_MAX,
    NETWORK_HARDWARE_ADDRESS_MAX_BYTES,
    NETWORK_INTERFACE_NAME_MAX_BYTES,
    NETWORK_IPS_MAX,
    REQUEST_REFERENCES_MAX_SIZE,
    RESERVED_FOR_MAX_SIZE,
)
from draco.errors import FieldError
from draco.validation.common import (
    validate_binding_conditions,
    validate_conditions,
    validate_device_configuration,
    validate_device_toleration,
    validate_list,
    validate_node_selector,
    validate_raw_object,
    validate_selectors,
    validate_set,
    validate_string_set,
)
from draco.validation.fielderrors import (
    NO_VALUE,
    FieldPath,
    forbidden,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
)
from draco.validation.formats import (
    check_device_name,
    check_dns_subdomain,
    check_driver_name,
    check_fully_qualified_name,
    check_interface_address,
    check_pool_name,
    check_qualified_name,
    check_uuid,
)
from draco.validation.meta import validate_template_meta

__all__ = [
    "RequestNames",
    "gather_request_names",
    "validate_claim_spec",
    "validate_claim_status_update",
    "validate_template_spec",
]

REFERENCE_DETAIL = (
    "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"
)

#: request name -> subrequest names (None when the request has no firstAvailable).
RequestNames = dict[str, frozenset[str] | None]


def gather_request_names(spec: Mapping[str, Any]) -> RequestNames:
    names: RequestNames = {}
    for request in (spec.get("devices") or {}).get("requests") or ():
        subs = request.get("firstAvailable") or []
        names[request.get("name") or ""] = frozenset(s.get("name") or "" for s in subs) if subs else None
    return names


def _has_reference(names: RequestNames, reference: str) -> bool:
    segments = reference.split("/")
    if len(segments) > 2 or segments[0] not in names:
        return False
    if len(segments) == 1:
        return True
    subs = names[segments[0]]
    return subs is not None and segments[1] in subs


def _validate_reference(reference: str, path: FieldPath, names: RequestNames) -> list[FieldError]:
    segments = reference.split("/")
    if len(segments) > 2:
        return [invalid(path, reference, REFERENCE_DETAIL)]
    errs: list[FieldError] = []
    for segment in segments:
        errs.extend(check_device_name(segment, path))
    if not _has_reference(names, reference):
        errs.append(invalid(path, reference, REFERENCE_DETAIL))
    return errs


def _validate_references(references: list[str], path: FieldPath, names: RequestNames) -> list[FieldError]:
    return validate_string_set(
        references, REQUEST_REFERENCES_MAX_SIZE, lambda r, p: _validate_reference(r, p, names), path
    )


# --- spec ------------------------------------------------------------------------------------


def _validate_allocation_mode(request: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    mode = request.get("allocationMode") or ""
    count = request.get("count") or 0
    if mode == ALLOCATION_MODE_ALL:
        if count != 0:
            return [
                invalid(path.child("count"), count, f"must not be specified when allocationMode is '{mode}'")
            ]
    elif mode == ALLOCATION_MODE_EXACT_COUNT:
        if count <= 0:
            return [invalid(path.child("count"), count, "must be greater than zero")]
    else:
        return [
            not_supported(
                path.child("allocationMode"), mode, [ALLOCATION_MODE_ALL, ALLOCATION_MODE_EXACT_COUNT]
            )
        ]
    return []


def _validate_request_body(request: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    """What ExactDeviceRequest and DeviceSubRequest share."""
    errs: list[FieldError] = []
    class_name = request.get("deviceClassName") or ""
    if not class_name:
        errs.append(required(path.child("deviceClassName")))
    else:
        errs.extend(check_dns_subdomain(class_name, path.child("deviceClassName")))
    errs.extend(validate_selectors(request.get("selectors") or [], path.child("selectors"), stored=False))
    errs.extend(_validate_allocation_mode(request, path))
    for name in (request.get("capacity") or {}).get("requests") or {}:
        # kube-apiserver 1.37 checks nothing of these keys; 1.38 checks them as the qualified
        # names they are (kubernetes/kubernetes#140563; a spec is validated on create only:
        # stored names stay). A key
        # `<driver>/<capacity>` names the capacity `<capacity>` of devices of that driver
        # (`draco.allocator.capacity`).
        errs.extend(check_qualified_name(str(name), path.child("capacity", "requests")))
    for i, toleration in enumerate(request.get("tolerations") or ()):
        errs.extend(validate_device_toleration(toleration, path.child("tolerations").index(i)))
    return errs


def _validate_subrequest(sub: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs = check_device_name(sub.get("name") or "", path.child("name"))
    errs.extend(_validate_request_body(sub, path))
    return errs


def _validate_request(request: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs = check_device_name(request.get("name") or "", path.child("name"))
    first_available = request.get("firstAvailable") or []
    exactly = request.get("exactly")
    set_count = bool(first_available) + (exactly is not None)
    if set_count == 0:
        errs.append(required(path, "exactly one of `exactly` or `firstAvailable` is required"))
    elif set_count > 1:
        errs.append(
            invalid(
                path,
                NO_VALUE,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            )
        )
    elif first_available:
        errs.extend(
            validate_set(
                first_available,
                FIRST_AVAILABLE_MAX,
                _validate_subrequest,
                lambda s: s.get("name") or "",
                path.child("firstAvailable"),
            )
        )
    else:
        assert exactly is not None
        errs.extend(_validate_request_body(exactly, path.child("exactly")))
    return errs


def _validate_constraint(
    constraint: Mapping[str, Any], path: FieldPath, names: RequestNames
) -> list[FieldError]:
    errs = _validate_references(constraint.get("requests") or [], path.child("requests"), names)
    match = constraint.get("matchAttribute")
    distinct = constraint.get("distinctAttribute")
    # With both set, upstream checks matchAttribute and accepts (matchAttribute wins).
    if match is not None:
        errs.extend(check_fully_qualified_name(match, path.child("matchAttribute")))
    elif distinct is not None:
        errs.extend(check_fully_qualified_name(distinct, path.child("distinctAttribute")))
    else:
        errs.append(required(path, 'exactly one of "matchAttribute" or "distinctAttribute" is required'))
    return errs


def _validate_claim_config(
    config: Mapping[str, Any], path: FieldPath, names: RequestNames, *, stored: bool
) -> list[FieldError]:
    errs = _validate_references(config.get("requests") or [], path.child("requests"), names)
    errs.extend(validate_device_configuration(config, path, stored=stored))
    return errs


def validate_claim_spec(
    spec: Mapping[str, Any], path: FieldPath, *, stored: bool = False
) -> list[FieldError]:
    """A ResourceClaimSpec (also the `spec.spec` of a template)."""
    devices = spec.get("devices") or {}
    dpath = path.child("devices")
    names = gather_request_names(spec)
    errs = validate_set(
        devices.get("requests") or [],
        DEVICE_REQUESTS_MAX_SIZE,
        _validate_request,
        lambda r: r.get("name") or "",
        dpath.child("requests"),
    )
    errs.extend(
        validate_list(
            devices.get("constraints") or [],
            DEVICE_CONSTRAINTS_MAX_SIZE,
            lambda c, p: _validate_constraint(c, p, names),
            dpath.child("constraints"),
        )
    )
    errs.extend(
        validate_list(
            devices.get("config") or [],
            DEVICE_CONFIG_MAX_SIZE,
            lambda c, p: _validate_claim_config(c, p, names, stored=stored),
            dpath.child("config"),
        )
    )
    return errs


def validate_template_spec(spec: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs = validate_template_meta(spec.get("metadata") or {}, path.child("metadata"))
    errs.extend(validate_claim_spec(spec.get("spec") or {}, path.child("spec")))
    return errs


# --- status ----------------------------------------------------------------------------------


def _device_id(entry: Mapping[str, Any]) -> tuple[str, str, str, str | None]:
    return (
        entry.get("driver") or "",
        entry.get("pool") or "",
        entry.get("device") or "",
        entry.get("shareID"),
    )


def _validate_result(result: Mapping[str, Any], path: FieldPath, names: RequestNames) -> list[FieldError]:
    errs = _validate_reference(result.get("request") or "", path.child("request"), names)
    errs.extend(check_driver_name(result.get("driver") or "", path.child("driver")))
    errs.extend(check_pool_name(result.get("pool") or "", path.child("pool")))
    errs.extend(check_device_name(result.get("device") or "", path.child("device")))
    errs.extend(validate_binding_conditions(result, path))
    for i, toleration in enumerate(result.get("tolerations") or ()):
        errs.extend(validate_device_toleration(toleration, path.child("tolerations").index(i)))
    if result.get("shareID") is not None:
        errs.extend(check_uuid(result["shareID"], path.child("shareID")))
    for name in result.get("consumedCapacity") or {}:
        errs.extend(check_qualified_name(name, path.child("consumedCapacity")))
    return errs


def _validate_allocation_config(
    config: Mapping[str, Any], path: FieldPath, names: RequestNames
) -> list[FieldError]:
    errs: list[FieldError] = []
    source = config.get("source") or ""
    if not source:
        errs.append(required(path.child("source")))
    elif source not in ALLOCATION_CONFIG_SOURCES:
        errs.append(not_supported(path.child("source"), source, ALLOCATION_CONFIG_SOURCES))
    errs.extend(_validate_references(config.get("requests") or [], path.child("requests"), names))
    errs.extend(validate_device_configuration(config, path, stored=False))
    return errs


def _validate_new_allocation(
    allocation: Mapping[str, Any], path: FieldPath, names: RequestNames
) -> list[FieldError]:
    devices = allocation.get("devices") or {}
    dpath = path.child("devices")
    errs = validate_list(
        devices.get("results") or [],
        ALLOCATION_RESULTS_MAX_SIZE,
        lambda r, p: _validate_result(r, p, names),
        dpath.child("results"),
    )
    errs.extend(
        validate_list(
            devices.get("config") or [],
            ALLOCATION_CONFIG_MAX_SIZE,
            lambda c, p: _validate_allocation_config(c, p, names),
            dpath.child("config"),
        )
    )
    if allocation.get("nodeSelector") is not None:
        errs.extend(validate_node_selector(allocation["nodeSelector"], path.child("nodeSelector")))
    return errs


def _validate_reservation(ref: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    for key in ("resource", "name", "uid"):
        if not ref.get(key):
            errs.append(required(path.child(key)))
    return errs


def _validate_network_data(data: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    if len((data.get("interfaceName") or "").encode()) > NETWORK_INTERFACE_NAME_MAX_BYTES:
        errs.append(too_long(path.child("interfaceName"), NETWORK_INTERFACE_NAME_MAX_BYTES))
    if len((data.get("hardwareAddress") or "").encode()) > NETWORK_HARDWARE_ADDRESS_MAX_BYTES:
        errs.append(too_long(path.child("hardwareAddress"), NETWORK_HARDWARE_ADDRESS_MAX_BYTES))
    errs.extend(
        validate_string_set(
            data.get("ips") or [], NETWORK_IPS_MAX, check_interface_address, path.child("ips")
        )
    )
    return errs


def _validate_device_status(
    entry: Mapping[str, Any], path: FieldPath, allocated: set[tuple[str, str, str, str | None]]
) -> list[FieldError]:
    errs = check_driver_name(entry.get("driver") or "", path.child("driver"))
    errs.extend(check_pool_name(entry.get("pool") or "", path.child("pool")))
    errs.extend(check_device_name(entry.get("device") or "", path.child("device")))
    if entry.get("shareID") is not None:
        errs.extend(check_uuid(entry["shareID"], path.child("shareID")))
    device_id = _device_id(entry)
    if device_id not in allocated:
        shown = "/".join(p for p in device_id if p)
        errs.append(invalid(path, shown, "must be an allocated device in the claim"))
    conditions = entry.get("conditions") or []
    if len(conditions) > DEVICE_STATUS_CONDITIONS_MAX:
        errs.append(too_many(path.child("conditions"), len(conditions), DEVICE_STATUS_CONDITIONS_MAX))
    errs.extend(validate_conditions(conditions, path.child("conditions")))
    if entry.get("data") is not None:
        errs.extend(
            validate_raw_object(
                entry["data"], path.child("data"), max_bytes=DEVICE_STATUS_DATA_MAX_BYTES, stored=False
            )
        )
    if entry.get("networkData") is not None:
        errs.extend(_validate_network_data(entry["networkData"], path.child("networkData")))
    return errs


def validate_claim_status_update(
    status: Mapping[str, Any],
    old_status: Mapping[str, Any],
    *,
    spec: Mapping[str, Any],
    deleting: bool,
    path: FieldPath | None = None,
) -> list[FieldError]:
    """A write to `status`: reservations, device status, and the allocation, which is
    immutable once set (new allocations are validated strictly, stored ones not again)."""
    path = path if path is not None else FieldPath("status")
    names = gather_request_names(spec)
    reserved = status.get("reservedFor") or []
    errs = validate_set(
        reserved,
        RESERVED_FOR_MAX_SIZE,
        _validate_reservation,
        lambda r: r.get("uid") or "",
        path.child("reservedFor"),
    )
    allocation = status.get("allocation")
    allocated: set[tuple[str, str, str, str | None]] = set()
    if allocation is not None:
        for result in (allocation.get("devices") or {}).get("results") or ():
            allocated.add(_device_id(result))
    errs.extend(
        validate_set(
            status.get("devices") or [],
            -1,
            lambda d, p: _validate_device_status(d, p, allocated),
            _device_id,
            path.child("devices"),
        )
    )
    if reserved:
        if allocation is None:
            errs.append(
                forbidden(path.child("reservedFor"), "may not be specified when `allocated` is not set")
            )
        elif deleting:
            old_uids = {r.get("uid") for r in old_status.get("reservedFor") or ()}
            if any(r.get("uid") not in old_uids for r in reserved):
                errs.append(
                    forbidden(
                        path.child("reservedFor"),
                        "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set",
                    )
                )
    old_allocation = old_status.get("allocation")
    if old_allocation is not None and allocation is not None:
        if allocation != old_allocation:
            errs.append(invalid(path.child("allocation"), NO_VALUE, "field is immutable"))
    elif allocation is not None:
        errs.extend(_validate_new_allocation(allocation, path.child("allocation"), names))
    return errs
