"""The one small interface every device driver implements, and the values it hands out.

A driver answers three questions for the agent, and nothing else:

- which devices does node N have right now (`DeviceDriver.inventory`), in the API's own
  shape (attributes, capacity, counters, taints), so the publisher only has to cut them
  into slices;
- when did that answer change (`DeviceDriver.watch` calls `notify`): the fake driver
  re-reads its file, the NVIDIA driver waits on NVML health events;
- what does a container need to use device D (`DeviceDriver.prepare_device`): environment
  variables, device nodes and mounts, which become one CDI device. The driver also gets the
  opaque configuration the claim's allocation carries for D (`OpaqueConfig`, in upstream's
  precedence) and fails prepare with `DeviceConfigError` when it cannot use it, and what
  the allocation says of D (`Allocation`: the share and the capacity it consumes of a
  device with `allowMultipleAllocations`). What the driver could not make the container
  runtime enforce it says in `ContainerEdits.notes`, which reach the claim's status.
  `prepare_devices` gets all of one claim's devices at once (a driver that sets a device
  up per claim, like NVIDIA's MPS daemon, overrides it), and `unprepare_claim` undoes
  what it set up for a claim.

Publishing, checkpoints, CDI files, metadata files and claim status are the agent's job
and the same for every driver (the split dra-example-driver makes between its profiles
and its kubelet plugin).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.api.constants import ALLOCATION_CONFIG_SOURCE_CLAIM, ALLOCATION_CONFIG_SOURCE_CLASS
from draco.errors import DeviceConfigError

__all__ = [
    "BINDING_CONDITION",
    "BINDING_FAILURE_CONDITION",
    "Allocation",
    "ContainerEdits",
    "Device",
    "DeviceDriver",
    "DeviceNode",
    "Inventory",
    "Mount",
    "OpaqueConfig",
    "PrepareRequest",
    "device_configs",
    "reject_configs",
]

#: The binding condition devices declare when asked to: the agent sets it True once the
#: device is prepared, so the operator un-gates the pod only when the node is ready.
BINDING_CONDITION = "draco.dev/prepared"
#: Its failure counterpart, set True when preparing the device failed.
BINDING_FAILURE_CONDITION = "draco.dev/prepare-failed"


@dataclass(frozen=True)
class DeviceNode:
    """A device node the container gets (CDI ``deviceNodes[]``)."""

    path: str
    host_path: str | None = None
    permissions: str | None = None

    def to_cdi(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.host_path:
            out["hostPath"] = self.host_path
        if self.permissions:
            out["permissions"] = self.permissions
        return out


@dataclass(frozen=True)
class Mount:
    """A bind mount the container gets (CDI ``mounts[]``)."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ("ro", "bind")

    def to_cdi(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        return out


@dataclass(frozen=True)
class ContainerEdits:
    """What a container needs to use a device: CDI ``containerEdits``."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    #: What the driver could not make the runtime enforce (not part of the CDI spec: the
    #: agent puts them in the claim's status and its Event).
    notes: tuple[str, ...] = ()

    def to_cdi(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [n.to_cdi() for n in self.device_nodes]
        if self.mounts:
            out["mounts"] = [m.to_cdi() for m in self.mounts]
        return out


@dataclass(frozen=True)
class Device:
    """One device as published, in the API's JSON shape (``attributes`` values are
    ``{"int": 1}``-style unions, ``capacity`` values ``{"value": "80Gi"}``)."""

    name: str
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    consumes_counters: Sequence[Mapping[str, Any]] = ()
    #: Taints without ``timeAdded``: the publisher stamps it and keeps it stable.
    taints: Sequence[Mapping[str, Any]] = ()
    binding_conditions: Sequence[str] = ()
    binding_failure_conditions: Sequence[str] = ()
    allow_multiple_allocations: bool = False

    @property
    def needs_small_slices(self) -> bool:
        """Taints and counter consumption cap a slice at 64 devices instead of 128."""
        return bool(self.taints or self.consumes_counters)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.attributes:
            out["attributes"] = {k: dict(v) for k, v in self.attributes.items()}
        if self.capacity:
            out["capacity"] = {k: dict(v) for k, v in self.capacity.items()}
        if self.consumes_counters:
            out["consumesCounters"] = [dict(c) for c in self.consumes_counters]
        if self.taints:
            out["taints"] = [dict(t) for t in self.taints]
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.allow_multiple_allocations:
            out["allowMultipleAllocations"] = True
        return out


@dataclass(frozen=True)
class Inventory:
    """Everything one driver has on one node: devices and the counter sets they share."""

    devices: Sequence[Device] = ()
    #: CounterSets in API shape: ``{"name": ..., "counters": {"memory": {"value": "80Gi"}}}``.
    shared_counters: Sequence[Mapping[str, Any]] = ()
    #: The fully qualified attribute whose value is a partition's type (a MIG profile),
    #: published as ``partitionTypeAttribute`` on the slices of devices that consume
    #: counters (the operator's pool status tells partition types apart by it).
    partition_type_attribute: str | None = None

    def device(self, name: str) -> Device | None:
        return next((d for d in self.devices if d.name == name), None)


@dataclass(frozen=True)
class Allocation:
    """What the claim's allocation result says of one device besides its name."""

    claim_uid: str = ""
    request: str = ""
    #: Set when the device allows multiple allocations: this allocation's share of it.
    share_id: str | None = None
    #: The capacity the share consumes (`consumedCapacity`), as quantities.
    consumed_capacity: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, claim_uid: str, result: Mapping[str, Any]) -> Allocation:
        return cls(
            claim_uid=claim_uid,
            request=str(result.get("request") or ""),
            share_id=result.get("shareID") or None,
            consumed_capacity={str(k): str(v) for k, v in (result.get("consumedCapacity") or {}).items()},
        )


@dataclass(frozen=True)
class OpaqueConfig:
    """One opaque configuration entry of a claim's allocation that applies to a device."""

    #: `FromClass` or `FromClaim`.
    source: str
    #: The requests it names; empty means every request of the claim.
    requests: tuple[str, ...]
    #: The driver-defined JSON object.
    parameters: Mapping[str, Any]

    def describe(self) -> str:
        where = "the device class" if self.source == ALLOCATION_CONFIG_SOURCE_CLASS else "the claim"
        return f"configuration from {where}" + (f" for {', '.join(self.requests)}" if self.requests else "")


_SOURCE_ORDER: Final = {ALLOCATION_CONFIG_SOURCE_CLASS: 0, ALLOCATION_CONFIG_SOURCE_CLAIM: 1}


def device_configs(
    allocation_config: Sequence[Mapping[str, Any]], *, driver: str, request: str
) -> list[OpaqueConfig]:
    """The opaque configs of driver `driver` that apply to the result of `request`, lowest
    precedence first: class configs, then claim configs, each in list order (upstream:
    the claim's configuration overrides the class's, a later entry an earlier one).

    `allocation_config` is `status.allocation.devices.config`. An entry applies when its
    `requests` is empty or names the result's request — `<req>/<sub>` for a subrequest —
    or its top-level `<req>`. Entries of other drivers are skipped: one request may be
    satisfiable by several drivers. An entry that is not `opaque` (a future API kind) is
    an error, as upstream's drivers treat it.
    """
    top = request.split("/", 1)[0]
    picked: list[tuple[int, int, OpaqueConfig]] = []
    for index, entry in enumerate(allocation_config):
        source = str(entry.get("source") or "")
        if source not in _SOURCE_ORDER:
            raise DeviceConfigError(f"allocation config #{index} has unknown source {source!r}")
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping):
            raise DeviceConfigError(
                f"allocation config #{index} is not `opaque`; only opaque configuration is supported"
            )
        if opaque.get("driver") != driver:
            continue
        requests = tuple(str(r) for r in entry.get("requests") or ())
        if requests and request not in requests and top not in requests:
            continue
        parameters = opaque.get("parameters")
        if not isinstance(parameters, Mapping):
            raise DeviceConfigError(f"allocation config #{index}: opaque parameters must be a JSON object")
        picked.append((_SOURCE_ORDER[source], index, OpaqueConfig(source, requests, dict(parameters))))
    return [config for _, _, config in sorted(picked, key=lambda p: (p[0], p[1]))]


@dataclass(frozen=True)
class PrepareRequest:
    """One device of a claim to prepare, with its configs and its allocation."""

    device: Device
    configs: Sequence[OpaqueConfig] = ()
    allocation: Allocation = field(default_factory=Allocation)


def reject_configs(driver: str, configs: Sequence[OpaqueConfig]) -> None:
    """For drivers that take no configuration: any config for them fails prepare."""
    if configs:
        raise DeviceConfigError(
            f"driver {driver} accepts no opaque configuration, but the {configs[0].describe()} sets "
            f"{sorted(configs[0].parameters)}"
        )


class DeviceDriver(abc.ABC):
    """A source of devices for one DRA driver name on one or more nodes."""

    #: The DRA driver name (a DNS subdomain, e.g. ``gpu.draco.dev``) slices and claims carry.
    name: str
    #: The class part of the CDI kind ``<name>/<cdi_class>``.
    cdi_class: str = "device"

    @abc.abstractmethod
    def inventory(self, node: str) -> Inventory:
        """The devices of `node` now. Cheap: the agent calls it on every reconcile."""

    @abc.abstractmethod
    def prepare_device(
        self,
        node: str,
        device: Device,
        *,
        configs: Sequence[OpaqueConfig] = (),
        allocation: Allocation | None = None,
    ) -> ContainerEdits:
        """What a container needs to use `device`, configured by `configs` (lowest
        precedence first, see `device_configs`); raises `AgentError` when it cannot be
        prepared, `DeviceConfigError` when a config is not one it understands (the claim
        then gets the failure condition)."""

    def prepare_devices(self, node: str, requests: Sequence[PrepareRequest]) -> list[ContainerEdits]:
        """`prepare_device` for each device of one claim, in order. Configuration errors
        of every device are raised together (one `DeviceConfigError` naming them all, each
        once), so a user sees every refused config at once."""
        edits: list[ContainerEdits] = []
        refused: list[str] = []
        for request in requests:
            try:
                edits.append(
                    self.prepare_device(
                        node, request.device, configs=request.configs, allocation=request.allocation
                    )
                )
            except DeviceConfigError as exc:
                if str(exc) not in refused:
                    refused.append(str(exc))
        if refused:
            raise DeviceConfigError("; ".join(refused))
        return edits

    def unprepare_claim(self, node: str, claim_uid: str) -> None:
        """Undo what preparing claim `claim_uid` set up beyond its files (idempotent); the
        default set up nothing."""
        return None

    def device_plugin_id(self, device: Device) -> tuple[str, str] | None:
        """The extended resource name and device ID a device plugin would report `device`
        under, for tools that read the kubelet's PodResources API (dcgm-exporter finds a
        GPU's pod by ``nvidia.com/gpu`` and the GPU's UUID); None: no such name (default)."""
        return None

    async def watch(self, notify: Callable[[], None]) -> None:
        """Run until cancelled, calling `notify()` whenever `inventory` may have changed.
        The default has nothing to watch and returns at once."""
        return None

    def close(self) -> None:
        """Release what the driver holds (NVML handles); the default holds nothing."""
        return None
