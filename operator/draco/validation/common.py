"""Rules shared by several kinds: list limits and uniqueness, CEL selectors, opaque
configuration, tolerations, taints, node selectors, binding conditions and conditions.

Everything here takes structurally valid, defaulted JSON (see `schema` and `defaults`) and
returns field errors. List checks short-circuit on size first, as upstream does (a list
over its limit is reported once, not item by item).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from draco.api.constants import (
    BINDING_CONDITIONS_MAX,
    BINDING_FAILURE_CONDITIONS_MAX,
    CEL_EXPRESSION_MAX_BYTES,
    SELECTORS_MAX,
    TAINT_EFFECTS,
    TOLERATION_OP_EQUAL,
    TOLERATION_OP_EXISTS,
    TOLERATION_OPERATORS,
)
from draco.errors import CELCompileError, CELCostError, FieldError
from draco.validation.fielderrors import (
    NO_VALUE,
    FieldPath,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
)
from draco.validation.formats import check_driver_name, check_label_name, check_label_value, check_node_name

__all__ = [
    "ItemCheck",
    "validate_binding_conditions",
    "validate_cel_expression",
    "validate_conditions",
    "validate_device_configuration",
    "validate_device_taint",
    "validate_device_toleration",
    "validate_list",
    "validate_node_selector",
    "validate_raw_object",
    "validate_selectors",
    "validate_set",
    "validate_string_set",
]

ItemCheck = Callable[[Any, FieldPath], list[FieldError]]

_CONDITION_STATUSES = ("False", "True", "Unknown")
_CONDITION_REASON_MAX = 1024
_CONDITION_MESSAGE_MAX = 32768
_EFFECTS_SORTED = sorted(TAINT_EFFECTS)


def validate_list(
    items: Sequence[Any], max_items: int, check: ItemCheck, path: FieldPath
) -> list[FieldError]:
    """Size first (short-circuits), then each item. A negative `max_items` means no limit."""
    if 0 <= max_items < len(items):
        return [too_many(path, len(items), max_items)]
    errs: list[FieldError] = []
    for i, item in enumerate(items):
        errs.extend(check(item, path.index(i)))
    return errs


def validate_set(
    items: Sequence[Any],
    max_items: int,
    check: ItemCheck,
    key: Callable[[Any], Hashable],
    path: FieldPath,
) -> list[FieldError]:
    """Like `validate_list`, plus a Duplicate error for each repeated key."""
    if 0 <= max_items < len(items):
        return [too_many(path, len(items), max_items)]
    errs: list[FieldError] = []
    for i, item in enumerate(items):
        errs.extend(check(item, path.index(i)))
    seen: set[Hashable] = set()
    for i, item in enumerate(items):
        k = key(item)
        if k in seen:
            errs.append(duplicate(path.index(i), k))
        else:
            seen.add(k)
    return errs


# --- CEL ------------------------------------------------------------------------------------


def validate_cel_expression(expression: str, path: FieldPath, *, stored: bool) -> list[FieldError]:
    """Length, then compilation, then the estimated cost. Expressions already stored
    unchanged are trusted, as upstream does (they were valid when written)."""
    if stored:
        return []
    if len(expression.encode()) > CEL_EXPRESSION_MAX_BYTES:
        return [too_long(path, CEL_EXPRESSION_MAX_BYTES)]
    if not expression.strip():
        return [required(path, "expression must not be empty")]
    from draco.cel import compile_selector

    try:
        compile_selector(expression)
    except CELCostError:
        return [forbidden(path, "too complex, exceeds cost limit")]
    except CELCompileError as err:
        detail = str(err)
        if not detail.startswith("compilation failed"):
            detail = f"compilation failed: {detail}"
        return [invalid(path, expression, detail)]
    return []


def validate_selectors(selectors: Sequence[Any], path: FieldPath, *, stored: bool) -> list[FieldError]:
    def check(selector: Mapping[str, Any], p: FieldPath) -> list[FieldError]:
        cel = selector.get("cel")
        if cel is None:
            return [required(p.child("cel"))]
        return validate_cel_expression(
            cel.get("expression") or "", p.child("cel", "expression"), stored=stored
        )

    return validate_list(selectors, SELECTORS_MAX, check, path)


# --- opaque configuration and raw JSON -----------------------------------------------------


def _raw_length(value: Any) -> int:
    # The API server measures the JSON it received; kubectl sends compact JSON.
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def validate_raw_object(value: Any, path: FieldPath, *, max_bytes: int, stored: bool) -> list[FieldError]:
    """A RawExtension that must be a JSON object of at most `max_bytes` (unless stored)."""
    if value is None:
        return [required(path)]
    if not stored and _raw_length(value) > max_bytes:
        return [too_long(path, max_bytes)]
    if not isinstance(value, dict):
        return [invalid(path, NO_VALUE, "must be a valid JSON object")]
    return []


def validate_device_configuration(
    config: Mapping[str, Any], path: FieldPath, *, stored: bool
) -> list[FieldError]:
    """A DeviceConfiguration: exactly one field, today `opaque` {driver, parameters}."""
    from draco.api.constants import OPAQUE_PARAMETERS_MAX_BYTES

    opaque = config.get("opaque")
    if opaque is None:
        return [required(path.child("opaque"))]
    opath = path.child("opaque")
    errs = check_driver_name(opaque.get("driver") or "", opath.child("driver"))
    errs.extend(
        validate_raw_object(
            opaque.get("parameters"),
            opath.child("parameters"),
            max_bytes=OPAQUE_PARAMETERS_MAX_BYTES,
            stored=stored,
        )
    )
    return errs


# --- tolerations and taints --------------------------------------------------------------


def validate_device_toleration(toleration: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    key = toleration.get("key") or ""
    if key:
        errs.extend(check_label_name(key, path.child("key")))
    operator = toleration.get("operator") or ""
    value = toleration.get("value") or ""
    if operator == TOLERATION_OP_EXISTS:
        if value:
            errs.append(invalid(path.child("value"), value, "must be empty for operator `Exists`"))
    elif operator == TOLERATION_OP_EQUAL:
        errs.extend(check_label_value(value, path.child("value")))
    elif not operator:
        errs.append(required(path.child("operator")))
    else:
        errs.append(not_supported(path.child("operator"), operator, TOLERATION_OPERATORS))
    effect = toleration.get("effect") or ""
    if effect and effect not in TAINT_EFFECTS:
        errs.append(not_supported(path.child("effect"), effect, _EFFECTS_SORTED))
    return errs


def validate_device_taint(
    taint: Mapping[str, Any], path: FieldPath, *, old: Mapping[str, Any] | None = None
) -> list[FieldError]:
    """A taint; its effect is checked only when new or changed, so stored unknown effects
    ratchet (consumers treat them like None)."""
    errs = check_label_name(taint.get("key") or "", path.child("key"))
    value = taint.get("value") or ""
    if value:
        errs.extend(check_label_value(value, path.child("value")))
    effect = taint.get("effect") or ""
    if old is None or (old.get("effect") or "") != effect:
        if not effect:
            errs.append(required(path.child("effect")))
        elif effect not in TAINT_EFFECTS:
            errs.append(not_supported(path.child("effect"), effect, _EFFECTS_SORTED))
    return errs


# --- node selectors --------------------------------------------------------------------------


def _validate_node_selector_requirement(req: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    operator = req.get("operator") or ""
    values = req.get("values") or []
    if operator in ("In", "NotIn"):
        if not values:
            errs.append(
                required(path.child("values"), "must be specified when `operator` is 'In' or 'NotIn'")
            )
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            errs.append(
                forbidden(
                    path.child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                )
            )
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            errs.append(
                required(
                    path.child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"
                )
            )
    else:
        errs.append(invalid(path.child("operator"), operator, "not a valid selector operator"))
    errs.extend(check_label_name(req.get("key") or "", path.child("key")))
    for i, value in enumerate(values):
        errs.extend(check_label_value(value, path.child("values").index(i)))
    return errs


def _validate_node_field_requirement(req: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    errs: list[FieldError] = []
    operator = req.get("operator") or ""
    values = req.get("values") or []
    if operator in ("In", "NotIn"):
        if len(values) != 1:
            errs.append(
                required(
                    path.child("values"),
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                )
            )
    else:
        errs.append(invalid(path.child("operator"), operator, "not a valid selector operator"))
    if req.get("key") != "metadata.name":
        errs.append(invalid(path.child("key"), req.get("key") or "", "not a valid field selector key"))
    else:
        for i, value in enumerate(values):
            errs.extend(check_node_name(value, path.child("values").index(i)))
    return errs


def validate_node_selector(selector: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    """A core NodeSelector: at least one term (an empty term is allowed, as upstream)."""
    terms_path = path.child("nodeSelectorTerms")
    terms = selector.get("nodeSelectorTerms") or []
    if not terms:
        return [required(terms_path, "must have at least one node selector term")]
    errs: list[FieldError] = []
    for i, term in enumerate(terms):
        tpath = terms_path.index(i)
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        for j, req in enumerate(expressions):
            errs.extend(_validate_node_selector_requirement(req, tpath.child("matchExpressions").index(j)))
        for j, req in enumerate(fields):
            errs.extend(_validate_node_field_requirement(req, tpath.child("matchFields").index(j)))
    return errs


# --- binding conditions and conditions -----------------------------------------------------


def validate_binding_conditions(holder: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    """`bindingConditions` / `bindingFailureConditions`: at most 4 each, label-name style,
    no duplicates, no overlap, and both set or both empty."""
    conditions = holder.get("bindingConditions") or []
    failures = holder.get("bindingFailureConditions") or []
    cpath, fpath = path.child("bindingConditions"), path.child("bindingFailureConditions")
    errs = validate_list(conditions, BINDING_CONDITIONS_MAX, lambda c, p: check_label_name(c, p), cpath)
    errs.extend(
        validate_list(failures, BINDING_FAILURE_CONDITIONS_MAX, lambda c, p: check_label_name(c, p), fpath)
    )
    seen: set[str] = set()
    for i, c in enumerate(conditions):
        if c in seen:
            errs.append(duplicate(cpath.index(i), c))
        seen.add(c)
    seen_failures: set[str] = set()
    for i, c in enumerate(failures):
        if c in seen_failures:
            errs.append(duplicate(fpath.index(i), c))
        seen_failures.add(c)
        if c in seen:
            errs.append(
                invalid(fpath.index(i), c, "bindingFailureConditions must not overlap with bindingConditions")
            )
    if not conditions and failures:
        errs.append(
            invalid(cpath, conditions, "bindingConditions are required to use bindingFailureConditions")
        )
    if not failures and conditions:
        errs.append(
            invalid(fpath, failures, "bindingFailureConditions are required to use bindingConditions")
        )
    return errs


_REASON_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_,:")


def _reason_ok(reason: str) -> bool:
    return (
        reason[0].isascii()
        and reason[0].isalpha()
        and all(ch in _REASON_CHARS for ch in reason)
        and reason[-1] not in ",:"
    )


def validate_conditions(conditions: Sequence[Mapping[str, Any]], path: FieldPath) -> list[FieldError]:
    """metav1.Condition rules: type, status, reason, transition time; unique types."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, cond in enumerate(conditions):
        cpath = path.index(i)
        ctype = cond.get("type") or ""
        errs.extend(check_label_name(ctype, cpath.child("type")))
        if ctype in seen:
            errs.append(duplicate(cpath.child("type"), ctype))
        seen.add(ctype)
        status = cond.get("status") or ""
        if status not in _CONDITION_STATUSES:
            errs.append(not_supported(cpath.child("status"), status, _CONDITION_STATUSES))
        if (cond.get("observedGeneration") or 0) < 0:
            errs.append(
                invalid(
                    cpath.child("observedGeneration"),
                    cond["observedGeneration"],
                    "must be greater than or equal to zero",
                )
            )
        if not cond.get("lastTransitionTime"):
            errs.append(required(cpath.child("lastTransitionTime"), "must be set"))
        reason = cond.get("reason") or ""
        if not reason:
            errs.append(required(cpath.child("reason"), "must be set"))
        else:
            if not _reason_ok(reason):
                errs.append(
                    invalid(
                        cpath.child("reason"),
                        reason,
                        "a condition reason must start with alphabetic character, optionally followed by a string "
                        "of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' "
                        "(e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or "
                        "'ReasonA:ReasonB', regex used for validation is "
                        "'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')",
                    )
                )
            if len(reason) > _CONDITION_REASON_MAX:
                errs.append(too_long(cpath.child("reason"), _CONDITION_REASON_MAX))
        if len(cond.get("message") or "") > _CONDITION_MESSAGE_MAX:
            errs.append(too_long(cpath.child("message"), _CONDITION_MESSAGE_MAX))
    return errs


def validate_string_set(
    items: Sequence[str], max_items: int, check: ItemCheck, path: FieldPath
) -> list[FieldError]:
    """A list of strings that must be unique."""
    return validate_set(items, max_items, check, lambda s: s, path)
