"""The NVIDIA driver on a fake NVML module: discovery, MIG counters, health, CDI edits."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from draco.agent.drivers.base import BINDING_CONDITION
from draco.agent.drivers.nvidia import NvidiaDriver, semver
from draco.agent.health import UNHEALTHY_TAINT_KEY
from draco.errors import AgentError


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_Timeout(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


@dataclass
class FakeGpu:
    name: str
    uuid: str
    memory: int
    cc: tuple[int, int]
    minor: int
    mig_profiles: dict[int, SimpleNamespace] = field(default_factory=dict)
    lost: bool = False


class FakeNvml:
    """The slice of pynvml the driver calls, over a list of fake GPUs."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_GPU_INSTANCE_PROFILE_COUNT = 4
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[FakeGpu], *, driver_version: str = "535.104.05") -> None:
        self.gpus = gpus
        self.driver_version = driver_version
        self.events: list[SimpleNamespace] = []
        self.registered: list[int] = []
        self.initialised = False

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def _alive(self, gpu: FakeGpu) -> FakeGpu:
        if gpu.lost:
            raise NVMLError_GpuIsLost()
        return gpu

    def nvmlDeviceGetName(self, h: FakeGpu) -> bytes:
        return self._alive(h).name.encode()

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return h.uuid

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(total=self._alive(h).memory)

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        return h.cc

    def nvmlDeviceGetMinorNumber(self, h: FakeGpu) -> int:
        return h.minor

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        if not h.mig_profiles:
            raise NVMLError_NotSupported()
        return [0, 0]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: FakeGpu, profile: int) -> SimpleNamespace:
        if profile not in h.mig_profiles:
            raise NVMLError_NotSupported()
        return h.mig_profiles[profile]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, types: int, events: Any) -> None:
        self.registered.append(h.minor)

    def nvmlEventSetWait_v2(self, events: Any, timeout_ms: int) -> SimpleNamespace:
        if self.events:
            return self.events.pop(0)
        raise NVMLError_Timeout()

    def nvmlEventSetFree(self, events: Any) -> None:
        pass


def a100_mig() -> dict[int, SimpleNamespace]:
    return {
        0: SimpleNamespace(instanceCount=7, sliceCount=1, memorySizeMB=9856),
        2: SimpleNamespace(instanceCount=2, sliceCount=3, memorySizeMB=39424),
    }


def fake_nvml() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu("NVIDIA A100-SXM4-80GB", "GPU-aaaa", 80 * 2**30, (8, 0), 0, mig_profiles=a100_mig()),
            FakeGpu("Tesla T4", "GPU-bbbb", 16 * 2**30, (7, 5), 1),
        ]
    )


def test_gpus_are_described_from_nvml() -> None:
    nvml = fake_nvml()
    driver = NvidiaDriver(nvml, binding_conditions=True)
    assert nvml.initialised
    inventory = driver.inventory("node")
    t4 = inventory.device("gpu-1")
    assert t4 is not None
    assert t4.attributes == {
        "type": {"string": "gpu"},
        "index": {"int": 1},
        "minor": {"int": 1},
        "uuid": {"string": "GPU-bbbb"},
        "productName": {"string": "Tesla T4"},
        "driverVersion": {"version": "535.104.5"},
        "cudaComputeCapability": {"version": "7.5.0"},
        "migCapable": {"bool": False},
    }
    assert t4.capacity == {"memory": {"value": str(16 * 2**30)}}
    assert not t4.consumes_counters
    assert list(t4.binding_conditions) == [BINDING_CONDITION]


def test_mig_capable_gpus_publish_partitions_sharing_counters_with_the_whole_gpu() -> None:
    inventory = NvidiaDriver(fake_nvml()).inventory("node")
    assert inventory.shared_counters == [
        {
            "name": "gpu-0-counters",
            "counters": {"memory": {"value": str(80 * 2**30)}, "compute-slices": {"value": "7"}},
        }
    ]
    names = [d.name for d in inventory.devices]
    assert names[:1] == ["gpu-0"]
    assert [n for n in names if n.startswith("gpu-0-mig-1g")] == [f"gpu-0-mig-1g10gb-{i}" for i in range(7)]
    assert [n for n in names if n.startswith("gpu-0-mig-3g")] == ["gpu-0-mig-3g38gb-0", "gpu-0-mig-3g38gb-1"]
    whole = inventory.device("gpu-0")
    part = inventory.device("gpu-0-mig-3g38gb-1")
    assert whole is not None and part is not None
    assert whole.consumes_counters[0]["counters"]["compute-slices"] == {"value": "7"}
    assert part.consumes_counters == [
        {
            "counterSet": "gpu-0-counters",
            "counters": {"memory": {"value": str(39424 * 2**20)}, "compute-slices": {"value": "3"}},
        }
    ]
    assert part.attributes["parentUUID"] == {"string": "GPU-aaaa"}


def test_prepare_gives_the_device_nodes_and_visible_devices() -> None:
    driver = NvidiaDriver(fake_nvml())
    device = driver.inventory("node").device("gpu-1")
    assert device is not None
    edits = driver.prepare_device("node", device)
    assert edits.env == ("NVIDIA_VISIBLE_DEVICES=GPU-bbbb",)
    assert [n.path for n in edits.device_nodes] == [
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    partition = driver.inventory("node").device("gpu-0-mig-1g10gb-0")
    assert partition is not None
    with pytest.raises(AgentError, match="MIG instances"):
        driver.prepare_device("node", partition)


def test_fatal_xid_taints_the_gpu_and_its_partitions_but_an_application_xid_does_not() -> None:
    nvml = fake_nvml()
    driver = NvidiaDriver(nvml)
    benign = SimpleNamespace(eventType=8, eventData=13, device=nvml.gpus[0])
    assert not driver.handle_event(benign)
    fatal = SimpleNamespace(eventType=8, eventData=79, device=nvml.gpus[0])
    assert driver.handle_event(fatal)
    assert not driver.handle_event(fatal)  # not news the second time
    inventory = driver.inventory("node")
    for name in ("gpu-0", "gpu-0-mig-1g10gb-3"):
        device = inventory.device(name)
        assert device is not None
        assert [(t["key"], t["value"], t["effect"]) for t in device.taints] == [
            (UNHEALTHY_TAINT_KEY, "xid-79", "NoExecute")
        ]
    healthy = inventory.device("gpu-1")
    assert healthy is not None and not healthy.taints
    device = inventory.device("gpu-0")
    assert device is not None
    with pytest.raises(AgentError, match="unhealthy"):
        driver.prepare_device("node", device)


async def test_the_event_loop_notices_a_lost_gpu_and_an_xid() -> None:
    nvml = fake_nvml()
    driver = NvidiaDriver(nvml)
    notified = asyncio.Event()
    task = asyncio.create_task(driver.watch(notified.set, timeout_ms=10))
    try:
        nvml.gpus[1].lost = True
        await asyncio.wait_for(notified.wait(), 5)
        assert nvml.registered == [0, 1]
        lost = driver.inventory("node").device("gpu-1")
        assert lost is not None and lost.taints[0]["value"] == "gpu-lost"
        notified.clear()
        nvml.events.append(SimpleNamespace(eventType=8, eventData=48, device=nvml.gpus[0]))
        await asyncio.wait_for(notified.wait(), 5)
        first = driver.inventory("node").device("gpu-0")
        assert first is not None and first.taints[0]["value"] == "xid-48"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    driver.close()
    assert not nvml.initialised


@pytest.mark.parametrize(("raw", "want"), [("535.104.05", "535.104.5"), ("8.0", "8.0.0"), ("550", "550.0.0")])
def test_nvml_versions_become_semver(raw: str, want: str) -> None:
    assert semver(raw) == want
