"""DeviceClass rules: selectors (CEL), configuration, the extended resource name.

On update, selectors and configs deep-equal to the stored ones count as "stored": their CEL
is not compiled again and large stored parameters are grandfathered, as upstream does.
Any change, even reordering, makes them new.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draco.api.constants import DEVICE_CONFIG_MAX_SIZE
from draco.errors import FieldError
from draco.validation.common import validate_device_configuration, validate_list, validate_selectors
from draco.validation.fielderrors import FieldPath, invalid
from draco.validation.formats import is_extended_resource_name

__all__ = ["validate_device_class_spec"]


def validate_device_class_spec(
    spec: Mapping[str, Any], *, old_spec: Mapping[str, Any] | None = None, path: FieldPath | None = None
) -> list[FieldError]:
    path = path if path is not None else FieldPath("spec")
    selectors = spec.get("selectors") or []
    stored = old_spec is not None and selectors == (old_spec.get("selectors") or [])
    errs = validate_selectors(selectors, path.child("selectors"), stored=stored)
    configs = spec.get("config") or []
    configs_stored = old_spec is not None and configs == (old_spec.get("config") or [])
    errs.extend(
        validate_list(
            configs,
            DEVICE_CONFIG_MAX_SIZE,
            lambda c, p: validate_device_configuration(c, p, stored=configs_stored),
            path.child("config"),
        )
    )
    name = spec.get("extendedResourceName")
    if name is not None and not is_extended_resource_name(name):
        errs.append(
            invalid(path.child("extendedResourceName"), name, "must be a valid extended resource name")
        )
    return errs
