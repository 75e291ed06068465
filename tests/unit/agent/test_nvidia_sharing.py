"""GPU shares, time-slice intervals and MPS daemons of the NVIDIA driver, on replayed NVML.

Shares are checked the whole way a user meets them: the slice the agent publishes for the
recorded H100 with `--nvidia-shares`, draco's allocator placing claims that ask for part of
its memory, and prepare. The host programs (`nvidia-smi`, `nvidia-cuda-mps-control`) are
`HostTools`: which ones the machine has, and the commands the driver ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from draco.agent.drivers.base import Allocation, OpaqueConfig, PrepareRequest
from draco.agent.drivers.nvidia import NvidiaDriver, NvidiaOptions
from draco.agent.drivers.nvidia_shares import SharePolicy
from draco.agent.prepare import INVALID_CONFIG_REASON, NodePreparer
from draco.allocator import Allocated, Inventory, Node, Unfit, allocate
from draco.errors import AgentError, DeviceConfigError
from draco.validation import render_all, validate_object
from tests.unit.agent.gpus import A100_MIG, H100, NODE, HostTools, driver, published_slices, replay

H100_UUID = "GPU-00000000-1111-2222-3333-444444444444"
H100_MEMORY = 85520809984  # 81559 MiB
GPU_CLASS = {
    "apiVersion": "resource.draco.dev/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.draco.dev'"}}]},
}


def shared(shape: Any = H100, mode: str = "memory", **options: Any) -> NvidiaDriver:
    return driver(
        shape,
        binding_conditions=True,
        options=NvidiaOptions(
            shares=SharePolicy.parse(mode), tools=options.pop("tools", HostTools()), **options
        ),
    )


def share_claim(name: str, memory: str | None, *, index: int) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": "gpu"}
    if memory is not None:
        request["capacity"] = {"requests": {"memory": memory}}
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"0b0c5d3e-1111-4222-8333-{index:012d}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def allocate_one(
    drv: NvidiaDriver, claim: dict[str, Any], allocated: list[dict[str, Any]]
) -> Allocated | Unfit:
    inventory = Inventory.build(classes=[GPU_CLASS], slices=published_slices(drv), allocated_claims=allocated)
    return allocate(inventory=inventory, node=Node(NODE), claims=[claim])


def with_allocation(claim: dict[str, Any], out: Allocated) -> dict[str, Any]:
    return {**claim, "status": {"allocation": out.results.json()[f"ns/{claim['metadata']['name']}"]}}


def test_a_shared_gpu_publishes_its_memory_as_consumable_capacity() -> None:
    (gpu,) = shared().inventory(NODE).devices
    assert gpu.allow_multiple_allocations
    whole = str(H100_MEMORY // 2**20 * 2**20)
    assert gpu.capacity == {
        "memory": {
            "value": whole,
            "requestPolicy": {"default": whole, "validRange": {"min": "1Mi", "max": whole, "step": "1Mi"}},
        }
    }
    (unlimited,) = shared(mode="unlimited").inventory(NODE).devices
    assert unlimited.capacity["memory"]["requestPolicy"]["default"] == "0"
    for mode in ("memory", "unlimited"):
        for obj in published_slices(shared(mode=mode)):
            errors = validate_object(obj)
            assert not errors, render_all(errors)


def test_shares_are_chosen_per_gpu_and_a_gpu_the_node_lacks_is_an_error() -> None:
    assert shared(mode=f"memory:{H100_UUID}").inventory(NODE).devices[0].allow_multiple_allocations
    assert shared(mode="memory:0").inventory(NODE).devices[0].allow_multiple_allocations
    assert not driver(H100).inventory(NODE).devices[0].allow_multiple_allocations
    with pytest.raises(AgentError, match="does not have: 3"):
        shared(mode="memory:0,3")
    with pytest.raises(AgentError, match="the mode is one of memory, unlimited"):
        SharePolicy.parse("compute")
    assert SharePolicy.parse("off") is None


def test_two_claims_of_half_the_memory_share_the_gpu_and_a_third_does_not_fit(tmp_path: Path) -> None:
    drv = shared()
    half = f"{H100_MEMORY // 2**20 // 2}Mi"
    allocated: list[dict[str, Any]] = []
    for i in range(2):
        claim = share_claim(f"half-{i}", half, index=i)
        out = allocate_one(drv, claim, allocated)
        assert isinstance(out, Allocated), out
        allocated.append(with_allocation(claim, out))
    results = [c["status"]["allocation"]["devices"]["results"][0] for c in allocated]
    assert {r["device"] for r in results} == {"gpu-0"}
    assert results[0]["shareID"] != results[1]["shareID"]
    assert [r["consumedCapacity"] for r in results] == [{"memory": half}, {"memory": half}]
    third = allocate_one(drv, share_claim("third", "1Gi", index=2), allocated)
    assert isinstance(third, Unfit)
    assert "1 without enough memory left" in str(third)
    whole = allocate_one(drv, share_claim("whole", None, index=3), [])
    assert isinstance(whole, Allocated)  # no request: the policy's default, the whole GPU

    p = NodePreparer(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers={drv.name: drv}
    )
    for claim in allocated:
        outcome = p.prepare(claim)
        assert outcome.ok, [d.error for d in outcome.devices]
        (device,) = outcome.devices
        assert device.notes and "not enforced" in device.notes[0] and f"memory {half}" in device.notes[0]
        uid = claim["metadata"]["uid"]
        spec = json.loads((tmp_path / "cdi" / f"draco-{drv.name}-{uid}.json").read_text())
        share = device.result["shareID"]
        (edits,) = [d["containerEdits"] for d in spec["devices"] if d["name"] == f"{uid}-gpu-0-{share}"]
        assert edits["env"] == [f"NVIDIA_VISIBLE_DEVICES={H100_UUID}"]
        assert "notes" not in json.dumps(spec)
        assert p.prepare(claim).devices[0].notes == device.notes  # from the checkpoint


def test_a_mig_device_shares_its_memory_and_multiprocessors() -> None:
    drv = shared(A100_MIG)
    device = drv.inventory(NODE).device("gpu-0-mig-3g20gb-9-4")
    assert device is not None and device.allow_multiple_allocations
    assert device.capacity["multiprocessors"]["requestPolicy"] == {
        "default": "0",
        "validRange": {"min": "0", "max": "42", "step": "1"},
    }
    assert device.capacity["copyEngines"]["requestPolicy"]["default"] == "0"
    assert device.consumes_counters  # the partition is still placed by its counters
    for obj in published_slices(drv):
        errors = validate_object(obj)
        assert not errors, render_all(errors)


def config(
    sharing: dict[str, Any], *, source: str = "FromClaim", requests: tuple[str, ...] = ()
) -> OpaqueConfig:
    params = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}
    return OpaqueConfig(source, requests, params)


def test_every_refused_config_of_a_claim_is_named_at_once(tmp_path: Path) -> None:
    drv = driver(A100_MIG, tmp_path=tmp_path)
    devices = drv.inventory(NODE).devices
    bad_interval = config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Often"}})
    bad_strategy = config({"strategy": "Exclusive"}, source="FromClass")
    requests = [
        PrepareRequest(device=devices[0], configs=[bad_strategy, bad_interval]),
        PrepareRequest(device=devices[1], configs=[bad_strategy, bad_interval]),
    ]
    with pytest.raises(DeviceConfigError) as caught:
        drv.prepare_devices(NODE, requests)
    message = str(caught.value)
    # GpuConfig on a MIG device, from the class and from the claim: both named, each once.
    assert message.count("GpuConfig does not apply to a mig device") == 2
    assert "configuration from the device class" in message and "configuration from the claim" in message


def test_a_time_slice_is_set_with_nvidia_smi_and_a_refusal_is_the_claims_failure(tmp_path: Path) -> None:
    long = config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
    tools = HostTools(programs=("nvidia-smi",))
    drv = driver(H100, options=NvidiaOptions(tools=tools))
    (gpu,) = drv.inventory(NODE).devices
    assert drv.prepare_device(NODE, gpu, configs=[long]).env == (f"NVIDIA_VISIBLE_DEVICES={H100_UUID}",)
    assert [argv for argv, _, _ in tools.ran] == [
        ["/usr/bin/nvidia-smi", "compute-policy", "-i", H100_UUID, "--set-timeslice", "3"]
    ]
    refusing = HostTools(programs=("nvidia-smi",), refuse={"nvidia-smi": "Insufficient Permissions"})
    drv = driver(H100, options=NvidiaOptions(tools=refusing))
    p = NodePreparer(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers={drv.name: drv}
    )
    obj = {
        "metadata": {"name": "c", "namespace": "ns", "uid": "0b0c5d3e-1111-4222-8333-000000000009"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": drv.name, "pool": NODE, "device": "gpu-0"}],
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": [],
                            "opaque": {"driver": drv.name, "parameters": long.parameters},
                        }
                    ],
                }
            }
        },
    }
    (failed,) = p.prepare(obj).devices
    assert failed.reason == INVALID_CONFIG_REASON
    assert (
        failed.error is not None
        and "refused by the GPU" in failed.error
        and "Insufficient Permissions" in failed.error
    )
    mig = driver(A100_MIG, tmp_path=tmp_path, options=NvidiaOptions(tools=tools))
    mig_config = OpaqueConfig(
        "FromClaim",
        (),
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "MigDeviceConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
        },
    )
    with pytest.raises(DeviceConfigError, match="MIG devices take no timeSlicingConfig"):
        mig.prepare_device(NODE, mig.inventory(NODE).devices[0], configs=[mig_config])


MPS = {
    "strategy": "MPS",
    "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"},
}


def mps_driver(
    tmp_path: Path, tools: HostTools, *, compute_mode: bool = True, **options: Any
) -> NvidiaDriver:
    nvml = replay(H100)
    if compute_mode:  # a machine where NVML lets the agent set the compute mode
        for mode in (0, 3):
            nvml.recorded[f"[0] nvmlDeviceSetComputeMode({mode})"] = {"ok": True, "value": None}
    return NvidiaDriver(
        nvml,
        options=NvidiaOptions(
            **{"tools": tools, "mps_dir": tmp_path / "mps", "mps_shm_dir": tmp_path / "shm", **options}
        ),
    )


def test_mps_starts_a_daemon_for_the_claim_and_unprepare_stops_it(tmp_path: Path) -> None:
    tools = HostTools(programs=("nvidia-cuda-mps-control",))
    drv = mps_driver(tmp_path, tools)
    uid = "0b0c5d3e-1111-4222-8333-000000000001"
    (gpu,) = drv.inventory(NODE).devices
    (edits,) = drv.prepare_devices(
        NODE, [PrepareRequest(device=gpu, configs=[config(MPS)], allocation=Allocation(claim_uid=uid))]
    )
    folder = tmp_path / "mps" / uid
    assert edits.env == (f"NVIDIA_VISIBLE_DEVICES={H100_UUID}", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps")
    assert [(m.host_path, m.container_path) for m in edits.mounts] == [
        (str(folder / "pipe"), "/tmp/nvidia-mps"),
        (str(tmp_path / "shm"), "/dev/shm"),
    ]
    started, *told = tools.ran
    assert started[0] == ["/usr/bin/nvidia-cuda-mps-control", "-d"]
    assert started[1] == {
        "CUDA_VISIBLE_DEVICES": H100_UUID,
        "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(folder / "log"),
    }
    assert [stdin for _, _, stdin in told] == [
        "set_default_active_thread_percentage 50\n",
        f"set_default_device_pinned_mem_limit {H100_UUID} 10240M\n",
    ]
    assert drv.nvml.writes == ["[0] nvmlDeviceSetComputeMode(3)"]
    # Preparing again (a retry) reuses the running daemon.
    drv.prepare_devices(
        NODE, [PrepareRequest(device=gpu, configs=[config(MPS)], allocation=Allocation(claim_uid=uid))]
    )
    assert len(tools.ran) == 3
    drv.unprepare_claim(NODE, uid)
    assert tools.ran[-1][2] == "quit\n"
    assert drv.nvml.writes[-1] == "[0] nvmlDeviceSetComputeMode(0)"
    assert not folder.exists()
    drv.unprepare_claim(NODE, uid)  # idempotent
    assert len(tools.ran) == 4


@pytest.mark.parametrize(
    ("programs", "options", "compute_mode", "error"),
    [
        (
            (),
            {},
            True,
            "nvidia-cuda-mps-control (the NVIDIA driver's MPS control daemon) is not on the agent's PATH",
        ),
        (("nvidia-cuda-mps-control",), {"mps_shm_dir": None}, True, "--nvidia-mps-shm-dir"),
        (("nvidia-cuda-mps-control",), {}, False, "nvmlDeviceSetComputeMode(3) is not in the recording"),
        (("nvidia-cuda-mps-control",), {"shares": SharePolicy("memory")}, True, "MPS's EXCLUSIVE_PROCESS"),
    ],
)
def test_mps_is_refused_with_the_reason_where_it_cannot_run(
    tmp_path: Path, programs: tuple[str, ...], options: dict[str, Any], compute_mode: bool, error: str
) -> None:
    tools = HostTools(programs=programs)
    drv = mps_driver(tmp_path, tools, compute_mode=compute_mode, **options)
    (gpu,) = drv.inventory(NODE).devices
    allocation = Allocation(
        claim_uid="0b0c5d3e-1111-4222-8333-000000000002", share_id="x" if options.get("shares") else None
    )
    with pytest.raises(DeviceConfigError) as caught:
        drv.prepare_devices(NODE, [PrepareRequest(device=gpu, configs=[config(MPS)], allocation=allocation)])
    assert error in str(caught.value)
    assert not (tmp_path / "mps" / allocation.claim_uid).exists()
    assert not [argv for argv, _, _ in tools.ran if argv[-1] == "-d"]
