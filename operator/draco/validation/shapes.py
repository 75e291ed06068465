"""The `resource.k8s.io/v1` object shapes as Kubernetes 1.37 serves them, field for field.

Used by the structural pass (`schema.check_shape`) to find unknown fields and wrong types.
An e2e test compares these field sets with the live API server's OpenAPI document, so a
field added upstream shows up as a failing test rather than as a false "unknown field".

Alpha fields whose feature gates are off by default in 1.37 (`derivedAttributes`,
`nodeAllocatableResources`, `compatibilityGroups`, `partitionTypeAttribute`,
`skipNodeOperations`) are known here, so they are not "unknown", but no rule checks their
content: a 1.37 server with those gates off drops them on write, and draco ignores them.
"""

from __future__ import annotations

from draco.validation.schema import BOOL, INT, QUANTITY, RAW, STRING, TIME, ListOf, MapOf, Node, Obj

__all__ = ["KIND_SHAPES", "SHAPES_BY_NAME"]

_STRINGS = ListOf(STRING)

NODE_SELECTOR_REQUIREMENT = Obj(
    "NodeSelectorRequirement", {"key": STRING, "operator": STRING, "values": _STRINGS}
)
NODE_SELECTOR_TERM = Obj(
    "NodeSelectorTerm",
    {"matchExpressions": ListOf(NODE_SELECTOR_REQUIREMENT), "matchFields": ListOf(NODE_SELECTOR_REQUIREMENT)},
)
NODE_SELECTOR = Obj("NodeSelector", {"nodeSelectorTerms": ListOf(NODE_SELECTOR_TERM)})

CONDITION = Obj(
    "Condition",
    {
        "type": STRING,
        "status": STRING,
        "observedGeneration": INT,
        "lastTransitionTime": TIME,
        "reason": STRING,
        "message": STRING,
    },
)

OWNER_REFERENCE = Obj(
    "OwnerReference",
    {
        "apiVersion": STRING,
        "kind": STRING,
        "name": STRING,
        "uid": STRING,
        "controller": BOOL,
        "blockOwnerDeletion": BOOL,
    },
)

OBJECT_META = Obj(
    "ObjectMeta",
    {
        "name": STRING,
        "generateName": STRING,
        "namespace": STRING,
        "selfLink": STRING,
        "uid": STRING,
        "resourceVersion": STRING,
        "generation": INT,
        "creationTimestamp": TIME,
        "deletionTimestamp": TIME,
        "deletionGracePeriodSeconds": INT,
        "labels": MapOf(STRING),
        "annotations": MapOf(STRING),
        "ownerReferences": ListOf(OWNER_REFERENCE),
        "finalizers": _STRINGS,
        "managedFields": ListOf(RAW),
    },
)

CEL_DEVICE_SELECTOR = Obj("CELDeviceSelector", {"expression": STRING})
DEVICE_SELECTOR = Obj("DeviceSelector", {"cel": CEL_DEVICE_SELECTOR})
OPAQUE = Obj("OpaqueDeviceConfiguration", {"driver": STRING, "parameters": RAW})
DEVICE_TOLERATION = Obj(
    "DeviceToleration",
    {"key": STRING, "operator": STRING, "value": STRING, "effect": STRING, "tolerationSeconds": INT},
)
DEVICE_TAINT = Obj("DeviceTaint", {"key": STRING, "value": STRING, "effect": STRING, "timeAdded": TIME})
CAPACITY_REQUIREMENTS = Obj("CapacityRequirements", {"requests": MapOf(QUANTITY)})
DERIVED_ATTRIBUTE = Obj("DeviceDerivedAttribute", {"name": STRING, "expression": STRING})

_REQUEST_COMMON: dict[str, Node] = {
    "deviceClassName": STRING,
    "selectors": ListOf(DEVICE_SELECTOR),
    "allocationMode": STRING,
    "count": INT,
    "tolerations": ListOf(DEVICE_TOLERATION),
    "capacity": CAPACITY_REQUIREMENTS,
    "derivedAttributes": ListOf(DERIVED_ATTRIBUTE),
}
EXACT_DEVICE_REQUEST = Obj("ExactDeviceRequest", {**_REQUEST_COMMON, "adminAccess": BOOL})
DEVICE_SUB_REQUEST = Obj("DeviceSubRequest", {"name": STRING, **_REQUEST_COMMON})
DEVICE_REQUEST = Obj(
    "DeviceRequest",
    {"name": STRING, "exactly": EXACT_DEVICE_REQUEST, "firstAvailable": ListOf(DEVICE_SUB_REQUEST)},
)
DEVICE_CONSTRAINT = Obj(
    "DeviceConstraint", {"requests": _STRINGS, "matchAttribute": STRING, "distinctAttribute": STRING}
)
DEVICE_CLAIM_CONFIGURATION = Obj("DeviceClaimConfiguration", {"requests": _STRINGS, "opaque": OPAQUE})
DEVICE_CLAIM = Obj(
    "DeviceClaim",
    {
        "requests": ListOf(DEVICE_REQUEST),
        "constraints": ListOf(DEVICE_CONSTRAINT),
        "config": ListOf(DEVICE_CLAIM_CONFIGURATION),
    },
)
RESOURCE_CLAIM_SPEC = Obj("ResourceClaimSpec", {"devices": DEVICE_CLAIM})

DEVICE_REQUEST_ALLOCATION_RESULT = Obj(
    "DeviceRequestAllocationResult",
    {
        "request": STRING,
        "driver": STRING,
        "pool": STRING,
        "device": STRING,
        "adminAccess": BOOL,
        "tolerations": ListOf(DEVICE_TOLERATION),
        "bindingConditions": _STRINGS,
        "bindingFailureConditions": _STRINGS,
        "shareID": STRING,
        "consumedCapacity": MapOf(QUANTITY),
        "skipNodeOperations": _STRINGS,
    },
)
DEVICE_ALLOCATION_CONFIGURATION = Obj(
    "DeviceAllocationConfiguration", {"source": STRING, "requests": _STRINGS, "opaque": OPAQUE}
)
ALLOCATION_RESULT = Obj(
    "AllocationResult",
    {
        "devices": Obj(
            "DeviceAllocationResult",
            {
                "results": ListOf(DEVICE_REQUEST_ALLOCATION_RESULT),
                "config": ListOf(DEVICE_ALLOCATION_CONFIGURATION),
            },
        ),
        "nodeSelector": NODE_SELECTOR,
        "allocationTimestamp": TIME,
    },
)
RESOURCE_CLAIM_CONSUMER_REFERENCE = Obj(
    "ResourceClaimConsumerReference", {"apiGroup": STRING, "resource": STRING, "name": STRING, "uid": STRING}
)
NETWORK_DEVICE_DATA = Obj(
    "NetworkDeviceData", {"interfaceName": STRING, "ips": _STRINGS, "hardwareAddress": STRING}
)
ALLOCATED_DEVICE_STATUS = Obj(
    "AllocatedDeviceStatus",
    {
        "driver": STRING,
        "pool": STRING,
        "device": STRING,
        "shareID": STRING,
        "conditions": ListOf(CONDITION),
        "data": RAW,
        "networkData": NETWORK_DEVICE_DATA,
    },
)
RESOURCE_CLAIM_STATUS = Obj(
    "ResourceClaimStatus",
    {
        "allocation": ALLOCATION_RESULT,
        "reservedFor": ListOf(RESOURCE_CLAIM_CONSUMER_REFERENCE),
        "devices": ListOf(ALLOCATED_DEVICE_STATUS),
    },
)

DEVICE_CLASS_SPEC = Obj(
    "DeviceClassSpec",
    {
        "selectors": ListOf(DEVICE_SELECTOR),
        "config": ListOf(Obj("DeviceClassConfiguration", {"opaque": OPAQUE})),
        "extendedResourceName": STRING,
    },
)

COUNTER = Obj("Counter", {"value": QUANTITY})
DEVICE_ATTRIBUTE = Obj(
    "DeviceAttribute",
    {
        "int": INT,
        "bool": BOOL,
        "string": STRING,
        "version": STRING,
        "ints": ListOf(INT),
        "bools": ListOf(BOOL),
        "strings": _STRINGS,
        "versions": _STRINGS,
    },
)
CAPACITY_REQUEST_POLICY = Obj(
    "CapacityRequestPolicy",
    {
        "default": QUANTITY,
        "validValues": ListOf(QUANTITY),
        "validRange": Obj("CapacityRequestPolicyRange", {"min": QUANTITY, "max": QUANTITY, "step": QUANTITY}),
    },
)
DEVICE_CAPACITY = Obj("DeviceCapacity", {"value": QUANTITY, "requestPolicy": CAPACITY_REQUEST_POLICY})
DEVICE_COUNTER_CONSUMPTION = Obj(
    "DeviceCounterConsumption",
    {"counterSet": STRING, "counters": MapOf(COUNTER), "compatibilityGroups": _STRINGS},
)
NODE_ALLOCATABLE_RESOURCE = Obj(
    "NodeAllocatableResource",
    {
        "mapping": Obj(
            "NodeAllocatableMapping",
            {"capacityKey": STRING, "capacityMultiplier": QUANTITY, "deviceMultiplier": QUANTITY},
        ),
        "overhead": Obj("NodeAllocatableOverhead", {"perPod": QUANTITY, "perContainer": QUANTITY}),
    },
)
DEVICE = Obj(
    "Device",
    {
        "name": STRING,
        "attributes": MapOf(DEVICE_ATTRIBUTE),
        "capacity": MapOf(DEVICE_CAPACITY),
        "consumesCounters": ListOf(DEVICE_COUNTER_CONSUMPTION),
        "nodeName": STRING,
        "nodeSelector": NODE_SELECTOR,
        "allNodes": BOOL,
        "taints": ListOf(DEVICE_TAINT),
        "bindsToNode": BOOL,
        "bindingConditions": _STRINGS,
        "bindingFailureConditions": _STRINGS,
        "allowMultipleAllocations": BOOL,
        "nodeAllocatableResources": MapOf(NODE_ALLOCATABLE_RESOURCE),
    },
)
RESOURCE_SLICE_SPEC = Obj(
    "ResourceSliceSpec",
    {
        "driver": STRING,
        "pool": Obj("ResourcePool", {"name": STRING, "generation": INT, "resourceSliceCount": INT}),
        "nodeName": STRING,
        "nodeSelector": NODE_SELECTOR,
        "allNodes": BOOL,
        "devices": ListOf(DEVICE),
        "perDeviceNodeSelection": BOOL,
        "sharedCounters": ListOf(Obj("CounterSet", {"name": STRING, "counters": MapOf(COUNTER)})),
        "partitionTypeAttribute": STRING,
        "skipNodeOperations": _STRINGS,
    },
)

DEVICE_TAINT_RULE_SPEC = Obj(
    "DeviceTaintRuleSpec",
    {
        "deviceSelector": Obj("DeviceTaintSelector", {"driver": STRING, "pool": STRING, "device": STRING}),
        "taint": DEVICE_TAINT,
    },
)
DEVICE_TAINT_RULE_STATUS = Obj("DeviceTaintRuleStatus", {"conditions": ListOf(CONDITION)})

_TOP: dict[str, Node] = {"apiVersion": STRING, "kind": STRING, "metadata": OBJECT_META}

#: The whole object per kind, as the native API serves it.
KIND_SHAPES: dict[str, Obj] = {
    "DeviceClass": Obj("DeviceClass", {**_TOP, "spec": DEVICE_CLASS_SPEC}),
    "ResourceClaim": Obj(
        "ResourceClaim", {**_TOP, "spec": RESOURCE_CLAIM_SPEC, "status": RESOURCE_CLAIM_STATUS}
    ),
    "ResourceClaimTemplate": Obj(
        "ResourceClaimTemplate",
        {
            **_TOP,
            "spec": Obj("ResourceClaimTemplateSpec", {"metadata": OBJECT_META, "spec": RESOURCE_CLAIM_SPEC}),
        },
    ),
    "ResourceSlice": Obj("ResourceSlice", {**_TOP, "spec": RESOURCE_SLICE_SPEC}),
    "DeviceTaintRule": Obj(
        "DeviceTaintRule", {**_TOP, "spec": DEVICE_TAINT_RULE_SPEC, "status": DEVICE_TAINT_RULE_STATUS}
    ),
}


def _collect(node: object, into: dict[str, Obj]) -> None:
    if isinstance(node, Obj):
        if node.name in into:
            return
        into[node.name] = node
        for sub in node.fields.values():
            _collect(sub, into)
    elif isinstance(node, ListOf):
        _collect(node.item, into)
    elif isinstance(node, MapOf):
        _collect(node.value, into)


#: Every struct shape by its Go type name (for the e2e comparison with OpenAPI).
SHAPES_BY_NAME: dict[str, Obj] = {}
for _shape in KIND_SHAPES.values():
    _collect(_shape, SHAPES_BY_NAME)
