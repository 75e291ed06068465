"""NVIDIA GPUs from NVML (the `draco[nvidia]` extra, module `pynvml` from nvidia-ml-py).

Each GPU becomes device `gpu-<index>` with its product name, UUID, memory, compute
capability and driver version. A MIG-capable GPU also gets a counter set
`gpu-<index>-counters` (its memory and its compute slices) and one device per MIG
partition it could be cut into (`gpu-<index>-mig-<slices>g<GiB>gb-<n>`); the whole GPU and
its partitions consume the same counters, so the allocator never hands out both.

Health: the driver registers for critical-XID events; a fatal XID, or a GPU NVML reports
as lost, becomes a NoExecute `draco.dev/unhealthy` taint on the device (value
`xid-<n>` or `gpu-lost`), published like any inventory change.

The NVML module is injected (`nvml=`), so tests run the whole driver on a fake module and
no code here needs a GPU to be imported. What the driver does not do (see docs/agent.md):
create MIG instances at prepare time; preparing a partition fails with that message.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from draco.agent.drivers.base import (
    BINDING_CONDITION,
    BINDING_FAILURE_CONDITION,
    ContainerEdits,
    Device,
    DeviceDriver,
    DeviceNode,
    Inventory,
    OpaqueConfig,
    reject_configs,
)
from draco.agent.health import is_fatal_xid, unhealthy_taint
from draco.errors import AgentError
from draco.logs import get_logger

__all__ = ["NVIDIA_DRIVER_NAME", "NvidiaDriver"]

log = get_logger(__name__)

NVIDIA_DRIVER_NAME: Final = "gpu.nvidia.draco.dev"
_CONTROL_NODES: Final = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_MIB: Final = 1024 * 1024


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def semver(raw: str) -> str:
    """NVML versions (`535.104.05`, `8.0`) as semver: three parts, no leading zeros."""
    parts = [int(p) for p in raw.split(".") if p.isdigit()][:3]
    while len(parts) < 3:
        parts.append(0)
    return ".".join(str(p) for p in parts)


@dataclass
class Gpu:
    index: int
    uuid: str
    minor: int
    device: Device
    partitions: list[Device] = field(default_factory=list)
    counters: dict[str, Any] | None = None
    problem: str | None = None


class NvidiaDriver(DeviceDriver):
    cdi_class = "gpu"

    def __init__(
        self, nvml: Any, *, binding_conditions: bool = False, name: str = NVIDIA_DRIVER_NAME
    ) -> None:
        self.name = name
        self.nvml = nvml
        self.binding_conditions = binding_conditions
        nvml.nvmlInit()
        self.driver_version = semver(_text(nvml.nvmlSystemGetDriverVersion()))
        self.gpus: list[Gpu] = [self._discover(i) for i in range(nvml.nvmlDeviceGetCount())]

    @classmethod
    def from_nvml(cls, *, binding_conditions: bool = False) -> NvidiaDriver:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError as exc:
            raise AgentError("the nvidia driver needs NVML bindings: pip install 'draco[nvidia]'") from exc
        try:
            return cls(nvml, binding_conditions=binding_conditions)
        except nvml.NVMLError as exc:
            raise AgentError(
                f"NVML failed to start ({exc}): is the NVIDIA driver loaded on this node?"
            ) from exc

    # ---- discovery

    def _conditions(self) -> dict[str, Any]:
        if not self.binding_conditions:
            return {}
        return {
            "binding_conditions": (BINDING_CONDITION,),
            "binding_failure_conditions": (BINDING_FAILURE_CONDITION,),
        }

    def _mig_capable(self, handle: Any) -> bool:
        try:
            self.nvml.nvmlDeviceGetMigMode(handle)
        except self.nvml.NVMLError:
            return False
        return True

    def _discover(self, index: int) -> Gpu:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        mig = self._mig_capable(handle)
        attributes: dict[str, dict[str, Any]] = {
            "type": {"string": "gpu"},
            "index": {"int": index},
            "minor": {"int": minor},
            "uuid": {"string": uuid},
            "productName": {"string": _text(nvml.nvmlDeviceGetName(handle))[:64]},
            "driverVersion": {"version": self.driver_version},
            "cudaComputeCapability": {"version": semver(f"{major}.{minor_cc}")},
            "migCapable": {"bool": mig},
        }
        name = f"gpu-{index}"
        gpu = Gpu(index=index, uuid=uuid, minor=minor, device=Device(name=name))
        consumes: list[dict[str, Any]] = []
        if mig:
            gpu.partitions, slices = self._partitions(handle, index=index, parent_uuid=uuid)
            if gpu.partitions:
                counter_set = f"{name}-counters"
                gpu.counters = {
                    "name": counter_set,
                    "counters": {"memory": {"value": str(memory)}, "compute-slices": {"value": str(slices)}},
                }
                consumes = [{"counterSet": counter_set, "counters": gpu.counters["counters"]}]
        gpu.device = Device(
            name=name,
            attributes=attributes,
            capacity={"memory": {"value": str(memory)}},
            consumes_counters=consumes,
            **self._conditions(),
        )
        return gpu

    def _partitions(self, handle: Any, *, index: int, parent_uuid: str) -> tuple[list[Device], int]:
        nvml = self.nvml
        devices: list[Device] = []
        total_slices = 0
        for profile in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
            except nvml.NVMLError:
                continue
            count, slices = int(info.instanceCount), int(info.sliceCount)
            if count <= 0 or slices <= 0:
                continue
            total_slices = max(total_slices, count * slices)
            gib = max(1, round(int(info.memorySizeMB) / 1024))
            profile_name = f"{slices}g.{gib}gb"
            for n in range(count):
                devices.append(
                    Device(
                        name=f"gpu-{index}-mig-{slices}g{gib}gb-{n}",
                        attributes={
                            "type": {"string": "mig"},
                            "parentIndex": {"int": index},
                            "parentUUID": {"string": parent_uuid},
                            "profile": {"string": profile_name},
                            "driverVersion": {"version": self.driver_version},
                        },
                        capacity={"memory": {"value": str(int(info.memorySizeMB) * _MIB)}},
                        consumes_counters=[
                            {
                                "counterSet": f"gpu-{index}-counters",
                                "counters": {
                                    "memory": {"value": str(int(info.memorySizeMB) * _MIB)},
                                    "compute-slices": {"value": str(slices)},
                                },
                            }
                        ],
                        **self._conditions(),
                    )
                )
        return devices, total_slices

    # ---- DeviceDriver

    def inventory(self, node: str) -> Inventory:
        devices: list[Device] = []
        counters: list[dict[str, Any]] = []
        for gpu in self.gpus:
            extra = [unhealthy_taint(gpu.problem)] if gpu.problem else []
            for device in (gpu.device, *gpu.partitions):
                devices.append(replace(device, taints=[*device.taints, *extra]) if extra else device)
            if gpu.counters:
                counters.append(gpu.counters)
        return Inventory(devices=devices, shared_counters=counters)

    def prepare_device(
        self, node: str, device: Device, *, configs: Sequence[OpaqueConfig] = ()
    ) -> ContainerEdits:
        reject_configs(self.name, configs)
        gpu = next((g for g in self.gpus if g.device.name == device.name), None)
        if gpu is None:
            raise AgentError(
                f"device {device.name}: creating MIG instances when preparing is not supported; "
                "allocate whole GPUs (attribute type == 'gpu') or pre-partition the GPU"
            )
        if gpu.problem:
            raise AgentError(f"device {device.name} is unhealthy ({gpu.problem})")
        nodes = (DeviceNode(path=f"/dev/nvidia{gpu.minor}"), *(DeviceNode(path=p) for p in _CONTROL_NODES))
        return ContainerEdits(env=(f"NVIDIA_VISIBLE_DEVICES={gpu.uuid}",), device_nodes=nodes)

    # ---- health

    def mark_unhealthy(self, uuid: str, reason: str) -> bool:
        """Record a problem on the GPU with `uuid`; True when that is news."""
        for gpu in self.gpus:
            if gpu.uuid == uuid and gpu.problem is None:
                gpu.problem = reason
                log.warning("GPU unhealthy", device=gpu.device.name, uuid=uuid, reason=reason)
                return True
        return False

    def check_lost(self) -> bool:
        """Probe every GPU; one NVML reports as lost gets the `gpu-lost` problem."""
        changed = False
        lost = getattr(self.nvml, "NVMLError_GpuIsLost", None)
        for gpu in self.gpus:
            if gpu.problem:
                continue
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                self.nvml.nvmlDeviceGetMemoryInfo(handle)
            except self.nvml.NVMLError as exc:
                if lost is not None and isinstance(exc, lost):
                    changed |= self.mark_unhealthy(gpu.uuid, "gpu-lost")
        return changed

    def handle_event(self, event: Any) -> bool:
        """One NVML event; True when a device became unhealthy."""
        if not (int(event.eventType) & int(self.nvml.nvmlEventTypeXidCriticalError)):
            return False
        xid = int(event.eventData)
        if not is_fatal_xid(xid):
            log.info("GPU reported a non-fatal XID", xid=xid)
            return False
        return self.mark_unhealthy(_text(self.nvml.nvmlDeviceGetUUID(event.device)), f"xid-{xid}")

    def _event_set(self) -> Any:
        events = self.nvml.nvmlEventSetCreate()
        for gpu in self.gpus:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(gpu.index)
            try:
                self.nvml.nvmlDeviceRegisterEvents(handle, self.nvml.nvmlEventTypeXidCriticalError, events)
            except self.nvml.NVMLError as exc:
                log.warning("GPU health events unavailable", device=gpu.device.name, error=str(exc))
        return events

    def _wait(self, events: Any, timeout_ms: int) -> Any | None:
        try:
            return self.nvml.nvmlEventSetWait_v2(events, timeout_ms)
        except self.nvml.NVMLError as exc:
            timeout = getattr(self.nvml, "NVMLError_Timeout", None)
            if timeout is not None and isinstance(exc, timeout):
                return None
            raise

    async def watch(self, notify: Callable[[], None], *, timeout_ms: int = 1000) -> None:
        events = self._event_set()
        try:
            while True:
                try:
                    event = await asyncio.to_thread(self._wait, events, timeout_ms)
                except self.nvml.NVMLError as exc:
                    log.warning("Waiting for GPU events failed", error=str(exc))
                    event = None
                    await asyncio.sleep(timeout_ms / 1000)
                changed = self.handle_event(event) if event is not None else False
                changed |= self.check_lost()
                if changed:
                    notify()
        finally:
            self.nvml.nvmlEventSetFree(events)

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as exc:
            log.warning("NVML shutdown failed", error=str(exc))
