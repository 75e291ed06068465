"""The older versions draco serves beside ``v1``, and the conversion between them, as
upstream converts ``resource.k8s.io/v1beta1`` and ``v1beta2`` (pure, JSON in and out).

Manifests written for Kubernetes 1.32-1.33 (``resource.k8s.io/v1beta1``, NVIDIA's
quickstarts among them) and 1.33-1.36 (``v1beta2``) work after changing only the group:
``resource.draco.dev/v1beta1`` and ``v1beta2`` are served, ``v1`` is stored, and the API
server asks `draco webhook` (``/convert``) to convert between them.

What differs, as upstream's conversion handles it:

- ``v1beta2`` has the shape of ``v1``: only the ``apiVersion`` changes.
- ``v1beta1`` requests carry the fields of ``v1``'s ``exactly`` (deviceClassName,
  selectors, allocationMode, count, adminAccess, tolerations, capacity) themselves. To
  ``v1``: if any of them is set, they become ``exactly`` (even beside ``firstAvailable``:
  validation then refuses the request, as upstream's does). From ``v1``: ``exactly``'s
  fields are put back on the request, and a request without one gets
  ``deviceClassName: ""`` (that field of upstream's v1beta1 is never omitted).
- ``v1beta1`` devices keep everything but their name under ``basic``; ``v1`` devices are
  flat. From ``v1`` a device always gets a ``basic`` (empty when the device has nothing).
- ``v1beta1`` slices have a plain ``nodeName``/``allNodes``: ``""`` and ``false`` mean
  unset there, and become absent in ``v1``.
- DeviceTaintRule has no ``v1beta1`` (upstream's came with ``v1beta2``); DeviceClass has
  the same shape in all three.

Empty lists are dropped where upstream's Go conversion would make them nil.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

from draco.api.bodies import Obj
from draco.api.constants import GROUP, VERSION
from draco.errors import InvalidObjectError

__all__ = [
    "EXACT_REQUEST_FIELDS",
    "SERVED_VERSIONS",
    "V1BETA1",
    "V1BETA2",
    "convert",
    "field_name_in",
    "field_path_in",
    "to_storage",
]

V1BETA1: Final = "v1beta1"
V1BETA2: Final = "v1beta2"

#: Versions served per kind, newest first; ``v1`` is the storage version of every kind.
SERVED_VERSIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "DeviceClass": (VERSION, V1BETA2, V1BETA1),
    "ResourceClaim": (VERSION, V1BETA2, V1BETA1),
    "ResourceClaimTemplate": (VERSION, V1BETA2, V1BETA1),
    "ResourceSlice": (VERSION, V1BETA2, V1BETA1),
    "DeviceTaintRule": (VERSION, V1BETA2),
}

#: The fields of ``v1``'s ExactDeviceRequest that ``v1beta1`` has on the request itself.
EXACT_REQUEST_FIELDS: Final = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)


def _version_of(obj: Mapping[str, Any]) -> str:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    kind = str(obj.get("kind", ""))
    if group != GROUP or version not in SERVED_VERSIONS.get(kind, ()):
        raise InvalidObjectError(f"cannot convert {obj.get('apiVersion')!r} {kind!r}: not served by draco")
    return version


def convert(obj: Mapping[str, Any], api_version: str) -> Obj:
    """`obj` (a draco kind in any served version) in `api_version`; a new object."""
    source = _version_of(obj)
    group, _, target = api_version.rpartition("/")
    kind = str(obj.get("kind"))
    if group != GROUP or target not in SERVED_VERSIONS.get(kind, ()):
        raise InvalidObjectError(f"cannot convert {kind} to {api_version!r}: not served by draco")
    out = copy.deepcopy(dict(obj))
    if source == V1BETA1:
        _from_v1beta1(kind, out)
    if target == V1BETA1:
        _to_v1beta1(kind, out)
    out["apiVersion"] = api_version
    return out


def to_storage(obj: Mapping[str, Any]) -> Obj:
    """`obj` in ``resource.draco.dev/v1``."""
    return convert(obj, f"{GROUP}/{VERSION}")


# --- v1beta1 -> v1 ------------------------------------------------------------------------------


def _requests_of(kind: str, obj: Obj) -> list[Any]:
    spec = obj.get("spec")
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") if isinstance(spec, dict) else None
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    return requests if isinstance(requests, list) else []


#: Maps upstream's conversion leaves nil when empty.
_NIL_WHEN_EMPTY: Final = ("attributes", "capacity")


def _set(out: Obj, key: str, value: Any) -> None:
    """Set `key`, leaving out what Go's omitempty leaves out of upstream's output."""
    empty = value is None or value == "" or value == [] or (value == 0 and not isinstance(value, bool))
    if empty or (value == {} and key in _NIL_WHEN_EMPTY):
        out.pop(key, None)
    else:
        out[key] = value


def _from_v1beta1(kind: str, obj: Obj) -> None:
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        for request in _requests_of(kind, obj):
            if isinstance(request, dict):
                _request_from_v1beta1(request)
    elif kind == "ResourceSlice":
        spec = obj.get("spec")
        if isinstance(spec, dict):
            if spec.get("nodeName") == "":
                del spec["nodeName"]
            if spec.get("allNodes") is False:
                del spec["allNodes"]
            for device in spec.get("devices") or ():
                if isinstance(device, dict):
                    basic = device.pop("basic", None)
                    if isinstance(basic, dict):
                        for key, value in basic.items():
                            _set(device, key, value)


def _request_from_v1beta1(request: Obj) -> None:
    present = {f: request.pop(f) for f in EXACT_REQUEST_FIELDS if f in request}
    # Upstream: any main field set (a non-zero value; an empty list counts, it is not nil).
    if any(v is not None and v != "" and not (v == 0 and not isinstance(v, bool)) for v in present.values()):
        exactly: Obj = {}
        for key, value in present.items():
            _set(exactly, key, value)
        request["exactly"] = exactly


# --- v1 -> v1beta1 ------------------------------------------------------------------------------


def _to_v1beta1(kind: str, obj: Obj) -> None:
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        for request in _requests_of(kind, obj):
            if isinstance(request, dict):
                exactly = request.pop("exactly", None)
                if isinstance(exactly, dict):
                    for key in EXACT_REQUEST_FIELDS:
                        if key in exactly:
                            _set(request, key, exactly[key])
                # v1beta1's deviceClassName has no omitempty: upstream writes "" without one.
                request.setdefault("deviceClassName", "")
    elif kind == "ResourceSlice":
        spec = obj.get("spec")
        if isinstance(spec, dict):
            if spec.get("allNodes") is False:
                del spec["allNodes"]
            devices = spec.get("devices")
            if isinstance(devices, list):
                spec["devices"] = [_device_to_v1beta1(d) if isinstance(d, dict) else d for d in devices]


def _device_to_v1beta1(device: Obj) -> Obj:
    basic: Obj = {}
    for key, value in device.items():
        if key != "name":
            _set(basic, key, value)
    out: Obj = {"name": device["name"]} if "name" in device else {}
    out["basic"] = basic
    return out


# --- field paths --------------------------------------------------------------------------------

_EXACTLY: Final = re.compile(r"^((?:spec\.spec|spec)\.devices\.requests\[\d+\])\.exactly(?=$|[.\[])")
_DEVICE_FIELD: Final = re.compile(r"^(spec\.devices\[\d+\])\.(?!name(?:$|[.\[]))")


def field_path_in(kind: str, version: str, path: str) -> str:
    """`path`, a field of `kind` in ``v1`` (what validation reports), as the same field is
    named in `version` (the version the user wrote): ``v1beta1`` has no ``exactly`` in a
    request (its fields are on the request itself) and keeps a device's fields under
    ``basic``. Other versions name every field as ``v1`` does."""
    if version != V1BETA1:
        return path
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        return _EXACTLY.sub(r"\1", path, count=1)
    if kind == "ResourceSlice":
        return _DEVICE_FIELD.sub(r"\1.basic.", path, count=1)
    return path


def field_name_in(version: str, name: str) -> str:
    """A field named in a message (``exactly``) as `version` calls it: in ``v1beta1`` a
    request's ``exactly`` is its own ``deviceClassName`` and the fields beside it."""
    return "deviceClassName" if version == V1BETA1 and name == "exactly" else name
