"""Builders for the validation unit tests: small valid objects to break one rule at a time."""

from __future__ import annotations

import copy
from typing import Any

from draco.errors import FieldError
from draco.validation import validate_object

V = "resource.draco.dev/v1"
NATIVE = "resource.k8s.io/v1"


def claim(*requests: dict[str, Any], api_version: str = V, **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


def template(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": V,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": {"devices": {"requests": list(requests), **devices}}},
    }


def request(name: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu.example.com", **exactly}}


def device_class(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": V, "kind": "DeviceClass", "metadata": {"name": "gpu"}, "spec": spec}


def device(name: str = "gpu-0", **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def resource_slice(*devices: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": "gpu.example.com",
        "pool": {"name": "node-1", "generation": 0, "resourceSliceCount": 1},
        "nodeName": "node-1",
    }
    if devices:
        body["devices"] = list(devices)
    body.update(spec)
    return {
        "apiVersion": V,
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {k: v for k, v in body.items() if v is not None},
    }


def taint_rule(**spec: Any) -> dict[str, Any]:
    body = {"taint": {"key": "example.com/maintenance", "effect": "NoExecute"}, **spec}
    return {"apiVersion": V, "kind": "DeviceTaintRule", "metadata": {"name": "r"}, "spec": body}


def errors(obj: dict[str, Any], **kwargs: Any) -> list[FieldError]:
    return validate_object(obj, **kwargs)


def paths(obj: dict[str, Any], **kwargs: Any) -> list[str]:
    return [e.path for e in validate_object(obj, **kwargs)]


def one_error(obj: dict[str, Any], **kwargs: Any) -> FieldError:
    found = validate_object(obj, **kwargs)
    assert len(found) == 1, found
    return found[0]


def changed(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `obj` with the dotted `path` (list indices as numbers) set to `value`."""
    out = copy.deepcopy(obj)
    here: Any = out
    keys = path.split(".")
    for key in keys[:-1]:
        here = here[int(key)] if isinstance(here, list) else here.setdefault(key, {})
    last = keys[-1]
    if isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value
    return out
