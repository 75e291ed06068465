"""DeviceTaintRule rules: the device selector's names, the taint, and status conditions;
and the warning an empty selector gets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from draco.api.constants import DEVICE_TAINT_RULE_CONDITIONS_MAX
from draco.errors import FieldError
from draco.validation.common import validate_conditions, validate_device_taint
from draco.validation.fielderrors import FieldPath, required, too_many
from draco.validation.formats import check_device_name, check_driver_name, check_pool_name

__all__ = [
    "EMPTY_SELECTOR_WARNING",
    "taint_rule_warnings",
    "validate_taint_rule_spec",
    "validate_taint_rule_status",
]

#: Kubernetes 1.38 warns (does not refuse) when a rule's selector is present but sets none
#: of driver, pool and device (kubernetes/kubernetes#141831), in its words: such a selector
#: selects every device of every driver, which is easy to write by mistake
#: (`deviceSelector: {}` from a template whose values were left out). A rule without
#: `deviceSelector` selects nothing and gets no warning.
EMPTY_SELECTOR_WARNING: Final = (
    "spec.deviceSelector: an empty selector matches every device from every driver in the cluster"
)


def taint_rule_warnings(spec: Mapping[str, Any]) -> list[str]:
    """What a create or update of a DeviceTaintRule with this spec (the v1 shape) is warned
    about, whatever the taint's effect."""
    selector = spec.get("deviceSelector")
    if isinstance(selector, Mapping) and all(selector.get(f) is None for f in ("driver", "pool", "device")):
        return [EMPTY_SELECTOR_WARNING]
    return []


def validate_taint_rule_spec(
    spec: Mapping[str, Any], *, old_spec: Mapping[str, Any] | None = None, path: FieldPath | None = None
) -> list[FieldError]:
    path = path if path is not None else FieldPath("spec")
    errs: list[FieldError] = []
    selector = spec.get("deviceSelector")
    if selector is not None:
        spath = path.child("deviceSelector")
        if selector.get("driver") is not None:
            errs.extend(check_driver_name(selector["driver"], spath.child("driver")))
        if selector.get("pool") is not None:
            errs.extend(check_pool_name(selector["pool"], spath.child("pool")))
        if selector.get("device") is not None:
            errs.extend(check_device_name(selector["device"], spath.child("device")))
    taint = spec.get("taint")
    if taint is None:
        errs.append(required(path.child("taint", "key")))
        errs.append(required(path.child("taint", "effect")))
        return errs
    old_taint = old_spec.get("taint") if old_spec is not None else None
    errs.extend(validate_device_taint(taint, path.child("taint"), old=old_taint))
    return errs


def validate_taint_rule_status(status: Mapping[str, Any], path: FieldPath | None = None) -> list[FieldError]:
    path = path if path is not None else FieldPath("status")
    conditions = status.get("conditions") or []
    errs = validate_conditions(conditions, path.child("conditions"))
    if len(conditions) > DEVICE_TAINT_RULE_CONDITIONS_MAX:
        errs.append(too_many(path.child("conditions"), len(conditions), DEVICE_TAINT_RULE_CONDITIONS_MAX))
    return errs
