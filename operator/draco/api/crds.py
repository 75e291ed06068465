"""CustomResourceDefinitions generated from the models: the models are the one source of
truth, ``crds/`` is their output, and a unit test fails when the two drift.

The schemas are structural (every node typed; no ``$ref``, no nullable ``anyOf``):

- quantities are ``x-kubernetes-int-or-string`` with upstream's grammar as ``pattern``;
  times are ``date-time`` strings;
- opaque driver ``parameters`` and ``status.devices[].data`` are objects that keep
  unknown fields (``x-kubernetes-preserve-unknown-fields``), as are alpha fields whose
  shape is still moving (``nodeAllocatableResources``);
- lists that upstream keys are list-maps where a CRD can express it: ``reservedFor`` by
  ``uid`` and every ``conditions`` list by ``type``. ``status.devices`` stays atomic,
  because its upstream key includes the optional ``shareID`` and a CRD list-map key must
  be required or defaulted;
- static upstream defaults are CRD defaults (``allocationMode: ExactCount``, toleration
  ``operator: Equal``); the conditional one (``count: 1`` under ExactCount) is applied by
  the models and the webhook;
- a slice's immutable fields (driver, pool name, node name) carry ``self == oldSelf``
  rules; the immutable spec of claims and templates is the validating webhook's to enforce
  (a CRD with CEL rules adds a confusing note to every schema rejection);
- enums are declared only where upstream does not ratchet unknown values (taint effects
  do ratchet, so they are free strings here and validated on write by the webhook).

Every property carries a ``description`` (the field's docstring: the string literal right
under the field, read from the source here rather than by pydantic at import) and every
object the first paragraph of its model's docstring, so ``kubectl explain`` documents
the kinds.

Every kind is also served as ``v1beta1`` and ``v1beta2`` (DeviceTaintRule as ``v1beta2``
only), with ``v1`` stored (see `draco.api.versions`). ``v1beta2`` has ``v1``'s schema;
``v1beta1``'s is ``v1``'s reshaped as upstream's differs (request fields beside the name
instead of under ``exactly``, device fields under ``basic``). Kinds whose shapes differ
(claims, templates, slices) convert through `draco webhook`'s ``/convert``: their CRDs
name the chart's default Service, and `draco webhook --patch-crds` points them at the
running webhook with its CA. Without a webhook, ``v1`` works as before and the older
versions are refused with the API server's conversion error; nothing is stored in a
shape it does not have.

Printer columns are JSONPath, so a value upstream computes at print time has to be
stored. ResourceClaim's ``STATE`` column shows ``status.state`` and ``DEVICES`` shows
``status.allocatedDevices``: two summary fields draco adds to the status, recomputed by
``summarize_claim_status`` (``ResourceClaim.refresh_summary()`` on a model) whenever the
operator writes the status (allocation,
reservation, deallocation, deletion of a claim that still has the finalizer ->
``deleted,...``). A claim whose status nobody has written yet reads as ``pending`` through
a schema default on ``status``, which costs no write. DeviceClass shows the operator-filled
status (SELECTED, ALLOCATED, VALID).
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import sys
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Union

from draco.api import constants as c
from draco.api.deviceclass import DeviceClass
from draco.api.devicetaintrule import DeviceTaintRule
from draco.api.meta import ApiModel, TypedObject
from draco.api.poolstatusrequest import ResourcePoolStatusRequest
from draco.api.quantity import QUANTITY_PATTERN, Quantity
from draco.api.resourceclaim import ResourceClaim
from draco.api.resourceclaimtemplate import ResourceClaimTemplate
from draco.api.resourceslice import ResourceSlice
from draco.api.scheduling import PodGroup, Workload
from draco.api.versions import EXACT_REQUEST_FIELDS, SERVED_VERSIONS, V1BETA1

__all__ = [
    "CONVERSION_PATH",
    "CONVERTED_KINDS",
    "CRD_SPECS",
    "DEFAULT_CONVERSION_SERVICE",
    "CRDSpec",
    "crd_file_name",
    "field_descriptions",
    "generate_crds",
    "schema_for_model",
]

Schema = dict[str, Any]

_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


@dataclass(frozen=True)
class CRDSpec:
    """What a kind's CRD needs beyond the schema."""

    model: type[TypedObject]
    plural: str
    short_names: tuple[str, ...]
    status_subresource: bool
    printer_columns: tuple[dict[str, str], ...] = ()
    selectable_fields: tuple[str, ...] = ()
    # What an object whose status nobody has written reads as (a structural default: the API
    # server fills it in on every read, so a printer column has a value from creation on).
    status_default: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The API group (the resource kinds' by default; Workload and PodGroup have their own).
    group: str = c.GROUP
    #: The versions served, newest first, the first stored (the resource kinds': theirs in
    #: `draco.api.versions`).
    served: tuple[str, ...] = ()

    @property
    def versions(self) -> tuple[str, ...]:
        return self.served or SERVED_VERSIONS[self.model.KIND]


CRD_SPECS: tuple[CRDSpec, ...] = (
    CRDSpec(
        model=DeviceClass,
        plural=c.PLURAL_DEVICE_CLASSES,
        short_names=("ddc",),
        status_subresource=True,
        printer_columns=(
            {"name": "Selected", "type": "integer", "jsonPath": ".status.selectedDevices"},
            {"name": "Allocated", "type": "integer", "jsonPath": ".status.allocatedDevices"},
            {"name": "Valid", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Valid")].status'},
            _AGE,
        ),
    ),
    CRDSpec(
        model=ResourceClaim,
        plural=c.PLURAL_RESOURCE_CLAIMS,
        short_names=("drc",),
        status_subresource=True,
        printer_columns=(
            {"name": "State", "type": "string", "jsonPath": ".status.state"},
            {"name": "Devices", "type": "string", "jsonPath": ".status.allocatedDevices"},
            _AGE,
        ),
        selectable_fields=(".status.nodeName",),
        status_default={"state": "pending"},
    ),
    CRDSpec(
        model=ResourceClaimTemplate,
        plural=c.PLURAL_RESOURCE_CLAIM_TEMPLATES,
        short_names=("drct",),
        status_subresource=False,
        printer_columns=(_AGE,),
    ),
    CRDSpec(
        model=ResourceSlice,
        plural=c.PLURAL_RESOURCE_SLICES,
        short_names=("drs",),
        status_subresource=False,
        printer_columns=(
            {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"},
            {"name": "Driver", "type": "string", "jsonPath": ".spec.driver"},
            {"name": "Pool", "type": "string", "jsonPath": ".spec.pool.name"},
            _AGE,
        ),
        selectable_fields=(".spec.nodeName", ".spec.driver", ".spec.pool.name"),
    ),
    CRDSpec(
        model=DeviceTaintRule,
        plural=c.PLURAL_DEVICE_TAINT_RULES,
        short_names=("ddtr",),
        status_subresource=True,
        printer_columns=(
            {"name": "Key", "type": "string", "jsonPath": ".spec.taint.key"},
            {"name": "Effect", "type": "string", "jsonPath": ".spec.taint.effect"},
            {
                "name": "Evicting",
                "type": "string",
                "jsonPath": f'.status.conditions[?(@.type=="{c.EVICTION_IN_PROGRESS_CONDITION}")].status',
            },
            {
                "name": "Reason",
                "type": "string",
                "jsonPath": f'.status.conditions[?(@.type=="{c.EVICTION_IN_PROGRESS_CONDITION}")].reason',
            },
            _AGE,
        ),
    ),
    CRDSpec(
        model=Workload,
        plural=c.PLURAL_WORKLOADS,
        short_names=("dwl",),
        status_subresource=False,
        printer_columns=(_AGE,),
        group=c.SCHEDULING_GROUP,
        served=(c.SCHEDULING_VERSION,),
    ),
    CRDSpec(
        model=PodGroup,
        plural=c.PLURAL_POD_GROUPS,
        short_names=("dpg",),
        status_subresource=True,
        printer_columns=(
            {"name": "MinCount", "type": "integer", "jsonPath": ".spec.schedulingPolicy.gang.minCount"},
            {
                "name": "Scheduled",
                "type": "string",
                "jsonPath": f'.status.conditions[?(@.type=="{c.POD_GROUP_SCHEDULED_CONDITION}")].status',
            },
            {
                "name": "Reason",
                "type": "string",
                "jsonPath": f'.status.conditions[?(@.type=="{c.POD_GROUP_SCHEDULED_CONDITION}")].reason',
            },
            _AGE,
        ),
        group=c.SCHEDULING_GROUP,
        served=(c.SCHEDULING_VERSION,),
    ),
    CRDSpec(
        model=ResourcePoolStatusRequest,
        plural=c.PLURAL_RESOURCE_POOL_STATUS_REQUESTS,
        short_names=("drpsr",),
        status_subresource=True,
        # Upstream's columns (KEP-5677); the sums are draco's status fields, since a CRD's
        # columns cannot add up a list. The first condition is the only one (Complete or Failed).
        printer_columns=(
            {"name": "Driver", "type": "string", "jsonPath": ".spec.driver"},
            {"name": "Total", "type": "integer", "jsonPath": ".status.totalDevices"},
            {"name": "Available", "type": "integer", "jsonPath": ".status.availableDevices"},
            {"name": "Allocated", "type": "integer", "jsonPath": ".status.allocatedDevices"},
            {"name": "Unavailable", "type": "integer", "jsonPath": ".status.unavailableDevices"},
            {"name": "Errors", "type": "integer", "jsonPath": ".status.invalidPools"},
            {"name": "Pools", "type": "integer", "jsonPath": ".status.poolCount"},
            {"name": "Status", "type": "string", "jsonPath": ".status.conditions[0].type"},
            {"name": "Completed", "type": "date", "jsonPath": ".status.conditions[0].lastTransitionTime"},
        ),
        served=(c.POOL_STATUS_VERSION,),
    ),
)

# Per (model class name, JSON field name): schema additions upstream makes explicit.
_LIST_MAPS: dict[tuple[str, str], tuple[str, ...]] = {
    ("ResourceClaimStatus", "reservedFor"): ("uid",),
    ("DeviceClassStatus", "conditions"): ("type",),
    ("DeviceTaintRuleStatus", "conditions"): ("type",),
    ("AllocatedDeviceStatus", "conditions"): ("type",),
    ("WorkloadSpec", "podGroupTemplates"): ("name",),
    ("PodGroupTemplate", "resourceClaims"): ("name",),
    ("PodGroupSpec", "resourceClaims"): ("name",),
    ("PodGroupStatus", "conditions"): ("type",),
    ("PodGroupStatus", "resourceClaimStatuses"): ("name",),
    ("ResourcePoolStatusRequestStatus", "conditions"): ("type",),
    ("PoolStatus", "partitionSummary"): ("attribute", "type"),
}
_DEFAULTS: dict[tuple[str, str], Any] = {
    ("ExactDeviceRequest", "allocationMode"): c.ALLOCATION_MODE_EXACT_COUNT,
    ("DeviceSubRequest", "allocationMode"): c.ALLOCATION_MODE_EXACT_COUNT,
    ("DeviceToleration", "operator"): c.TOLERATION_OP_EQUAL,
    ("ResourcePoolStatusRequestSpec", "limit"): c.POOL_STATUS_LIMIT_DEFAULT,
}
_ENUMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("ExactDeviceRequest", "allocationMode"): c.ALLOCATION_MODES,
    ("DeviceSubRequest", "allocationMode"): c.ALLOCATION_MODES,
    ("DeviceToleration", "operator"): c.TOLERATION_OPERATORS,
    ("DeviceAllocationConfiguration", "source"): c.ALLOCATION_CONFIG_SOURCES,
    ("NodeSelectorRequirement", "operator"): c.NODE_SELECTOR_OPERATORS,
}
# Tolerations have no limit: upstream declares DeviceTolerationsMaxLength (16) but 1.37's
# validation never applies it, and the API server's verdict is the judge.
_MAX_ITEMS: dict[tuple[str, str], int] = {
    ("DeviceClassSpec", "selectors"): c.SELECTORS_MAX,
    ("DeviceClassSpec", "config"): c.DEVICE_CONFIG_MAX_SIZE,
    ("DeviceClaim", "requests"): c.DEVICE_REQUESTS_MAX_SIZE,
    ("DeviceClaim", "constraints"): c.DEVICE_CONSTRAINTS_MAX_SIZE,
    ("DeviceClaim", "config"): c.DEVICE_CONFIG_MAX_SIZE,
    ("DeviceRequest", "firstAvailable"): c.FIRST_AVAILABLE_MAX,
    ("ExactDeviceRequest", "selectors"): c.SELECTORS_MAX,
    ("DeviceSubRequest", "selectors"): c.SELECTORS_MAX,
    ("DeviceConstraint", "requests"): c.REQUEST_REFERENCES_MAX_SIZE,
    ("DeviceClaimConfiguration", "requests"): c.REQUEST_REFERENCES_MAX_SIZE,
    ("DeviceAllocationResult", "results"): c.ALLOCATION_RESULTS_MAX_SIZE,
    ("DeviceAllocationResult", "config"): c.ALLOCATION_CONFIG_MAX_SIZE,
    ("DeviceAllocationConfiguration", "requests"): c.REQUEST_REFERENCES_MAX_SIZE,
    ("DeviceRequestAllocationResult", "bindingConditions"): c.BINDING_CONDITIONS_MAX,
    ("DeviceRequestAllocationResult", "bindingFailureConditions"): c.BINDING_FAILURE_CONDITIONS_MAX,
    ("ResourceClaimStatus", "reservedFor"): c.RESERVED_FOR_MAX_SIZE,
    ("AllocatedDeviceStatus", "conditions"): c.DEVICE_STATUS_CONDITIONS_MAX,
    ("NetworkDeviceData", "ips"): c.NETWORK_IPS_MAX,
    ("ResourceSliceSpec", "devices"): c.RESOURCE_SLICE_MAX_DEVICES,
    ("ResourceSliceSpec", "sharedCounters"): c.SHARED_COUNTERS_MAX,
    ("Device", "consumesCounters"): c.CONSUMES_COUNTERS_MAX,
    ("Device", "taints"): c.TAINTS_MAX,
    ("Device", "bindingConditions"): c.BINDING_CONDITIONS_MAX,
    ("Device", "bindingFailureConditions"): c.BINDING_FAILURE_CONDITIONS_MAX,
    ("CapacityRequestPolicy", "validValues"): c.CAPACITY_VALID_VALUES_MAX,
    ("DeviceTaintRuleStatus", "conditions"): c.DEVICE_TAINT_RULE_CONDITIONS_MAX,
    ("WorkloadSpec", "podGroupTemplates"): c.WORKLOAD_MAX_POD_GROUP_TEMPLATES,
    ("PodGroupTemplate", "resourceClaims"): c.MAX_POD_GROUP_RESOURCE_CLAIMS,
    ("PodGroupSpec", "resourceClaims"): c.MAX_POD_GROUP_RESOURCE_CLAIMS,
    ("PodGroupStatus", "resourceClaimStatuses"): c.MAX_POD_GROUP_RESOURCE_CLAIMS,
    ("PodGroupSchedulingConstraints", "topology"): c.POD_GROUP_TOPOLOGY_MAX,
    ("PodGroupSchedulingConstraints", "deviceTopology"): c.POD_GROUP_TOPOLOGY_MAX,
    ("ResourcePoolStatusRequestStatus", "pools"): c.POOL_STATUS_MAX_POOLS,
    ("ResourcePoolStatusRequestStatus", "conditions"): c.POOL_STATUS_CONDITIONS_MAX,
    ("PoolStatus", "partitionSummary"): c.POOL_STATUS_LIST_MAX,
    ("ShareableSummaryStatus", "capacity"): c.POOL_STATUS_LIST_MAX,
}
# Integer ranges (minimum, maximum).
_RANGES: dict[tuple[str, str], tuple[int, int]] = {
    ("ResourcePoolStatusRequestSpec", "limit"): (1, c.POOL_STATUS_MAX_POOLS),
}
_MAX_PROPERTIES: dict[tuple[str, str], int] = {
    ("CounterSet", "counters"): c.COUNTERS_PER_SET_MAX,
    ("DeviceCounterConsumption", "counters"): c.COUNTERS_PER_SET_MAX,
}
_MAX_LENGTH: dict[tuple[str, str], int] = {
    ("CELDeviceSelector", "expression"): c.CEL_EXPRESSION_MAX_BYTES,
}
# Upstream's immutable fields of ResourceSlices, enforced by the API server itself
# (transition rules): slices are written by node agents, whose writes must succeed while
# the webhook is down, so the server holds these. A CRD with any CEL rule makes the server
# append "<nil>: Invalid value: null: some validation rules were not checked ..." to every
# schema rejection; users write claims and templates, so their immutable spec is left to
# the validating webhook (which rejects user writes while it is down) and their errors stay
# clean.
_IMMUTABLE: dict[tuple[str, str], str] = {
    ("ResourceSliceSpec", "driver"): "field is immutable",
    ("ResourceSliceSpec", "nodeName"): "field is immutable",
    ("ResourcePool", "name"): "field is immutable",
}
_OPAQUE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
# Whole-field overrides. A template's metadata may only carry labels and annotations;
# other fields are kept so that validation can reject them instead of pruning them away.
_OVERRIDES: dict[tuple[str, str], Schema] = {
    ("ResourceClaimTemplateSpec", "metadata"): {
        "type": "object",
        "properties": {
            "labels": {"description": "Labels copied into each generated claim.", **_STRING_MAP},
            "annotations": {"description": "Annotations copied into each generated claim.", **_STRING_MAP},
        },
        "x-kubernetes-preserve-unknown-fields": True,
    },
}


def _one_paragraph(text: str) -> str:
    """Docstring text as one line with Markdown-style quotes, as ``kubectl explain`` prints it."""
    return " ".join(text.split()).replace("``", "`")


@functools.cache
def _attribute_docstrings(module_name: str) -> dict[str, dict[str, str]]:
    """Per top-level class of the module, per attribute: the string literal right under it."""
    tree = ast.parse(inspect.getsource(sys.modules[module_name]))
    found: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs = found.setdefault(node.name, {})
        for statement, following in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return found


def field_descriptions(model: type[ApiModel]) -> dict[str, str]:
    """Each field's description by Python name: ``Field(description=...)`` if given, else
    the docstring under the field in the class that declares it (inherited fields too)."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if isinstance(cls, type) and issubclass(cls, ApiModel):
            docs.update(_attribute_docstrings(cls.__module__).get(cls.__qualname__, {}))
    for name, info in model.model_fields.items():
        if info.description:
            docs[name] = info.description
    return {name: docs[name] for name in model.model_fields if name in docs}


def _model_description(model: type[ApiModel]) -> str | None:
    """The first paragraph of the model's own docstring (not an inherited one)."""
    doc = model.__dict__.get("__doc__")
    if not doc:
        return None
    paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return _one_paragraph(paragraph) or None


def _unwrap_optional(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
        raise TypeError(f"union {annotation!r} has no structural schema")
    return annotation


def _schema_for_type(annotation: Any) -> Schema:
    annotation = _unwrap_optional(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _schema_for_type(typing.get_args(annotation)[0])
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return {"type": "array", "items": _schema_for_type(item)}
    if origin is dict:
        _, value = typing.get_args(annotation)
        return {"type": "object", "additionalProperties": _schema_for_type(value)}
    if origin is typing.Literal:
        return {"type": "string"}
    if annotation is Any:
        return dict(_OPAQUE)
    if annotation is Quantity:
        # The only anyOf a structural schema allows; the pattern applies to strings only.
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    if annotation is datetime:
        return {"type": "string", "format": "date-time"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer", "format": "int64"}
    if annotation is str:
        return {"type": "string"}
    if isinstance(annotation, type) and issubclass(annotation, ApiModel):
        return schema_for_model(annotation)
    raise TypeError(f"no schema for {annotation!r}")


def schema_for_model(model: type[ApiModel]) -> Schema:
    """The structural OpenAPI v3 schema of a model (top-level type meta excluded)."""
    properties: Schema = {}
    required: list[str] = []
    descriptions = field_descriptions(model)
    for name, info in model.model_fields.items():
        json_name = info.alias or name
        if issubclass(model, TypedObject) and json_name in ("apiVersion", "kind", "metadata"):
            continue
        key = (model.__name__, json_name)
        schema = copy.deepcopy(_OVERRIDES[key]) if key in _OVERRIDES else _schema_for_type(info.annotation)
        if key in _LIST_MAPS:
            schema["x-kubernetes-list-type"] = "map"
            schema["x-kubernetes-list-map-keys"] = list(_LIST_MAPS[key])
        if key in _DEFAULTS:
            schema["default"] = _DEFAULTS[key]
        if key in _ENUMS:
            schema["enum"] = list(_ENUMS[key])
        if key in _MAX_ITEMS:
            schema["maxItems"] = _MAX_ITEMS[key]
        if key in _RANGES:
            schema["minimum"], schema["maximum"] = _RANGES[key]
        if key in _MAX_PROPERTIES:
            schema["maxProperties"] = _MAX_PROPERTIES[key]
        if key in _MAX_LENGTH:
            schema["maxLength"] = _MAX_LENGTH[key]
        if key in _IMMUTABLE:
            schema["x-kubernetes-validations"] = [{"rule": "self == oldSelf", "message": _IMMUTABLE[key]}]
        if name in descriptions:
            # The field's description wins over its type's (what this field means here).
            schema.pop("description", None)
            schema = {"description": _one_paragraph(descriptions[name]), **schema}
        properties[json_name] = schema
        if info.is_required():
            required.append(json_name)
    description = _model_description(model)
    result: Schema = {"description": description} if description else {}
    result.update({"type": "object", "properties": properties})
    if required:
        result["required"] = required
    return result


def _root_schema(model: type[TypedObject]) -> Schema:
    body = schema_for_model(model)
    type_meta = field_descriptions(TypedObject)
    properties = {
        "apiVersion": {"description": type_meta["api_version"], "type": "string"},
        "kind": {"description": type_meta["kind"], "type": "string"},
        "metadata": {"type": "object"},
        **body["properties"],
    }
    root: Schema = {"description": body["description"]} if "description" in body else {}
    root.update({"type": "object", "properties": properties})
    if "required" in body:
        root["required"] = body["required"]
    return root


def crd_file_name(spec: CRDSpec) -> str:
    return f"{spec.group}_{spec.plural}.yaml"


#: Kinds whose older versions differ in shape from v1: converted by `draco webhook`.
CONVERTED_KINDS: Final = ("ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
#: The URL path of the conversion webhook.
CONVERSION_PATH: Final = "/convert"
#: Where the generated CRDs send conversions until `draco webhook --patch-crds` says
#: otherwise: the chart's Service in its default release and namespace.
DEFAULT_CONVERSION_SERVICE: Final = ("draco-system", "draco-webhook")


def _requests_schema(kind: str, root: Schema) -> Schema:
    spec = root["properties"]["spec"]
    if kind == "ResourceClaimTemplate":
        spec = spec["properties"]["spec"]
    items: Schema = spec["properties"]["devices"]["properties"]["requests"]["items"]
    return items


def _v1beta1_schema(kind: str, root: Schema) -> Schema:
    """`root` (v1's schema) reshaped as upstream's v1beta1 differs from v1."""
    root = copy.deepcopy(root)
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        request = _requests_schema(kind, root)
        exactly = request["properties"].pop("exactly")
        for name in EXACT_REQUEST_FIELDS:
            field_schema = copy.deepcopy(exactly["properties"][name])
            # v1beta1 defaults allocationMode only where deviceClassName is set (a request
            # with firstAvailable has none): not a static default. The webhook defaults v1.
            field_schema.pop("default", None)
            request["properties"][name] = field_schema
    elif kind == "ResourceSlice":
        device = root["properties"]["spec"]["properties"]["devices"]["items"]
        basic = {
            "description": "BasicDevice defines one device instance (v1beta1: the device's fields but its name).",
            "type": "object",
            "properties": {k: v for k, v in device["properties"].items() if k != "name"},
        }
        device["properties"] = {"name": device["properties"]["name"], "basic": basic}
    return root


def _crd_version(spec: CRDSpec, name: str) -> dict[str, Any]:
    model = spec.model
    schema = _root_schema(model)
    if name == V1BETA1 and spec.group == c.GROUP:
        schema = _v1beta1_schema(model.KIND, schema)
    version: dict[str, Any] = {
        "name": name,
        "served": True,
        "storage": name == spec.versions[0],
        "schema": {"openAPIV3Schema": schema},
    }
    if spec.status_subresource:
        version["subresources"] = {"status": {}}
    if spec.status_default is not None:
        version["schema"]["openAPIV3Schema"]["properties"]["status"]["default"] = dict(spec.status_default)
    if spec.printer_columns:
        version["additionalPrinterColumns"] = [dict(column) for column in spec.printer_columns]
    if spec.selectable_fields and name == spec.versions[0]:
        # On v1 only: kube-apiserver hoists selectableFields that every version shares to
        # the CRD's top level, and refuses them there when the versions' schemas differ
        # ("may only be set when validations.schema is included"). Agents and kubectl use v1.
        version["selectableFields"] = [{"jsonPath": path} for path in spec.selectable_fields]
    return version


def _crd(spec: CRDSpec) -> dict[str, Any]:
    model = spec.model
    crd_spec: dict[str, Any] = {
        "group": spec.group,
        "names": {
            "kind": model.KIND,
            "listKind": f"{model.KIND}List",
            "plural": spec.plural,
            "singular": model.KIND.lower(),
            "shortNames": list(spec.short_names),
            "categories": ["draco"],
        },
        "scope": "Namespaced" if model.NAMESPACED else "Cluster",
        "versions": [_crd_version(spec, name) for name in spec.versions],
    }
    if model.KIND in CONVERTED_KINDS:
        namespace, name = DEFAULT_CONVERSION_SERVICE
        crd_spec["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {
                    "service": {"namespace": namespace, "name": name, "path": CONVERSION_PATH, "port": 443}
                },
            },
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{spec.plural}.{spec.group}",
            "labels": {"app.kubernetes.io/part-of": "draco"},
        },
        "spec": crd_spec,
    }


def generate_crds() -> dict[str, dict[str, Any]]:
    """One CRD per kind, keyed by the file name it is written to."""
    return {crd_file_name(spec): _crd(spec) for spec in CRD_SPECS}
