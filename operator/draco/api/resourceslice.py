"""ResourceSlice: a driver's published devices in one pool (cluster-scoped).

Same shape as upstream ``resource.k8s.io/v1`` (the flat ``Device`` of v1, not v1beta1's
``basic``), including the partitionable-device counters, consumable capacity with request
policies, device taints, binding conditions and the 1.37 fields. Fields whose 1.37 shape
is still alpha and in flux (``nodeAllocatableResources``) are kept as raw JSON.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, StrictBool, StrictInt, StrictStr

from draco.api.common import DeviceTaint
from draco.api.constants import KIND_RESOURCE_SLICE
from draco.api.meta import ApiModel, JSONValue, NodeSelector, TypedObject
from draco.api.names import qualify_name
from draco.api.quantity import Quantity

__all__ = [
    "AttributeValue",
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "Counter",
    "CounterSet",
    "Device",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceCounterConsumption",
    "ResourcePool",
    "ResourceSlice",
    "ResourceSliceSpec",
]

#: What an attribute holds: a scalar, or (DRAListTypeAttributes) a list of scalars.
AttributeValue = int | bool | str | list[int] | list[bool] | list[str]

_ATTRIBUTE_FIELDS = (
    ("int_", "int"),
    ("bool_", "bool"),
    ("string", "string"),
    ("version", "version"),
    ("ints", "ints"),
    ("bools", "bools"),
    ("strings", "strings"),
    ("versions", "versions"),
)


class DeviceAttribute(ApiModel):
    """One attribute; exactly one field must be set (validation enforces it).

    The JSON names ``int`` and ``bool`` are Python builtins, hence ``int_``/``bool_``.
    Versions are semver strings. The list kinds (``ints``, ``bools``, ``strings``,
    ``versions``) and CEL's ``includes()`` are always available in draco; upstream gates
    them behind the alpha DRAListTypeAttributes feature (off by default in 1.37), so a
    ``resource.k8s.io`` cluster accepts them only where that gate is on.
    """

    int_: StrictInt | None = Field(default=None, alias="int")
    """A 64-bit integer."""
    bool_: StrictBool | None = Field(default=None, alias="bool")
    """A boolean."""
    string: StrictStr | None = None
    """A string of at most 64 characters."""
    version: StrictStr | None = None
    """A semantic version (semver 2.0.0) of at most 64 characters."""
    ints: list[StrictInt] | None = None
    """A non-empty list of integers (alpha, DRAListTypeAttributes)."""
    bools: list[StrictBool] | None = None
    """A non-empty list of booleans (alpha, DRAListTypeAttributes)."""
    strings: list[StrictStr] | None = None
    """A non-empty list of strings of at most 64 characters each (alpha, DRAListTypeAttributes)."""
    versions: list[StrictStr] | None = None
    """A non-empty list of semantic versions (alpha, DRAListTypeAttributes)."""

    @property
    def kind(self) -> str | None:
        """``int``, ``bool``, ``string``, ``version`` or the list kinds (``ints``, ...);
        ``None`` when nothing is set."""
        for attribute, kind in _ATTRIBUTE_FIELDS:
            if getattr(self, attribute) is not None:
                return kind
        return None

    @property
    def value(self) -> AttributeValue | None:
        """The value of the first field that is set (versions as their string)."""
        for attribute, _ in _ATTRIBUTE_FIELDS:
            value = getattr(self, attribute)
            if value is not None:
                return value  # type: ignore[no-any-return]
        return None

    @property
    def set_fields(self) -> list[str]:
        """JSON names of every field that is set (more than one is invalid)."""
        return [kind for attribute, kind in _ATTRIBUTE_FIELDS if getattr(self, attribute) is not None]


class CapacityRequestPolicyRange(ApiModel):
    """A range of amounts one allocation may request, optionally in steps."""

    min: Quantity
    """The smallest amount one allocation takes; required, at most the capacity."""
    max: Quantity | None = None
    """The largest amount; at least ``min`` and at most the capacity."""
    step: Quantity | None = None
    """Requests are rounded up to ``min`` plus a multiple of the step."""


class CapacityRequestPolicy(ApiModel):
    """How much of a consumable capacity one allocation may take (multi-allocatable devices)."""

    default: Quantity | None = None
    """The amount consumed when a request does not ask for this capacity; required with
    ``validValues`` or ``validRange``."""
    valid_values: list[Quantity] | None = None
    """The only amounts allowed, ascending, at most 10; a request is rounded up to the next one."""
    valid_range: CapacityRequestPolicyRange | None = None
    """The range of amounts allowed; exclusive with ``validValues``."""


class DeviceCapacity(ApiModel):
    """An amount of something a device has, such as memory."""

    value: Quantity
    """The total amount. Required."""
    request_policy: CapacityRequestPolicy | None = None
    """How allocations share this capacity; only on devices that allow multiple allocations."""


class Counter(ApiModel):
    """An amount in a counter set."""

    value: Quantity
    """The amount. Required."""


class CounterSet(ApiModel):
    """Shared counters that partitionable devices draw from (unique name per pool)."""

    name: str
    """The counter set's name (a DNS label), unique within the pool."""
    counters: dict[str, Counter]
    """The counters by name (DNS labels); 1 to 32."""


class DeviceCounterConsumption(ApiModel):
    """What a device draws from one shared counter set while allocated."""

    counter_set: str
    """The name of a counter set in the same pool."""
    counters: dict[str, Counter]
    """The amount drawn from each counter; 1 to 32."""


class Device(ApiModel):
    """One device a driver publishes."""

    name: str
    """The device's name (a DNS label), unique within the pool."""
    attributes: dict[str, DeviceAttribute] | None = None
    """Attributes by qualified name (unqualified names are in the driver's domain), for selectors and
    constraints. Attributes and capacities together: at most 32."""
    capacity: dict[str, DeviceCapacity] | None = None
    """Capacities by qualified name, for selectors and consumable capacity."""
    consumes_counters: list[DeviceCounterConsumption] | None = None
    """Shared counters the device draws from when allocated (partitionable devices); at most 2."""
    node_name: str | None = None
    """With ``perDeviceNodeSelection``: the node the device is on."""
    node_selector: NodeSelector | None = None
    """With ``perDeviceNodeSelection``: the nodes that can use the device."""
    all_nodes: bool | None = None
    """With ``perDeviceNodeSelection``: the device is available on every node."""
    taints: list[DeviceTaint] | None = None
    """Taints on the device, set by the driver; at most 16."""
    binds_to_node: bool | None = None
    """If true, an allocation of the device is limited to the node the pod is scheduled to."""
    binding_conditions: list[str] | None = None
    """Conditions that must be True in the claim's device status before a pod using the device binds;
    at most 4."""
    binding_failure_conditions: list[str] | None = None
    """Conditions that, when True, make binding fail; at most 4, set together with ``bindingConditions``."""
    allow_multiple_allocations: bool | None = None
    """If true, the device can be allocated to several claims at once, each consuming part of its
    capacity."""
    node_allocatable_resources: dict[str, JSONValue] | None = None
    """Alpha: node resources (such as cpu or memory) that allocating the device accounts for; kept as
    raw JSON while its shape changes."""

    def qualified_attributes(self, *, driver: str) -> dict[str, DeviceAttribute]:
        """Attributes keyed by fully qualified name (unqualified names get the driver's domain)."""
        return {
            qualify_name(name, default_domain=driver): value
            for name, value in (self.attributes or {}).items()
        }

    def qualified_capacity(self, *, driver: str) -> dict[str, DeviceCapacity]:
        """Capacities keyed by fully qualified name (unqualified names get the driver's domain)."""
        return {
            qualify_name(name, default_domain=driver): value for name, value in (self.capacity or {}).items()
        }


class ResourcePool(ApiModel):
    """The pool a slice belongs to; a pool may span several slices."""

    name: str
    """The pool's name, unique per driver (DNS subdomains joined by ``/``, at most 253); immutable."""
    generation: int = 0
    """Bumped by the driver when the pool changes; slices with an older generation are ignored."""
    resource_slice_count: int = 1
    """How many slices the pool has at this generation, so that consumers can tell whether they saw all."""


class ResourceSliceSpec(ApiModel):
    """A driver's devices in one pool and where they are available."""

    driver: str
    """The driver that publishes the slice (a DNS subdomain of at most 63 characters); immutable."""
    pool: ResourcePool
    """The pool the devices belong to. Required."""
    node_name: str | None = None
    """The node whose devices these are (local devices); immutable. One of nodeName, nodeSelector,
    allNodes and perDeviceNodeSelection must be set."""
    node_selector: NodeSelector | None = None
    """The nodes that can use the devices (exactly one term)."""
    all_nodes: bool | None = None
    """The devices are available on every node."""
    per_device_node_selection: bool | None = None
    """Each device says where it is available (its nodeName, nodeSelector or allNodes)."""
    devices: list[Device] | None = None
    """The devices; at most 128 (64 when any uses taints or counters). Exclusive with ``sharedCounters``."""
    shared_counters: list[CounterSet] | None = None
    """Counter sets that the pool's partitionable devices draw from; at most 8."""
    partition_type_attribute: str | None = None
    """Alpha: the qualified name of the attribute that tells a device's partition type."""
    skip_node_operations: list[str] | None = None
    """Alpha: node operations (NodePrepareResources, NodeUnprepareResources, or ``*``) the kubelet skips
    for these devices."""


class ResourceSlice(TypedObject):
    """Devices a driver publishes, for one pool (or part of one). draco's copy of
    ``resource.k8s.io/v1`` ResourceSlice (cluster-scoped), written by node agents and drivers."""

    KIND: ClassVar[str] = KIND_RESOURCE_SLICE
    NAMESPACED: ClassVar[bool] = False

    spec: ResourceSliceSpec
    """The driver, the pool and its devices. Required."""

    @property
    def devices(self) -> list[Device]:
        return self.spec.devices or []
