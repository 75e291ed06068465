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
    bool_: StrictBool | None = Field(default=None, alias="bool")
    string: StrictStr | None = None
    version: StrictStr | None = None
    ints: list[StrictInt] | None = None
    bools: list[StrictBool] | None = None
    strings: list[StrictStr] | None = None
    versions: list[StrictStr] | None = None

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
    min: Quantity
    max: Quantity | None = None
    step: Quantity | None = None


class CapacityRequestPolicy(ApiModel):
    """How much of a consumable capacity one allocation may take (multi-allocatable devices)."""

    default: Quantity | None = None
    valid_values: list[Quantity] | None = None
    valid_range: CapacityRequestPolicyRange | None = None


class DeviceCapacity(ApiModel):
    value: Quantity
    request_policy: CapacityRequestPolicy | None = None


class Counter(ApiModel):
    value: Quantity


class CounterSet(ApiModel):
    """Shared counters that partitionable devices draw from (unique name per pool)."""

    name: str
    counters: dict[str, Counter]


class DeviceCounterConsumption(ApiModel):
    counter_set: str
    counters: dict[str, Counter]


class Device(ApiModel):
    name: str
    attributes: dict[str, DeviceAttribute] | None = None
    capacity: dict[str, DeviceCapacity] | None = None
    consumes_counters: list[DeviceCounterConsumption] | None = None
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: list[DeviceTaint] | None = None
    binds_to_node: bool | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    allow_multiple_allocations: bool | None = None
    node_allocatable_resources: dict[str, JSONValue] | None = None

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
    name: str
    generation: int = 0
    resource_slice_count: int = 1


class ResourceSliceSpec(ApiModel):
    driver: str
    pool: ResourcePool
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] | None = None
    shared_counters: list[CounterSet] | None = None
    partition_type_attribute: str | None = None
    skip_node_operations: list[str] | None = None


class ResourceSlice(TypedObject):
    KIND: ClassVar[str] = KIND_RESOURCE_SLICE
    NAMESPACED: ClassVar[bool] = False

    spec: ResourceSliceSpec

    @property
    def devices(self) -> list[Device]:
        return self.spec.devices or []
