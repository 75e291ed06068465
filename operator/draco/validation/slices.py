"""ResourceSlice rules: driver and pool, the one-of node selection, device limits
(128, or 64 with taints, counter consumption or list attributes), attributes and
capacities, consumable-capacity request policies, counters, taints, binding conditions.

On update, driver, pool name and node name are immutable, and the devices are validated
as Kubernetes 1.38 validates them (kubernetes/kubernetes#141644): an unchanged device list
is accepted as it is stored, any change to it (a device added, changed, or the list merely
reordered) validates every device in it, and a change of ``perDeviceNodeSelection`` alone
validates the devices' node selection. So rules newer than an object (1.38's: a device's
own node selector has exactly one term, names have at most one slash) hold it to them only
once its devices change. Kubernetes 1.37 ratcheted capacities and taints per device.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from draco.api.constants import (
    ATTRIBUTES_AND_CAPACITIES_MAX,
    CAPACITY_VALID_VALUES_MAX,
    CONSUMES_COUNTERS_MAX,
    COUNTERS_PER_SET_MAX,
    DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH,
    LIST_ATTRIBUTE_VALUES_MAX,
    RESOURCE_SLICE_MAX_DEVICES,
    RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS,
    SHARED_COUNTERS_MAX,
    TAINTS_MAX,
)
from draco.api.quantity import Quantity
from draco.errors import FieldError
from draco.validation.common import (
    validate_binding_conditions,
    validate_device_taint,
    validate_list,
    validate_node_selector,
    validate_set,
)
from draco.validation.fielderrors import NO_VALUE, FieldPath, forbidden, invalid, required, too_long, too_many
from draco.validation.formats import (
    check_device_name,
    check_driver_name,
    check_node_name,
    check_pool_name,
    check_qualified_name,
)

__all__ = ["validate_slice_spec"]

_LIST_ATTRIBUTE_KINDS = ("bools", "ints", "strings", "versions")
_NUMERIC = r"(0|[1-9]\d*)"
_PRERELEASE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD = r"[0-9a-zA-Z-]+"
_SEMVER = re.compile(
    rf"^{_NUMERIC}\.{_NUMERIC}\.{_NUMERIC}(-{_PRERELEASE}(\.{_PRERELEASE})*)?(\+{_BUILD}(\.{_BUILD})*)?$"
)
_INT64_MAX = 2**63 - 1
_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
_ONE_OF_NODE_SELECTION = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
)
_DEVICE_ONE_OF = (
    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` "
    "is set to true in the ResourceSlice spec"
)


def _is_semver(text: str) -> bool:
    return _SEMVER.fullmatch(text) is not None


def _q(value: Any) -> Quantity:
    return value if isinstance(value, Quantity) else Quantity(value if isinstance(value, str) else str(value))


def _show(q: Quantity) -> str:
    return q.to_json()


# --- attributes --------------------------------------------------------------------------------


def _check_string_value(value: str, path: FieldPath) -> list[FieldError]:
    if len(value) > DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH:
        return [too_long(path, DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)]
    return []


def _check_version_value(value: str, path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    if not _is_semver(value):
        errs.append(invalid(path, value, "must be a string compatible with semver.org spec 2.0.0"))
    errs.extend(_check_string_value(value, path))
    return errs


def _validate_attribute(attribute: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    set_fields = 0
    for scalar in ("bool", "int"):
        set_fields += attribute.get(scalar) is not None
    if attribute.get("string") is not None:
        set_fields += 1
        errs.extend(_check_string_value(attribute["string"], path.child("string")))
    if attribute.get("version") is not None:
        set_fields += 1
        errs.extend(_check_version_value(attribute["version"], path.child("version")))
    for kind in _LIST_ATTRIBUTE_KINDS:
        values = attribute.get(kind)
        if values is None:
            continue
        set_fields += 1
        if not values:
            errs.append(invalid(path.child(kind), values, "must not be empty if specified"))
        for i, item in enumerate(values):
            if kind == "strings":
                errs.extend(_check_string_value(item, path.child(kind).index(i)))
            elif kind == "versions":
                errs.extend(_check_version_value(item, path.child(kind).index(i)))
    if set_fields != 1:
        errs.append(
            invalid(path, NO_VALUE if set_fields == 0 else attribute, "exactly one value must be specified")
        )
    return errs


def _attribute_values(device: Mapping[str, Any]) -> int:
    count = 0
    for attribute in (device.get("attributes") or {}).values():
        lists = sum(len(attribute.get(kind) or ()) for kind in _LIST_ATTRIBUTE_KINDS)
        count += lists if lists else 1
    return count


# --- capacity and request policy ----------------------------------------------------------------


def _validate_valid_values(
    default: Quantity, capacity: Quantity, values: list[Quantity], path: FieldPath
) -> list[FieldError]:
    errs: list[FieldError] = []
    for i in range(len(values) - 1):
        if values[i].compare(values[i + 1]) > 0:
            errs.append(
                invalid(path.index(i + 1), _show(values[i + 1]), "values must be sorted in ascending order")
            )
    if len(values) > CAPACITY_VALID_VALUES_MAX:
        errs.append(too_many(path, len(values), CAPACITY_VALID_VALUES_MAX))
        found_default = False
    else:
        found_default = False
        seen: set[Fraction] = set()
        for i, option in enumerate(values):
            if option.compare(capacity) > 0:
                errs.append(
                    invalid(
                        path.index(i),
                        _show(option),
                        f"option is larger than capacity value: {_show(capacity)}",
                    )
                )
            if option.compare(default) == 0:
                found_default = True
            key = option.as_fraction()
            if key in seen:
                errs.append(invalid(path.index(i), _show(option), "duplicate value"))
            seen.add(key)
    if not found_default:
        errs.append(
            invalid(path, _show(default), "default value is not valid according to the requestPolicy")
        )
    return errs


def _is_fractional(q: Quantity) -> bool:
    return q.as_fraction().denominator != 1


def _validate_range(
    default: Quantity, capacity: Quantity, rng: Mapping[str, Any], path: FieldPath
) -> list[FieldError]:
    if rng.get("min") is None:
        return [required(path.child("min"), "required when validRange is defined")]
    low = _q(rng["min"])
    high = _q(rng["max"]) if rng.get("max") is not None else None
    step = _q(rng["step"]) if rng.get("step") is not None else None
    errs: list[FieldError] = []
    if low.compare(capacity) > 0:
        errs.append(
            invalid(path.child("min"), _show(low), f"min is larger than capacity value: {_show(capacity)}")
        )
    if default.compare(low) < 0:
        errs.append(invalid(path.child("default"), _show(default), f"default is less than min: {_show(low)}"))
    if high is not None:
        if low.compare(high) > 0:
            errs.append(invalid(path.child("max"), _show(low), f"min is larger than max: {_show(high)}"))
        if high.compare(capacity) > 0:
            errs.append(
                invalid(
                    path.child("max"), _show(high), f"max is larger than capacity value: {_show(capacity)}"
                )
            )
        if default.compare(high) > 0:
            errs.append(
                invalid(path.child("default"), _show(default), f"default is more than max: {_show(high)}")
            )
    named = [("default", default), ("min", low), ("max", high), ("step", step)]
    use_milli = any(q is not None and _is_fractional(q) for _, q in named)
    if use_milli:
        unsafe = False
        for name, q in named:
            if q is not None and (q.as_fraction() * 1000).denominator != 1:
                errs.append(
                    invalid(path.child(name), _show(q), "value cannot be represented as a milli value")
                )
                unsafe = True
        if unsafe:
            return errs
    if step is None:
        return errs
    if step.sign() <= 0:
        errs.append(invalid(path.child("step"), _show(step), "must be greater than zero"))
        return errs
    one_step = low + step
    if one_step.compare(capacity) > 0:
        errs.append(
            invalid(
                path.child("step"),
                _show(step),
                f"one step {_show(one_step)} is larger than capacity value: {_show(capacity)}",
            )
        )
    if not use_milli:
        unsafe = False
        for name, q in named:
            if q is None:
                continue
            if q.sign() < 0:
                errs.append(invalid(path.child(name), _show(q), "must be greater than or equal to 0"))
                unsafe = True
            elif q.as_fraction() > _INT64_MAX:
                errs.append(invalid(path.child(name), _show(q), f"must not be larger than {_INT64_MAX}"))
                unsafe = True
        if unsafe:
            return errs
    for value in (default, high):
        if value is None:
            continue
        if (value.as_fraction() - low.as_fraction()) % step.as_fraction() != 0:
            errs.append(
                invalid(
                    path.child("step"),
                    _show(value),
                    f"value is not a multiple of a given step ({_show(step)}) from ({_show(low)})",
                )
            )
    return errs


def _validate_request_policy(
    capacity: Quantity, policy: Mapping[str, Any], path: FieldPath
) -> list[FieldError]:
    values = policy.get("validValues") or []
    rng = policy.get("validRange")
    if values and rng is not None:
        return [
            forbidden(
                path,
                'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time',
            )
        ]
    if values:
        if policy.get("default") is None:
            return [required(path.child("default"), "required when validValues is defined")]
        return _validate_valid_values(
            _q(policy["default"]), capacity, [_q(v) for v in values], path.child("validValues")
        )
    if rng is not None:
        if policy.get("default") is None:
            return [required(path.child("default"), "required when validRange is defined")]
        return _validate_range(_q(policy["default"]), capacity, rng, path.child("validRange"))
    return []


def _validate_capacity(capacities: Mapping[str, Any], path: FieldPath, *, multi: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    for name, capacity in capacities.items():
        errs.extend(check_qualified_name(name, path))
        policy = capacity.get("requestPolicy")
        if policy is None:
            continue
        ppath = path.key(name).child("requestPolicy")
        if not multi:
            errs.append(forbidden(ppath, "allowMultipleAllocations must be true"))
        else:
            errs.extend(_validate_request_policy(_q(capacity.get("value", "0")), policy, ppath))
    return errs


# --- counters ----------------------------------------------------------------------------------


def _validate_counters(counters: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    if not counters:
        return [required(path)]
    if len(counters) > COUNTERS_PER_SET_MAX:
        return [too_many(path, len(counters), COUNTERS_PER_SET_MAX)]
    errs: list[FieldError] = []
    for name in counters:
        errs.extend(check_device_name(name, path))
    return errs


def _validate_counter_set(counter_set: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs = check_device_name(counter_set.get("name") or "", path.child("name"))
    errs.extend(_validate_counters(counter_set.get("counters") or {}, path.child("counters")))
    return errs


def _validate_consumption(consumption: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs = check_device_name(consumption.get("counterSet") or "", path.child("counterSet"))
    errs.extend(_validate_counters(consumption.get("counters") or {}, path.child("counters")))
    return errs


# --- devices -----------------------------------------------------------------------------------


def _one_term(path: FieldPath) -> FieldError:
    return invalid(path, NO_VALUE, "must have exactly one node selector term")


def _validate_device_node_selection(
    device: Mapping[str, Any], path: FieldPath, *, per_device: bool
) -> list[FieldError]:
    errs: list[FieldError] = []
    if not per_device:
        if any(device.get(f) is not None for f in ("nodeName", "nodeSelector", "allNodes")):
            errs.append(
                invalid(
                    path,
                    NO_VALUE,
                    "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set "
                    "to true in the ResourceSlice spec",
                )
            )
        return errs
    set_fields = []
    if device.get("nodeName") is not None:
        if device["nodeName"]:
            set_fields.append("`nodeName`")
            errs.extend(check_node_name(device["nodeName"], path.child("nodeName")))
        else:
            errs.append(invalid(path.child("nodeName"), "", "must not be empty"))
    if device.get("nodeSelector") is not None:
        set_fields.append("`nodeSelector`")
        errs.extend(validate_node_selector(device["nodeSelector"], path.child("nodeSelector")))
        # Kubernetes 1.38 (kubernetes/kubernetes#141213): one term, as for the slice's own
        # selector, with the same words (the allocator merges single-term selectors only).
        if len(device["nodeSelector"].get("nodeSelectorTerms") or []) != 1:
            errs.append(_one_term(path.child("nodeSelector", "nodeSelectorTerms")))
    if device.get("allNodes") is not None:
        if device["allNodes"]:
            set_fields.append("`allNodes`")
        else:
            errs.append(invalid(path.child("allNodes"), False, "must be either unset or set to true"))
    if not set_fields:
        errs.append(required(path, _DEVICE_ONE_OF))
    elif len(set_fields) > 1:
        errs.append(invalid(path, "{" + ", ".join(set_fields) + "}", _DEVICE_ONE_OF))
    return errs


def _validate_device(device: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs = check_device_name(device.get("name") or "", path.child("name"))
    attributes = device.get("attributes") or {}
    capacities = device.get("capacity") or {}
    total = len(attributes) + len(capacities)
    if total > ATTRIBUTES_AND_CAPACITIES_MAX:
        errs.append(
            invalid(
                path,
                total,
                f"the total number of attributes and capacities must not exceed {ATTRIBUTES_AND_CAPACITIES_MAX}",
            )
        )
    values = _attribute_values(device)
    if values > LIST_ATTRIBUTE_VALUES_MAX:
        errs.append(
            invalid(
                path,
                values,
                f"the total number of attribute values must not exceed {LIST_ATTRIBUTE_VALUES_MAX}",
            )
        )
    for name, attribute in attributes.items():
        errs.extend(check_qualified_name(name, path.child("attributes")))
        errs.extend(_validate_attribute(attribute, path.child("attributes").key(name)))
    errs.extend(
        _validate_capacity(
            capacities, path.child("capacity"), multi=bool(device.get("allowMultipleAllocations"))
        )
    )
    errs.extend(
        validate_list(
            device.get("taints") or [],
            TAINTS_MAX,
            lambda t, p: validate_device_taint(t, p),
            path.child("taints"),
        )
    )
    errs.extend(
        validate_set(
            device.get("consumesCounters") or [],
            CONSUMES_COUNTERS_MAX,
            _validate_consumption,
            lambda c: c.get("counterSet") or "",
            path.child("consumesCounters"),
        )
    )
    errs.extend(validate_binding_conditions(device, path))
    return errs


def _max_devices(devices: list[Mapping[str, Any]]) -> int:
    for device in devices:
        if device.get("taints") or device.get("consumesCounters"):
            return RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS
        for attribute in (device.get("attributes") or {}).values():
            if any(attribute.get(kind) is not None for kind in _LIST_ATTRIBUTE_KINDS):
                return RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS
    return RESOURCE_SLICE_MAX_DEVICES


def _validate_node_selection(spec: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    set_fields: list[str] = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name:
            set_fields.append("`nodeName`")
            errs.extend(check_node_name(node_name, path.child("nodeName")))
        else:
            errs.append(
                invalid(path.child("nodeName"), "", "must be either unset or set to a non-empty string")
            )
    selector = spec.get("nodeSelector")
    if selector is not None:
        set_fields.append("`nodeSelector`")
        errs.extend(validate_node_selector(selector, path.child("nodeSelector")))
        if len(selector.get("nodeSelectorTerms") or []) != 1:
            errs.append(_one_term(path.child("nodeSelector", "nodeSelectorTerms")))
    for flag in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(flag) is not None:
            if spec[flag]:
                set_fields.append(f"`{flag}`")
            else:
                errs.append(invalid(path.child(flag), False, "must be either unset or set to true"))
    if not set_fields:
        errs.append(required(path, _ONE_OF_NODE_SELECTION))
    elif len(set_fields) > 1:
        errs.append(
            invalid(
                path,
                "{" + ", ".join(set_fields) + "}",
                f"{_ONE_OF_NODE_SELECTION}, but multiple fields are set",
            )
        )
    return errs


def validate_slice_spec(
    spec: Mapping[str, Any], *, old_spec: Mapping[str, Any] | None = None, path: FieldPath | None = None
) -> list[FieldError]:
    path = path if path is not None else FieldPath("spec")
    errs = check_driver_name(spec.get("driver") or "", path.child("driver"))
    pool = spec.get("pool") or {}
    ppath = path.child("pool")
    errs.extend(check_pool_name(pool.get("name") or "", ppath.child("name")))
    if (pool.get("resourceSliceCount") or 0) <= 0:
        errs.append(
            invalid(
                ppath.child("resourceSliceCount"),
                pool.get("resourceSliceCount") or 0,
                "must be greater than zero",
            )
        )
    if (pool.get("generation") or 0) < 0:
        errs.append(
            invalid(ppath.child("generation"), pool["generation"], "must be greater than or equal to zero")
        )
    if old_spec is not None:
        old_pool = old_spec.get("pool") or {}
        for fpath, new, old in (
            (ppath.child("name"), pool.get("name"), old_pool.get("name")),
            (path.child("driver"), spec.get("driver"), old_spec.get("driver")),
            (path.child("nodeName"), spec.get("nodeName"), old_spec.get("nodeName")),
        ):
            if new != old:
                errs.append(invalid(fpath, new, "field is immutable"))
    errs.extend(_validate_node_selection(spec, path))
    if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        errs.append(invalid(path, "", "only one of `sharedCounters` or `devices` is allowed"))
    devices = spec.get("devices") or []
    per_device = bool(spec.get("perDeviceNodeSelection"))
    devices_changed = old_spec is None or (old_spec.get("devices") or []) != devices
    if devices_changed:
        errs.extend(
            validate_set(
                devices,
                _max_devices(devices),
                _validate_device,
                lambda d: d.get("name") or "",
                path.child("devices"),
            )
        )
    if devices_changed or bool((old_spec or {}).get("perDeviceNodeSelection")) != per_device:
        for i, device in enumerate(devices):
            errs.extend(
                _validate_device_node_selection(device, path.child("devices").index(i), per_device=per_device)
            )
    errs.extend(
        validate_set(
            spec.get("sharedCounters") or [],
            SHARED_COUNTERS_MAX,
            _validate_counter_set,
            lambda c: c.get("name") or "",
            path.child("sharedCounters"),
        )
    )
    return errs
