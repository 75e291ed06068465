"""NVIDIA GPUs from NVML (the `draco[nvidia]` extra, module `pynvml` from nvidia-ml-py).

What is published is what can be prepared:

- a GPU in MIG mode off (or not MIG-capable) is one device, `gpu-<index>`, with its
  product name, UUID, memory, architecture, compute capability, driver and CUDA versions,
  PCI bus id and, where sysfs shows them, the standard `resource.kubernetes.io/pcieRoot`
  and `resource.kubernetes.io/numaNode` (`/sys/bus/pci/devices/<bdf>/numa_node`; a GPU
  whose node is -1, no NUMA, has none);
  its MIG partitions are not published: creating them when a claim is prepared (dynamic
  partitioning) is not implemented;
- a GPU in MIG mode on is the MIG devices that exist on it (`nvidia-smi mig -cgi ... -C`),
  one device each, named after profile and placement (`drivers.mig`), consuming the memory
  and compute slices of their placement from the GPU's counter set; the whole GPU is not
  published (CUDA cannot use it in MIG mode).

With `--nvidia-shares` a GPU (or MIG device) is published as a shared device, its memory
consumable capacity (`nvidia_shares`): claims that ask `capacity.requests.memory: 40Gi`
share it.

Preparing gives `NVIDIA_VISIBLE_DEVICES=<uuid>` (the MIG device's own UUID for a MIG
device) and the device nodes: `/dev/nvidia<minor>`, the control nodes and, for a MIG
device, its GPU- and compute-instance capability nodes (`/dev/nvidia-caps/nvidia-cap<n>`,
numbers from `/proc/driver/nvidia-caps/mig-minors`). NVIDIA's opaque configs are read by
`nvidia_config` (every refused config of a claim named at once) and applied by
`nvidia_sharing` (time-slice intervals, MPS daemons). A share's memory is not enforced
by anything (NVML cannot limit one container's memory on a GPU): the claim's status says
so.

With `name="gpu.nvidia.com"` (`--nvidia-compat`) the devices are published under NVIDIA's
driver name; the attribute names are NVIDIA's in either case, so selectors and
constraints written for NVIDIA's DRA driver (`device.attributes["gpu.nvidia.com"].type`,
`matchAttribute: gpu.nvidia.com/parentUUID`) work unchanged.

Health: the driver registers for critical-XID events; a fatal XID, or a GPU NVML reports
as lost, becomes a `draco.dev/unhealthy` taint on the GPU's devices (value `xid-<n>` or
`gpu-lost`; effect `NoSchedule` as with NVIDIA's driver, `--nvidia-taint-effect NoExecute`
to have the pods evicted), published like any inventory change; the agent tells the
claims and pods on the devices (`draco.agent.health`). A GPU stays unhealthy until the
agent restarts (after the GPU was reset), as with NVIDIA's device plugin. With
`--nvidia-health-events FILE` the driver also reads events appended to FILE, one a line:
`<gpu index or UUID> xid <n>`, `<gpu> lost`, `<gpu> recovered` (the last clears the GPU's
problem): to check the path from an XID to the pods on a machine whose GPUs are fine
(`hack/gpu-check.sh`), or to take a GPU out of service by hand.

The NVML module is injected (`nvml=`): tests and `--nvml-replay` run the whole driver on
`nvml_replay.ReplayNvml`, a recording of a real GPU, and no code here needs a GPU to be
imported. Host files (`/proc`, `/sys`) are read below `host_root`; the device nodes a
container gets are taken from `dev_root` (`/dev`; `--nvidia-dev-root` for an agent that
sees the host's devices elsewhere, or stand-ins in tests).
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from draco.agent.drivers import mig
from draco.agent.drivers.base import (
    BINDING_CONDITION,
    BINDING_FAILURE_CONDITION,
    Allocation,
    ContainerEdits,
    Device,
    DeviceDriver,
    DeviceNode,
    Inventory,
    OpaqueConfig,
    PrepareRequest,
)
from draco.agent.drivers.nvidia_config import Sharing, config_problems
from draco.agent.drivers.nvidia_shares import SharePolicy
from draco.agent.drivers.nvidia_sharing import MpsDaemons, MpsGpu, Tools, set_time_slice
from draco.agent.health import HEALTH_TAINT_EFFECTS, is_fatal_xid, unhealthy_taint
from draco.api.constants import TAINT_EFFECT_NO_SCHEDULE
from draco.errors import AgentError, DeviceConfigError
from draco.logs import get_logger

__all__ = [
    "NVIDIA_COMPAT_DRIVER_NAME",
    "NVIDIA_DRIVER_NAME",
    "NvidiaDriver",
    "NvidiaOptions",
    "pci_bus_id",
    "read_profiles",
    "semver",
]

log = get_logger(__name__)

NVIDIA_DRIVER_NAME: Final = "gpu.nvidia.draco.dev"
#: NVIDIA's DRA driver name, published under `--nvidia-compat`.
NVIDIA_COMPAT_DRIVER_NAME: Final = "gpu.nvidia.com"
PCIE_ROOT_ATTRIBUTE: Final = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID_ATTRIBUTE: Final = "resource.kubernetes.io/pciBusID"
NUMA_NODE_ATTRIBUTE: Final = "resource.kubernetes.io/numaNode"
MIG_MINORS: Final = "proc/driver/nvidia-caps/mig-minors"
_CONTROL_NODES: Final = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_MIB: Final = 1024 * 1024
#: `nvmlDeviceArchitecture_t` and `nvmlBrandType_t` as NVIDIA's tools spell them.
_ARCHITECTURES: Final = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}
_BRANDS: Final = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}
_BDF: Final = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def semver(raw: str) -> str:
    """NVML versions (`535.104.05`, `8.0`) as semver: three parts, no leading zeros."""
    parts = [int(p) for p in raw.split(".") if p.isdigit()][:3]
    while len(parts) < 3:
        parts.append(0)
    return ".".join(str(p) for p in parts)


def pci_bus_id(raw: str) -> str | None:
    """NVML's bus id (`00000000:00:06.0`) in the standard form `0000:00:06.0`; None when
    it is not one (or its domain does not fit four digits)."""
    match = _BDF.match(raw.strip())
    if match is None or int(match[1], 16) > 0xFFFF:
        return None
    return f"{int(match[1], 16):04x}:{match[2].lower()}:{match[3].lower()}.{match[4]}"


def pcie_root(host_root: Path, bdf: str) -> str | None:
    """The PCIe root complex (`pci0000:00`) of device `bdf`, from the sysfs link
    `/sys/bus/pci/devices/<bdf>` -> `/sys/devices/pci0000:00/.../<bdf>`; None when sysfs
    does not show it."""
    link = host_root / "sys" / "bus" / "pci" / "devices" / bdf
    try:
        target = os.readlink(link)
    except OSError:
        return None
    resolved = Path(os.path.normpath(link.parent / target))
    try:
        parts = resolved.relative_to(host_root / "sys" / "devices").parts
    except ValueError:
        return None
    if len(parts) < 2 or not parts[0].startswith("pci") or parts[-1] != bdf:
        return None
    return parts[0]


def numa_node(host_root: Path, bdf: str, *, recorded: dict[str, str] | None = None) -> int | None:
    """The NUMA node of PCI device `bdf` (`/sys/bus/pci/devices/<bdf>/numa_node`); None
    when sysfs does not say or says -1 (a machine without NUMA). `recorded` host files
    (a replay's) are read first."""
    path = f"/sys/bus/pci/devices/{bdf}/numa_node"
    text = (recorded or {}).get(path)
    if text is None:
        try:
            text = (host_root / path.lstrip("/")).read_text()
        except OSError:
            return None
    try:
        node = int(text.strip())
    except ValueError:
        return None
    return node if node >= 0 else None


def _possible_placements(nvml: Any, handle: Any, profile_id: int) -> tuple[mig.Placement, ...]:
    """pynvml's C-shaped placements call: ask for the count, then for the placements."""
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (nvml.c_nvmlGpuInstancePlacement_t * max(1, count.value))()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return tuple((int(p.start), int(p.size)) for p in array[: count.value])


def read_profiles(nvml: Any, handle: Any) -> list[mig.Profile]:
    """The GPU-instance profiles NVML reports for a GPU, with their possible placements."""
    profiles: list[mig.Profile] = []
    for index in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except nvml.NVMLError:
            continue  # NotSupported on this GPU, InvalidArgument past the driver's last
        count, slices, memory = int(info.instanceCount), int(info.sliceCount), int(info.memorySizeMB)
        if count <= 0 or slices <= 0:
            continue
        try:
            placements = _possible_placements(nvml, handle, int(info.id))
        except nvml.NVMLError as exc:
            log.warning("MIG placements unavailable", profile=int(info.id), error=str(exc))
            placements = ()
        profiles.append(
            mig.Profile(
                index=index,
                id=int(info.id),
                name=mig.profile_name(_text(getattr(info, "name", "")), slices=slices, memory_mib=memory),
                slices=slices,
                instances=count,
                memory_mib=memory,
                placements=placements,
                engines=(
                    ("multiprocessors", int(info.multiprocessorCount)),
                    ("copyEngines", int(info.copyEngineCount)),
                    ("decoders", int(info.decoderCount)),
                    ("encoders", int(info.encoderCount)),
                    ("jpegEngines", int(info.jpegCount)),
                    ("ofaEngines", int(info.ofaCount)),
                ),
            )
        )
    return profiles


@dataclass
class Target:
    """One published device and what preparing it takes."""

    device: Device
    #: `gpu` or `mig`.
    type: str
    #: What `NVIDIA_VISIBLE_DEVICES` names: the GPU's or the MIG device's UUID.
    uuid: str
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass
class Gpu:
    index: int
    uuid: str
    minor: int
    targets: list[Target] = field(default_factory=list)
    profiles: list[mig.Profile] = field(default_factory=list)
    mig_enabled: bool = False
    counters: dict[str, Any] | None = None
    problem: str | None = None


@dataclass(frozen=True)
class NvidiaOptions:
    """The driver's choices beyond discovery (the agent's `--nvidia-*` options)."""

    #: GPUs published as shared devices (`--nvidia-shares`); None: none.
    shares: SharePolicy | None = None
    #: The effect of the health taint (`--nvidia-taint-effect`).
    taint_effect: str = TAINT_EFFECT_NO_SCHEDULE
    #: The host programs run for time-slicing and MPS.
    tools: Tools = field(default_factory=Tools)
    #: Where MPS daemons keep their pipe and log folders (a host path); None: MPS refused.
    mps_dir: Path | None = None
    #: The host folder that is the agent's /dev/shm (`--nvidia-mps-shm-dir`); None: MPS refused.
    mps_shm_dir: Path | None = None
    #: Health events appended by hand (`--nvidia-health-events`).
    health_events: Path | None = None


class NvidiaDriver(DeviceDriver):
    cdi_class = "gpu"

    def __init__(
        self,
        nvml: Any,
        *,
        binding_conditions: bool = False,
        name: str = NVIDIA_DRIVER_NAME,
        host_root: Path = Path("/"),
        dev_root: Path = Path("/dev"),
        options: NvidiaOptions | None = None,
    ) -> None:
        self.name = name
        self.nvml = nvml
        self.binding_conditions = binding_conditions
        self.host_root = host_root
        self.dev_root = dev_root
        self.options = options or NvidiaOptions()
        if self.options.taint_effect not in HEALTH_TAINT_EFFECTS:
            raise AgentError(
                f"--nvidia-taint-effect {self.options.taint_effect!r}: one of {', '.join(HEALTH_TAINT_EFFECTS)}"
            )
        self.mps = MpsDaemons(
            nvml=nvml, tools=self.options.tools, root=self.options.mps_dir, shm_dir=self.options.mps_shm_dir
        )
        self._events_read = 0
        nvml.nvmlInit()
        self.driver_version = semver(_text(nvml.nvmlSystemGetDriverVersion()))
        self.cuda_version = self._cuda_version()
        self.gpus: list[Gpu] = [self._discover(i) for i in range(nvml.nvmlDeviceGetCount())]
        shares = self.options.shares
        unknown = shares.unknown({g.index: g.uuid for g in self.gpus}) if shares else []
        if unknown:
            raise AgentError(f"--nvidia-shares names GPUs this node does not have: {', '.join(unknown)}")

    @classmethod
    def from_nvml(
        cls,
        *,
        binding_conditions: bool = False,
        name: str = NVIDIA_DRIVER_NAME,
        replay: Sequence[Path] = (),
        dev_root: Path = Path("/dev"),
        options: NvidiaOptions | None = None,
    ) -> NvidiaDriver:
        """The driver on the real NVML, or on a recording (`replay`: JSON files)."""
        settings: dict[str, Any] = {
            "binding_conditions": binding_conditions,
            "name": name,
            "dev_root": dev_root,
            "options": options,
        }
        if replay:
            from draco.agent.drivers.nvml_replay import ReplayNvml

            return cls(ReplayNvml.from_files(replay), **settings)
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError as exc:
            raise AgentError("the nvidia driver needs NVML bindings: pip install 'draco[nvidia]'") from exc
        try:
            return cls(nvml, **settings)
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

    def _cuda_version(self) -> str | None:
        try:
            raw = int(self.nvml.nvmlSystemGetCudaDriverVersion())
        except self.nvml.NVMLError:
            return None
        return f"{raw // 1000}.{raw % 1000 // 10}.0"

    def _optional(self, call: str, handle: Any) -> Any | None:
        try:
            return getattr(self.nvml, call)(handle)
        except self.nvml.NVMLError:
            return None

    def _mig_mode(self, handle: Any) -> tuple[bool, bool]:
        """(MIG-capable, MIG mode on now)."""
        mode = self._optional("nvmlDeviceGetMigMode", handle)
        if mode is None:
            return False, False
        return True, int(mode[0]) == 1

    def _common_attributes(self, handle: Any) -> dict[str, dict[str, Any]]:
        """What a GPU and each of its MIG devices say about the hardware."""
        nvml = self.nvml
        major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        attributes: dict[str, dict[str, Any]] = {
            "productName": {"string": _text(nvml.nvmlDeviceGetName(handle))[:64]},
            "driverVersion": {"version": self.driver_version},
            "cudaComputeCapability": {"version": semver(f"{major}.{minor_cc}")},
        }
        if self.cuda_version:
            attributes["cudaDriverVersion"] = {"version": self.cuda_version}
        arch = self._optional("nvmlDeviceGetArchitecture", handle)
        if arch is not None and int(arch) in _ARCHITECTURES:
            attributes["architecture"] = {"string": _ARCHITECTURES[int(arch)]}
        brand = self._optional("nvmlDeviceGetBrand", handle)
        if brand is not None and int(brand) in _BRANDS:
            attributes["brand"] = {"string": _BRANDS[int(brand)]}
        pci = self._optional("nvmlDeviceGetPciInfo", handle)
        bdf = pci_bus_id(_text(pci.busId)) if pci is not None else None
        if bdf:
            attributes["pcieBusID"] = {"string": bdf}
            attributes[PCI_BUS_ID_ATTRIBUTE] = {"string": bdf}
            root = pcie_root(self.host_root, bdf)
            if root:
                attributes[PCIE_ROOT_ATTRIBUTE] = {"string": root}
            node = numa_node(self.host_root, bdf, recorded=getattr(self.nvml, "host_files", None))
            if node is not None:
                attributes[NUMA_NODE_ATTRIBUTE] = {"int": node}
        return attributes

    def _discover(self, index: int) -> Gpu:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        capable, enabled = self._mig_mode(handle)
        gpu = Gpu(index=index, uuid=uuid, minor=minor, mig_enabled=enabled)
        common = self._common_attributes(handle)
        if capable:
            gpu.profiles = read_profiles(nvml, handle)
        if enabled:
            gpu.counters = mig.counter_set(f"gpu-{index}-counters", gpu.profiles)
            gpu.targets = self._mig_devices(handle, gpu, common)
            log.info("GPU in MIG mode: publishing its MIG devices", gpu=index, devices=len(gpu.targets))
            return gpu
        if gpu.profiles:
            log.info(
                "GPU in MIG mode off: publishing the whole GPU, not its MIG partitions",
                gpu=index,
                partitions=len(mig.partitions(index, gpu.profiles)),
            )
        memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        attributes: dict[str, dict[str, Any]] = {
            "type": {"string": "gpu"},
            "index": {"int": index},
            "minor": {"int": minor},
            "uuid": {"string": uuid},
            **common,
            "migCapable": {"bool": capable},
        }
        device = Device(
            name=f"gpu-{index}",
            attributes=attributes,
            capacity={"memory": {"value": str(memory)}},
            **self._conditions(),
        )
        gpu.targets = [Target(device=self._shared(device, gpu), type="gpu", uuid=uuid)]
        return gpu

    def _shared(self, device: Device, gpu: Gpu) -> Device:
        """`device` as published: shared when `--nvidia-shares` picks its GPU."""
        shares = self.options.shares
        if shares is None or not shares.applies(index=gpu.index, uuid=gpu.uuid):
            return device
        return shares.share(device)

    def _mig_devices(self, handle: Any, gpu: Gpu, common: dict[str, dict[str, Any]]) -> list[Target]:
        nvml = self.nvml
        by_id = {p.id: p for p in gpu.profiles}
        targets: list[Target] = []
        for n in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig_handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, n)
            except nvml.NVMLError:
                continue  # NotFound: no MIG device in this slot
            try:
                targets.append(self._mig_device(handle, mig_handle, gpu, common, by_id))
            except nvml.NVMLError as exc:
                # Not published: what cannot be described cannot be prepared either.
                log.warning("MIG device unreadable, not published", gpu=gpu.index, slot=n, error=str(exc))
        if not any(t.device.consumes_counters for t in targets):
            gpu.counters = None
        return sorted(targets, key=lambda t: t.device.name)

    def _mig_device(
        self,
        handle: Any,
        mig_handle: Any,
        gpu: Gpu,
        common: dict[str, dict[str, Any]],
        by_id: dict[int, mig.Profile],
    ) -> Target:
        nvml = self.nvml
        gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig_handle))
        ci = int(nvml.nvmlDeviceGetComputeInstanceId(mig_handle))
        attrs = nvml.nvmlDeviceGetAttributes(mig_handle)
        info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi))
        start, size = int(info.placement.start), int(info.placement.size)
        gi_slices, ci_slices = int(attrs.gpuInstanceSliceCount), int(attrs.computeInstanceSliceCount)
        memory_mib = int(attrs.memorySizeMB)
        profile = by_id.get(int(info.profileId)) or mig.Profile(
            index=-1,
            id=int(info.profileId),
            name=mig.profile_name("", slices=gi_slices, memory_mib=memory_mib),
            slices=gi_slices,
            instances=1,
            memory_mib=memory_mib,
            placements=((start, size),),
        )
        whole_instance = ci_slices >= gi_slices
        name = mig.partition_name(gpu.index, profile, start) + ("" if whole_instance else f"-ci{ci}")
        consumes: list[dict[str, Any]] = []
        if whole_instance and gpu.counters and (start, size) in profile.placements:
            consumes = [mig.consumption(gpu.counters["name"], gpu.profiles, profile, start)]
        mig_uuid = _text(nvml.nvmlDeviceGetUUID(mig_handle))
        device = Device(
            name=name,
            attributes={
                "type": {"string": "mig"},
                "uuid": {"string": mig_uuid},
                "parentIndex": {"int": gpu.index},
                "parentUUID": {"string": gpu.uuid},
                "profile": {"string": profile.name if whole_instance else f"{ci_slices}c.{profile.name}"},
                **common,
            },
            capacity={
                "memory": {"value": str(memory_mib * _MIB)},
                "multiprocessors": {"value": str(int(attrs.multiprocessorCount))},
                "copyEngines": {"value": str(int(attrs.sharedCopyEngineCount))},
                "decoders": {"value": str(int(attrs.sharedDecoderCount))},
                "encoders": {"value": str(int(attrs.sharedEncoderCount))},
                "jpegEngines": {"value": str(int(attrs.sharedJpegCount))},
                "ofaEngines": {"value": str(int(attrs.sharedOfaCount))},
            },
            consumes_counters=consumes,
            **self._conditions(),
        )
        return Target(self._shared(device, gpu), "mig", mig_uuid, gpu_instance=gi, compute_instance=ci)

    # ---- DeviceDriver

    def inventory(self, node: str) -> Inventory:
        devices: list[Device] = []
        counters: list[dict[str, Any]] = []
        for gpu in self.gpus:
            extra = [unhealthy_taint(gpu.problem, effect=self.options.taint_effect)] if gpu.problem else []
            for target in gpu.targets:
                device = target.device
                devices.append(replace(device, taints=[*device.taints, *extra]) if extra else device)
            if gpu.counters:
                counters.append(gpu.counters)
        # MIG partitions are told apart by their profile (the pool status's partition types).
        profile = f"{self.name}/profile" if counters else None
        return Inventory(devices=devices, shared_counters=counters, partition_type_attribute=profile)

    def device_plugin_id(self, device: Device) -> tuple[str, str] | None:
        """NVIDIA's device plugin's names: ``nvidia.com/gpu`` and the GPU's UUID, or
        ``nvidia.com/mig-<profile>`` and the MIG device's UUID (what dcgm-exporter maps)."""
        attributes = device.attributes
        uuid = (attributes.get("uuid") or {}).get("string")
        if not uuid:
            return None
        if (attributes.get("type") or {}).get("string") == "mig":
            return f"nvidia.com/mig-{(attributes.get('profile') or {}).get('string')}", str(uuid)
        return "nvidia.com/gpu", str(uuid)

    def _target(self, name: str) -> tuple[Gpu, Target]:
        for gpu in self.gpus:
            for target in gpu.targets:
                if target.device.name == name:
                    return gpu, target
        raise AgentError(f"device {name} is not a device of this node's GPUs (was the GPU repartitioned?)")

    def _mig_minor(self, path: str) -> int:
        """The minor number of capability `path` (`gpu0/gi3/access`) in the driver's table."""
        recorded = getattr(self.nvml, "host_files", {})  # a replay carries its machine's files
        try:
            text = recorded.get(f"/{MIG_MINORS}") or (self.host_root / MIG_MINORS).read_text()
        except OSError as exc:
            raise AgentError(f"cannot read the MIG capability table /{MIG_MINORS}: {exc.strerror}") from exc
        lines = text.splitlines()
        for line in lines:
            key, _, value = line.strip().partition(" ")
            if key == path and value.strip().isdigit():
                return int(value)
        raise AgentError(f"/{MIG_MINORS} has no entry {path}")

    def prepare_device(
        self,
        node: str,
        device: Device,
        *,
        configs: Sequence[OpaqueConfig] = (),
        allocation: Allocation | None = None,
    ) -> ContainerEdits:
        request = PrepareRequest(device=device, configs=configs, allocation=allocation or Allocation())
        return self.prepare_devices(node, [request])[0]

    def prepare_devices(self, node: str, requests: Sequence[PrepareRequest]) -> list[ContainerEdits]:
        """One claim's devices: every config problem first (all named at once), then the
        time-slices, then the claim's MPS daemon, then each device's edits."""
        planned: list[tuple[PrepareRequest, Gpu, Target, Sharing]] = []
        refused: list[str] = []
        for request in requests:
            gpu, target = self._target(request.device.name)
            problems, sharing = config_problems(self.name, target.type, request.configs)
            refused.extend(p for p in problems if p not in refused)
            planned.append((request, gpu, target, sharing))
        if refused:
            raise DeviceConfigError("; ".join(refused))
        for request, gpu, _target, _sharing in planned:
            if gpu.problem:
                raise AgentError(f"device {request.device.name} is unhealthy ({gpu.problem})")
        mps = self._mps_edits(planned)
        for _request, _gpu, target, sharing in planned:
            if sharing.strategy == "TimeSlicing" and sharing.interval != "Default":
                if target.type != "gpu":
                    raise DeviceConfigError(f"{sharing.source}: a MIG device takes no time-slice interval")
                set_time_slice(
                    self.options.tools, uuid=target.uuid, interval=sharing.interval, where=sharing.source
                )
        out = []
        for request, gpu, target, sharing in planned:
            edits = self._edits(gpu, target, request.allocation)
            if sharing.strategy == "MPS" and mps is not None:
                edits = ContainerEdits(
                    env=edits.env + mps.env,
                    device_nodes=edits.device_nodes,
                    mounts=edits.mounts + mps.mounts,
                    notes=edits.notes,
                )
            out.append(edits)
        return out

    def _mps_edits(
        self, planned: Sequence[tuple[PrepareRequest, Gpu, Target, Sharing]]
    ) -> ContainerEdits | None:
        """The MPS daemon of the claim's MPS devices (one daemon, one `mpsConfig`)."""
        wanted = [(r, g, t, s) for r, g, t, s in planned if s.strategy == "MPS"]
        if not wanted:
            return None
        where = wanted[0][3].source
        shared = sorted({r.device.name for r, _g, _t, _s in wanted if r.device.allow_multiple_allocations})
        if shared:
            raise DeviceConfigError(
                f"{where}: sharing strategy MPS cannot be used on {', '.join(shared)}: the GPU is published shared "
                "(--nvidia-shares), and MPS's EXCLUSIVE_PROCESS compute mode would lock its other claims out"
            )
        if any(s.mps != wanted[0][3].mps for _r, _g, _t, s in wanted):
            raise DeviceConfigError(
                f"{where}: the MPS devices of one claim need one mpsConfig (one daemon serves them)"
            )
        gpus = [
            MpsGpu(uuid=t.uuid, handle=self.nvml.nvmlDeviceGetHandleByIndex(g.index), index=g.index)
            if t.type == "gpu"
            else MpsGpu(uuid=t.uuid)
            for _r, g, t, _s in wanted
        ]
        settings = wanted[0][3].mps
        assert settings is not None
        return self.mps.start(wanted[0][0].allocation.claim_uid, gpus, settings, where=where)

    def _edits(self, gpu: Gpu, target: Target, allocation: Allocation) -> ContainerEdits:
        paths = [f"/dev/nvidia{gpu.minor}", *_CONTROL_NODES]
        if target.type == "mig":
            gi = f"gpu{gpu.minor}/gi{target.gpu_instance}"
            for cap in (f"{gi}/access", f"{gi}/ci{target.compute_instance}/access"):
                paths.append(f"/dev/nvidia-caps/nvidia-cap{self._mig_minor(cap)}")
        nodes = tuple(DeviceNode(path=p, host_path=self._host_node(p)) for p in paths)
        notes: tuple[str, ...] = ()
        if allocation.share_id and target.device.allow_multiple_allocations:
            consumed = (
                ", ".join(f"{k} {v}" for k, v in sorted(allocation.consumed_capacity.items())) or "nothing"
            )
            notes = (
                f"a share of {target.device.name} ({consumed}): not enforced, NVML cannot limit one container's "
                "memory or compute on a GPU; the container sees the whole GPU, the share is what the allocator counts",
            )
        return ContainerEdits(env=(f"NVIDIA_VISIBLE_DEVICES={target.uuid}",), device_nodes=nodes, notes=notes)

    def unprepare_claim(self, node: str, claim_uid: str) -> None:
        self.mps.stop(claim_uid)

    def _host_node(self, path: str) -> str | None:
        """Where device node `path` (`/dev/...`) is on the host: the same path unless the
        device folder is elsewhere (`--nvidia-dev-root`)."""
        if self.dev_root == Path("/dev"):
            return None
        return str(self.dev_root / Path(path).relative_to("/dev"))

    # ---- health

    def mark_unhealthy(self, uuid: str, reason: str) -> bool:
        """Record a problem on the GPU with `uuid`; True when that is news."""
        for gpu in self.gpus:
            if gpu.uuid == uuid and gpu.problem is None:
                gpu.problem = reason
                log.warning("GPU unhealthy", gpu=gpu.index, uuid=uuid, reason=reason)
                return True
        return False

    def mark_healthy(self, uuid: str) -> bool:
        """Clear the problem of the GPU with `uuid` (`recovered`); True when it had one."""
        for gpu in self.gpus:
            if gpu.uuid == uuid and gpu.problem is not None:
                log.info("GPU healthy again", gpu=gpu.index, uuid=uuid, was=gpu.problem)
                gpu.problem = None
                return True
        return False

    def _gpu_named(self, name: str) -> Gpu | None:
        return next((g for g in self.gpus if name in (str(g.index), g.uuid)), None)

    def read_health_events(self) -> bool:
        """Apply the lines appended to `--nvidia-health-events` since the last read; True
        when a GPU's health changed. A file that shrank is read from its start again."""
        path = self.options.health_events
        if path is None:
            return False
        try:
            data = path.read_bytes()
        except OSError:
            return False
        if len(data) < self._events_read:
            self._events_read = 0
        end = data.rfind(b"\n") + 1  # whole lines only: a writer may be half way
        lines, self._events_read = (
            data[self._events_read : end].decode(errors="replace"),
            max(end, self._events_read),
        )
        changed = False
        for line in lines.splitlines():
            words = line.split()
            gpu = self._gpu_named(words[0]) if words else None
            if gpu is None or len(words) < 2:
                if words:
                    log.warning(
                        "Ignoring a health event", line=line, why="expected <gpu> xid <n> | lost | recovered"
                    )
                continue
            if words[1] == "xid" and len(words) == 3 and words[2].isdigit():
                xid = int(words[2])
                if is_fatal_xid(xid):
                    changed |= self.mark_unhealthy(gpu.uuid, f"xid-{xid}")
                else:
                    log.info("GPU reported a non-fatal XID", xid=xid, source="health events")
            elif words[1] == "lost":
                changed |= self.mark_unhealthy(gpu.uuid, "gpu-lost")
            elif words[1] == "recovered":
                changed |= self.mark_healthy(gpu.uuid)
            else:
                log.warning(
                    "Ignoring a health event", line=line, why="expected <gpu> xid <n> | lost | recovered"
                )
        return changed

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
                log.warning("GPU health events unavailable", gpu=gpu.index, error=str(exc))
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
                changed |= self.read_health_events()
                if changed:
                    notify()
        finally:
            self.nvml.nvmlEventSetFree(events)

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as exc:
            log.warning("NVML shutdown failed", error=str(exc))
