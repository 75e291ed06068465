"""The fake device file: parsing, `count` stamping, health, reloads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from draco.agent.drivers.base import BINDING_CONDITION, BINDING_FAILURE_CONDITION
from draco.agent.drivers.fake import load_fake_drivers, parse_fake_config
from draco.agent.health import UNHEALTHY_TAINT_KEY
from draco.errors import AgentError
from tests.unit.agent.support import FAKE_YAML


def test_count_stamps_out_devices_with_typed_attributes() -> None:
    config = parse_fake_config(FAKE_YAML)
    gpu = config.drivers[0]
    assert gpu.name == "gpu.draco.dev" and gpu.cdi_class == "gpu"
    assert [d.device.name for d in gpu.devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    third = gpu.devices[2].device
    assert third.attributes == {
        "model": {"string": "A100"},
        "index": {"int": 2},
        "driverVersion": {"version": "550.54.15"},
    }
    assert third.capacity == {"memory": {"value": "40Gi"}}
    assert gpu.shared_counters == ({"name": "node-counters", "counters": {"memory": {"value": "160Gi"}}},)


def test_single_driver_shorthand_and_default_env() -> None:
    config = parse_fake_config("name: x.draco.dev\ndevices: [{name: dev-a}]\n")
    (spec,) = config.drivers
    assert spec.cdi_class == "device"
    assert spec.devices[0].env == ("DRACO_FAKE_DEVICE_DEV_A=dev-a",)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[1, 2]", "expected a map"),
        ("drivers: []", "non-empty list"),
        ("drivers: [{devices: []}]", "needs a `name`"),
        ("name: a.b\ndevices: [{name: d, count: 2}]", "needs `{index}`"),
        ("name: a.b\ndevices: [{name: d}, {name: d}]", "duplicate device names"),
        ("name: a.b\ndevices: [{name: d, attributes: {x: {int: nope}}}]", "is not a int"),
        ("name: a.b\ndevices: [{name: d, attributes: {x: {float: 1}}}]", "an attribute is"),
        (": : :", "not YAML"),
    ],
)
def test_broken_files_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(AgentError, match="fake device file") as info:
        parse_fake_config(text)
    assert words in str(info.value)


def test_unhealthy_devices_get_the_noexecute_taint_on_the_named_node_only() -> None:
    text = FAKE_YAML.replace(
        "    deviceNodes: [/dev/null]", "    deviceNodes: [/dev/null]\n  unhealthy: [node-b/gpu-1]"
    )
    (gpu_driver, _), _ = load_from_text(text)
    on_a = gpu_driver.inventory("node-a").device("gpu-1")
    on_b = gpu_driver.inventory("node-b").device("gpu-1")
    assert on_a is not None and not on_a.taints
    assert on_b is not None
    assert [(t["key"], t["effect"]) for t in on_b.taints] == [(UNHEALTHY_TAINT_KEY, "NoExecute")]
    assert on_b.needs_small_slices


def test_binding_conditions_flag_is_the_default_for_drivers_that_do_not_say() -> None:
    config = parse_fake_config(FAKE_YAML, binding_conditions=True)
    device = config.drivers[0].devices[0].device
    assert list(device.binding_conditions) == [BINDING_CONDITION]
    assert list(device.binding_failure_conditions) == [BINDING_FAILURE_CONDITION]
    assert device.to_api()["bindingConditions"] == [BINDING_CONDITION]
    off = parse_fake_config(
        FAKE_YAML.replace("  cdiClass: gpu", "  cdiClass: gpu\n  bindingConditions: false"),
        binding_conditions=True,
    )
    assert not off.drivers[0].devices[0].device.binding_conditions


def test_prepare_device_returns_edits_or_the_configured_failure() -> None:
    text = FAKE_YAML.replace(
        "    env: {NIC_MODE: fast}", "    env: {NIC_MODE: fast}\n    failPrepare: firmware is sulking"
    )
    (gpu, nic), _ = load_from_text(text)
    device = gpu.inventory("n").device("gpu-0")
    assert device is not None
    edits = gpu.prepare_device("n", device)
    assert edits.env == ("DRACO_FAKE_DEVICE_GPU_0=gpu-0",)
    assert [n.path for n in edits.device_nodes] == ["/dev/null"]
    nic_device = nic.inventory("n").device("nic-0")
    assert nic_device is not None
    with pytest.raises(AgentError, match="firmware is sulking"):
        nic.prepare_device("n", nic_device)


def test_fail_prepare_rate_fails_a_seeded_share_of_prepares() -> None:
    text = FAKE_YAML.replace(
        "    env: {NIC_MODE: fast}", "    env: {NIC_MODE: fast}\n    failPrepareRate: 0.25"
    ).replace("- name: nic.draco.dev", "- name: nic.draco.dev\n  failPrepareSeed: 11")

    def outcomes() -> list[bool]:
        (_, nic), _ = load_from_text(text)
        device = nic.inventory("n").device("nic-0")
        assert device is not None
        failed = []
        for _ in range(400):
            try:
                nic.prepare_device("n", device)
            except AgentError as exc:
                assert "injected failure" in str(exc)
                failed.append(True)
            else:
                failed.append(False)
        return failed

    first = outcomes()
    assert 60 < sum(first) < 140  # about a quarter of 400
    assert outcomes() == first  # the seed replays the same draws


@pytest.mark.parametrize("rate", ["1.5", "-0.1", "true", "often"])
def test_fail_prepare_rate_must_be_a_probability(rate: str) -> None:
    text = FAKE_YAML.replace(
        "    env: {NIC_MODE: fast}", f"    env: {{NIC_MODE: fast}}\n    failPrepareRate: {rate}"
    )
    with pytest.raises(AgentError, match="failPrepareRate"):
        parse_fake_config(text)


def test_watcher_reloads_changed_files_and_ignores_broken_ones(tmp_path: Path) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text(FAKE_YAML)
    drivers, watcher = load_fake_drivers(path)
    assert not watcher.reload()
    path.write_text(FAKE_YAML.replace("count: 4", "count: 6"))
    os.utime(path, ns=(1, 1))
    assert watcher.reload()
    assert len(drivers[0].inventory("n").devices) == 6
    path.write_text("drivers: nope")
    os.utime(path, ns=(2, 2))
    assert not watcher.reload()
    assert len(drivers[0].inventory("n").devices) == 6


def test_missing_file_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="--config"):
        load_fake_drivers(tmp_path / "absent.yaml")


def load_from_text(text: str):  # type: ignore[no-untyped-def]
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "devices.yaml"
        path.write_text(text)
        return load_fake_drivers(path)
