"""The NVIDIA driver on replayed NVML: discovery, what is published, prepare, health."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from draco.agent.drivers.base import BINDING_CONDITION, OpaqueConfig
from draco.agent.drivers.nvidia import NvidiaDriver, NvidiaOptions, pci_bus_id, semver
from draco.agent.drivers.nvml_replay import ReplayGapError, ReplayNvml
from draco.agent.health import UNHEALTHY_TAINT_KEY
from draco.agent.prepare import INVALID_CONFIG_REASON, NodePreparer
from draco.errors import AgentError
from draco.validation import render_all, validate_object
from tests.unit.agent.gpus import A100_MIG, H100, NODE, SHAPES, driver, host_root, published_slices, replay
from tests.unit.agent.support import claim, result, validate_cdi

H100_UUID = "GPU-00000000-1111-2222-3333-444444444444"
A100_UUID = "GPU-aaaaaaaa-0000-1111-2222-333333333333"


def test_the_recorded_h100_is_one_whole_gpu_with_nvidias_attributes() -> None:
    drv = driver(H100, binding_conditions=True)
    inventory = drv.inventory(NODE)
    assert [d.name for d in inventory.devices] == ["gpu-0"]
    assert not inventory.shared_counters  # MIG mode off: no partitions, nothing to share
    (gpu,) = inventory.devices
    assert gpu.attributes == {
        "type": {"string": "gpu"},
        "index": {"int": 0},
        "minor": {"int": 0},
        "uuid": {"string": H100_UUID},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "driverVersion": {"version": "580.159.4"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "pcieBusID": {"string": "0000:00:06.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:00:06.0"},
        "migCapable": {"bool": True},
    }
    # nvidia-smi's memory.total is 81559 MiB: NVML's total is the same memory in bytes.
    assert gpu.capacity == {"memory": {"value": str(85520809984)}}
    assert 85520809984 // 2**20 == 81559
    assert list(gpu.binding_conditions) == [BINDING_CONDITION]
    assert not gpu.consumes_counters


def test_the_h100s_profiles_get_nvidias_names_and_their_placements() -> None:
    drv = driver(H100)
    profiles = {p.name: (p.id, p.slices, p.instances, p.placements) for p in drv.gpus[0].profiles}
    assert profiles == {
        "1g.10gb": (19, 1, 7, tuple((s, 1) for s in range(7))),
        "2g.20gb": (14, 2, 3, ((0, 2), (2, 2), (4, 2))),
        "3g.40gb": (9, 3, 2, ((0, 4), (4, 4))),
        "4g.40gb": (5, 4, 1, ((0, 4),)),
        "7g.80gb": (0, 7, 1, ((0, 8),)),
        "1g.10gb+me": (20, 1, 1, tuple((s, 1) for s in range(7))),
        "1g.20gb": (15, 1, 4, ((0, 2), (2, 2), (4, 2), (6, 2))),
    }


def test_the_driver_asks_nvml_only_what_the_h100_recording_answers() -> None:
    nvml = replay(H100)
    NvidiaDriver(nvml)
    recorded_only = json.loads(H100[0].read_text())["calls"]
    added = set(json.loads(H100[1].read_text())["calls"])
    asked = set(nvml.asked)
    assert asked - added <= set(recorded_only)
    assert "[0] nvmlDeviceGetPciInfo" in asked


def test_a_call_the_recording_lacks_fails_loudly() -> None:
    nvml = replay(H100[:1])  # without the placements added by hand
    with pytest.raises(ReplayGapError, match="nvmlDeviceGetBrand"):
        NvidiaDriver(nvml)


def test_an_a100_in_mig_mode_publishes_its_mig_devices_and_not_the_whole_gpu() -> None:
    inventory = driver(A100_MIG).inventory(NODE)
    names = [d.name for d in inventory.devices]
    assert names == [
        "gpu-0-mig-1g5gb-19-2",
        "gpu-0-mig-1g5gb-19-3",
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-3g20gb-9-4",
    ]
    three = inventory.device("gpu-0-mig-3g20gb-9-4")
    assert three is not None
    assert {k: v for k, v in three.attributes.items() if k in ("type", "uuid", "parentUUID", "profile")} == {
        "type": {"string": "mig"},
        "uuid": {"string": "MIG-bbbbbbbb-0000-1111-2222-444444444400"},
        "parentUUID": {"string": A100_UUID},
        "profile": {"string": "3g.20gb"},
    }
    assert three.attributes["architecture"] == {"string": "Ampere"}
    assert three.capacity["memory"] == {"value": str(19968 * 2**20)}
    assert three.capacity["multiprocessors"] == {"value": "42"}
    assert three.consumes_counters == [
        {
            "counterSet": "gpu-0-counters",
            "counters": {
                **{f"memory-slice-{i}": {"value": "1"} for i in range(4, 8)},
                "compute-slices": {"value": "3"},
            },
        }
    ]
    (counters,) = inventory.shared_counters
    assert counters["name"] == "gpu-0-counters"
    assert sorted(counters["counters"]) == sorted(
        [*(f"memory-slice-{i}" for i in range(8)), "compute-slices", "instances-20"]
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_slices_published_for_each_recorded_gpu_pass_dracos_validation(shape: str) -> None:
    slices = published_slices(driver(SHAPES[shape], binding_conditions=True))
    assert slices
    for obj in slices:
        errors = validate_object(obj)
        assert not errors, render_all(errors)
    names = [d["name"] for s in slices for d in s["spec"].get("devices") or []]
    assert len(names) == len(set(names))


def test_the_pcie_root_comes_from_sysfs_where_the_node_shows_it(tmp_path: Path) -> None:
    root = host_root(tmp_path, H100, pcie_root="pci0000:00")
    gpu = NvidiaDriver(replay(H100), host_root=root).inventory(NODE).devices[0]
    assert gpu.attributes["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:00"}
    root = host_root(tmp_path / "mig", A100_MIG, pcie_root="pci0000:80")
    for device in NvidiaDriver(replay(A100_MIG), host_root=root).inventory(NODE).devices:
        assert device.attributes["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:80"}
    bare = NvidiaDriver(replay(H100), host_root=tmp_path / "empty").inventory(NODE).devices[0]
    assert "resource.kubernetes.io/pcieRoot" not in bare.attributes


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("00000000:00:06.0", "0000:00:06.0"),
        ("00000001:B1:00.0", "0001:b1:00.0"),
        ("0000:07:00.0", "0000:07:00.0"),
        ("00010000:07:00.0", None),
        ("garbage", None),
    ],
)
def test_nvml_bus_ids_become_standard_pci_addresses(raw: str, want: str | None) -> None:
    assert pci_bus_id(raw) == want


def preparer(tmp_path: Path, drv: NvidiaDriver) -> NodePreparer:
    return NodePreparer(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers={drv.name: drv}
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_published_device_of_each_gpu_prepares_and_unprepares(tmp_path: Path, shape: str) -> None:
    drv = driver(SHAPES[shape], tmp_path=tmp_path)
    devices = drv.inventory(NODE).devices
    assert devices
    p = preparer(tmp_path, drv)
    for i, device in enumerate(devices):
        uid = f"0b0c5d3e-1111-4222-8333-{i:012d}"
        obj = claim(result(device.name, driver=drv.name, pool=NODE), uid=uid, name=f"claim-{i}")
        outcome = p.prepare(obj)
        assert outcome.ok, [d.error for d in outcome.devices]
        spec = json.loads((tmp_path / "cdi" / f"draco-{drv.name}-{uid}.json").read_text())
        validate_cdi(spec)
        assert spec["kind"] == f"{drv.name}/gpu"
        edits = spec["devices"][0]["containerEdits"]
        assert edits["env"] == [f"NVIDIA_VISIBLE_DEVICES={device.attributes['uuid']['string']}"]
        nodes = [n["path"] for n in edits["deviceNodes"]]
        assert nodes[:4] == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
        assert p.prepare(obj).wrote is False  # idempotent
        assert p.unprepare(uid)
    assert not list((tmp_path / "cdi").iterdir())


def test_a_mig_device_gets_its_gpu_and_compute_instance_capability_nodes(tmp_path: Path) -> None:
    drv = driver(A100_MIG, tmp_path=tmp_path)
    device = drv.inventory(NODE).device("gpu-0-mig-2g10gb-14-0")
    assert device is not None
    edits = drv.prepare_device(NODE, device)
    assert edits.env == ("NVIDIA_VISIBLE_DEVICES=MIG-bbbbbbbb-0000-1111-2222-444444444401",)
    assert [n.path for n in edits.device_nodes][4:] == [
        "/dev/nvidia-caps/nvidia-cap48",
        "/dev/nvidia-caps/nvidia-cap49",
    ]
    # The recording carries its machine's table; without it the host's is read.
    assert driver(A100_MIG).prepare_device(NODE, device) == edits
    bare = NvidiaDriver(ReplayNvml(replay(A100_MIG).recorded), host_root=tmp_path / "empty")
    with pytest.raises(AgentError, match="mig-minors"):
        bare.prepare_device(NODE, device)


def test_a_device_that_is_not_there_is_refused(tmp_path: Path) -> None:
    drv = driver(H100)
    gone = drv.inventory(NODE).devices[0]
    from dataclasses import replace

    with pytest.raises(AgentError, match="not a device"):
        drv.prepare_device(NODE, replace(gone, name="gpu-0-mig-1g10gb-19-0"))


def test_configs_it_cannot_honour_fail_the_claim_with_a_reason(tmp_path: Path) -> None:
    drv = driver(H100)
    p = preparer(tmp_path, drv)
    obj = claim(result("gpu-0", driver=drv.name, pool=NODE))
    obj["status"]["allocation"]["devices"]["config"] = [
        {
            "source": "FromClaim",
            "requests": [],
            "opaque": {
                "driver": drv.name,
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
                },
            },
        }
    ]
    outcome = p.prepare(obj)
    assert not outcome.ok
    (failed,) = outcome.devices
    assert failed.reason == INVALID_CONFIG_REASON
    assert failed.error is not None and "MPS cannot be applied here" in failed.error
    assert not (tmp_path / "cdi").exists() or not list((tmp_path / "cdi").iterdir())


def config(params: dict[str, object]) -> OpaqueConfig:
    return OpaqueConfig("FromClaim", (), params)


GPU_CONFIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
MIG_CONFIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig"}


@pytest.mark.parametrize(
    ("device", "params", "error"),
    [
        ("gpu-0", GPU_CONFIG, None),
        ("gpu-0", {**GPU_CONFIG, "sharing": {"strategy": "TimeSlicing"}}, None),
        (
            "gpu-0",
            {
                **GPU_CONFIG,
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
            },
            None,
        ),
        (
            "gpu-0",
            {**GPU_CONFIG, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}},
            "interval Long cannot be applied here",
        ),
        (
            "gpu-0",
            {
                **GPU_CONFIG,
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Often"}},
            },
            "unknown time-slice interval 'Often'",
        ),
        ("gpu-0", {**GPU_CONFIG, "sharing": {"strategy": "MPS"}}, "MPS cannot be applied here"),
        (
            "gpu-0",
            {**GPU_CONFIG, "sharing": {"strategy": "MPS", "mpsConfig": {"multiUser": True}}},
            "multiUser is not supported",
        ),
        (
            "gpu-0",
            {**GPU_CONFIG, "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}}},
            "from 1 to 100",
        ),
        (
            "gpu-0",
            {**GPU_CONFIG, "sharing": {"strategy": "MPS", "timeSlicingConfig": {"interval": "Long"}}},
            "timeSlicingConfig is set but the strategy is MPS",
        ),
        ("gpu-0", {**GPU_CONFIG, "sharing": {"strategy": "Exclusive"}}, "unknown sharing strategy"),
        ("gpu-0", {**GPU_CONFIG, "devices": "all"}, "unknown fields"),
        ("gpu-0", MIG_CONFIG, "MigDeviceConfig does not apply to a gpu device"),
        ("gpu-0", {"apiVersion": "gpu.resource.draco.dev/v1", "kind": "GpuConfig"}, "unknown configuration"),
        ("mig", MIG_CONFIG, None),
        ("mig", {**MIG_CONFIG, "sharing": {"strategy": "TimeSlicing"}}, None),
        ("mig", GPU_CONFIG, "GpuConfig does not apply to a mig device"),
    ],
)
def test_which_nvidia_configs_are_honoured(
    tmp_path: Path, device: str, params: dict[str, object], error: str | None
) -> None:
    drv = driver(H100 if device == "gpu-0" else A100_MIG, tmp_path=tmp_path)
    target = drv.inventory(NODE).devices[0]
    if error is None:
        assert drv.prepare_device(NODE, target, configs=[config(params)]).env
    else:
        with pytest.raises(AgentError, match=error):
            drv.prepare_device(NODE, target, configs=[config(params)])


def test_fatal_xid_taints_the_gpus_devices_but_an_application_xid_does_not(tmp_path: Path) -> None:
    nvml = replay(A100_MIG)
    drv = NvidiaDriver(
        nvml, host_root=host_root(tmp_path, A100_MIG), options=NvidiaOptions(taint_effect="NoExecute")
    )
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    from types import SimpleNamespace

    assert not drv.handle_event(SimpleNamespace(eventType=8, eventData=13, device=handle))
    fatal = SimpleNamespace(eventType=8, eventData=79, device=handle)
    assert drv.handle_event(fatal)
    assert not drv.handle_event(fatal)  # not news the second time
    inventory = drv.inventory(NODE)
    for device in inventory.devices:
        assert [(t["key"], t["value"], t["effect"]) for t in device.taints] == [
            (UNHEALTHY_TAINT_KEY, "xid-79", "NoExecute")
        ]
    with pytest.raises(AgentError, match="unhealthy"):
        drv.prepare_device(NODE, inventory.devices[0])


async def test_the_event_loop_notices_an_xid_and_a_lost_gpu() -> None:
    nvml = replay(H100)
    drv = NvidiaDriver(nvml)
    notified = asyncio.Event()
    task = asyncio.create_task(drv.watch(notified.set, timeout_ms=10))
    try:
        nvml.inject_xid(0, 48)
        await asyncio.wait_for(notified.wait(), 5)
        first = drv.inventory(NODE).devices[0]
        assert first.taints[0]["value"] == "xid-48"
        assert "[0] nvmlDeviceRegisterEvents(XidCriticalError)" in nvml.asked
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    drv.close()
    assert not nvml.initialised

    lost = replay(H100)
    drv = NvidiaDriver(lost)
    lost.lose(0)
    assert drv.check_lost()
    assert drv.inventory(NODE).devices[0].taints[0]["value"] == "gpu-lost"


def test_the_replay_reads_recordings_from_files_and_says_which_is_broken(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(AgentError, match=r"broken\.json"):
        ReplayNvml.from_files([broken])
    drv = NvidiaDriver.from_nvml(replay=list(H100), name="gpu.nvidia.com")
    assert drv.name == "gpu.nvidia.com"
    assert [d.name for d in drv.inventory(NODE).devices] == ["gpu-0"]


@pytest.mark.parametrize(("raw", "want"), [("535.104.05", "535.104.5"), ("8.0", "8.0.0"), ("550", "550.0.0")])
def test_nvml_versions_become_semver(raw: str, want: str) -> None:
    assert semver(raw) == want


def test_device_nodes_come_from_another_host_folder_when_asked(tmp_path: Path) -> None:
    root = host_root(tmp_path, A100_MIG)
    drv = NvidiaDriver(replay(A100_MIG), host_root=root, dev_root=tmp_path / "dev")
    device = drv.inventory(NODE).device("gpu-0-mig-3g20gb-9-4")
    assert device is not None
    nodes = drv.prepare_device(NODE, device).device_nodes
    assert [(n.path, n.host_path) for n in nodes] == [
        (path, str(tmp_path / "dev" / path.removeprefix("/dev/")))
        for path in (
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-caps/nvidia-cap12",
            "/dev/nvidia-caps/nvidia-cap13",
        )
    ]


def test_compute_instances_sharing_a_gpu_instance_are_devices_of_their_own() -> None:
    calls = dict(replay(A100_MIG).recorded)
    # GPU instance 1 (3g.20gb at slices 4-7) split into two compute instances: 1c and 2c.
    attrs = calls["[0/0] nvmlDeviceGetAttributes"]["value"]
    calls["[0/0] nvmlDeviceGetAttributes"] = {"ok": True, "value": {**attrs, "computeInstanceSliceCount": 1}}
    for key, entry in list(calls.items()):
        if key.startswith("[0/0] "):
            calls[key.replace("[0/0]", "[0/4]")] = entry
    calls["[0] nvmlDeviceGetMigDeviceHandleByIndex(4)"] = {"ok": True, "value": {}}
    calls["[0/4] nvmlDeviceGetComputeInstanceId"] = {"ok": True, "value": 1}
    calls["[0/4] nvmlDeviceGetUUID"] = {"ok": True, "value": "MIG-bbbbbbbb-0000-1111-2222-444444444404"}
    calls["[0/4] nvmlDeviceGetAttributes"] = {"ok": True, "value": {**attrs, "computeInstanceSliceCount": 2}}
    # And one MIG device NVML cannot describe: not published.
    calls["[0/3] nvmlDeviceGetAttributes"] = {
        "ok": False,
        "value": "NVMLError_NoPermission: Insufficient Permissions",
    }
    inventory = NvidiaDriver(ReplayNvml(calls)).inventory(NODE)
    by_name = {d.name: d for d in inventory.devices}
    assert sorted(by_name) == [
        "gpu-0-mig-1g5gb-19-2",
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-3g20gb-9-4-ci0",
        "gpu-0-mig-3g20gb-9-4-ci1",
    ]
    assert by_name["gpu-0-mig-3g20gb-9-4-ci0"].attributes["profile"] == {"string": "1c.3g.20gb"}
    assert by_name["gpu-0-mig-3g20gb-9-4-ci1"].attributes["profile"] == {"string": "2c.3g.20gb"}
    assert not by_name["gpu-0-mig-3g20gb-9-4-ci0"].consumes_counters  # both use the same slices


def test_the_numa_node_comes_from_sysfs_and_a_machine_without_numa_has_none(tmp_path: Path) -> None:
    root = host_root(tmp_path, H100, pcie_root="pci0000:00", numa_node=1)
    gpu = NvidiaDriver(replay(H100), host_root=root).inventory(NODE).devices[0]
    assert gpu.attributes["resource.kubernetes.io/numaNode"] == {"int": 1}
    flat = host_root(tmp_path / "flat", H100, pcie_root="pci0000:00", numa_node=-1)
    gpu = NvidiaDriver(replay(H100), host_root=flat).inventory(NODE).devices[0]
    assert "resource.kubernetes.io/numaNode" not in gpu.attributes
    root = host_root(tmp_path / "mig", A100_MIG, pcie_root="pci0000:80", numa_node=0)
    for device in NvidiaDriver(replay(A100_MIG), host_root=root).inventory(NODE).devices:
        assert device.attributes["resource.kubernetes.io/numaNode"] == {"int": 0}
    for obj in published_slices(NvidiaDriver(replay(A100_MIG), host_root=root)):
        assert not validate_object(obj)


def test_the_health_taint_is_noschedule_unless_asked_otherwise() -> None:
    nvml = replay(H100)
    drv = NvidiaDriver(nvml)
    assert drv.mark_unhealthy(H100_UUID, "xid-79")
    assert drv.inventory(NODE).devices[0].taints == [
        {"key": UNHEALTHY_TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"}
    ]
    with pytest.raises(AgentError, match="--nvidia-taint-effect 'None'"):
        NvidiaDriver(replay(H100), options=NvidiaOptions(taint_effect="None"))


def test_health_events_appended_to_a_file_reach_the_inventory(tmp_path: Path) -> None:
    events = tmp_path / "health-events"
    drv = NvidiaDriver(replay(H100), options=NvidiaOptions(health_events=events))
    assert not drv.read_health_events()  # no file yet: nothing
    events.write_text("0 xid 13\nGPU-nope xid 79\n0 bogus\n")
    assert not drv.read_health_events()  # an application XID, an unknown GPU, a typo
    with events.open("a") as out:
        out.write(f"{H100_UUID} xid 79\n0 xid 4")  # the second line is not complete yet
    assert drv.read_health_events()
    assert drv.inventory(NODE).devices[0].taints[0]["value"] == "xid-79"
    with events.open("a") as out:
        out.write("8\n0 recovered\n")
    assert drv.read_health_events()
    assert not drv.inventory(NODE).devices[0].taints
    events.write_text("0 lost\n")  # a new, shorter file is read from its start
    assert drv.read_health_events()
    assert drv.inventory(NODE).devices[0].taints[0]["value"] == "gpu-lost"


async def test_the_watch_loop_reads_health_events(tmp_path: Path) -> None:
    events = tmp_path / "health-events"
    drv = NvidiaDriver(replay(H100), options=NvidiaOptions(health_events=events))
    notified = asyncio.Event()
    task = asyncio.create_task(drv.watch(notified.set, timeout_ms=10))
    try:
        events.write_text("0 xid 48\n")
        await asyncio.wait_for(notified.wait(), 5)
        assert drv.inventory(NODE).devices[0].taints[0]["value"] == "xid-48"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_mig_devices_are_published_with_their_profile_as_partition_type() -> None:
    """The pool status (KEP-5677's partitionSummary) groups a MIG pool by profile."""
    from draco.allocator.inventory import Inventory
    from draco.allocator.poolstatus import pool_statuses

    slices = published_slices(driver(A100_MIG))
    with_devices = [s for s in slices if s["spec"].get("devices")]
    assert {s["spec"].get("partitionTypeAttribute") for s in with_devices} == {"gpu.nvidia.draco.dev/profile"}
    assert not any("partitionTypeAttribute" in s["spec"] for s in slices if not s["spec"].get("devices"))
    (pool,) = pool_statuses(Inventory.build(classes=[], slices=slices))
    assert pool.validation_error is None
    assert {(p.type, p.total, p.allocatable) for p in pool.partition_summary} == {
        ("1g.5gb", 2, 2),
        ("2g.10gb", 1, 1),
        ("3g.20gb", 1, 1),
    }
    assert not driver(H100).inventory(NODE).partition_type_attribute  # MIG off: no partitions
