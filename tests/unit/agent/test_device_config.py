"""Opaque device configuration: which configs reach a device, in which order, and what the
fake driver makes of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from draco.agent.drivers.base import OpaqueConfig, device_configs
from draco.agent.drivers.fake import FakeDriver, config_env, parse_fake_config
from draco.agent.prepare import INVALID_CONFIG_REASON, NodePreparer
from draco.agent.status import device_entries
from draco.errors import DeviceConfigError
from tests.unit.agent.support import FAKE_YAML, claim, result

GPU = "gpu.draco.dev"


def fake(env: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "fake.draco.dev/v1alpha1", "kind": "FakeDeviceConfig", "env": env, **extra}


def entry(source: str, parameters: dict[str, Any], *requests: str, driver: str = GPU) -> dict[str, Any]:
    out: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": parameters}}
    if requests:
        out["requests"] = list(requests)
    return out


def test_class_configs_come_before_claim_configs_whatever_the_list_order() -> None:
    configs = [
        entry("FromClaim", fake({"A": "claim"})),
        entry("FromClass", fake({"A": "class-1"})),
        entry("FromClaim", fake({"A": "claim-2"})),
        entry("FromClass", fake({"A": "class-2"})),
    ]
    picked = device_configs(configs, driver=GPU, request="gpu")
    assert [c.parameters["env"]["A"] for c in picked] == ["class-1", "class-2", "claim", "claim-2"]
    assert [c.source for c in picked] == ["FromClass", "FromClass", "FromClaim", "FromClaim"]


def test_configs_of_other_drivers_and_other_requests_are_skipped() -> None:
    configs = [
        entry("FromClaim", fake({"A": "1"}), driver="nic.draco.dev"),
        entry("FromClaim", fake({"B": "2"}), "net"),
        entry("FromClaim", fake({"C": "3"}), "gpu"),
        entry("FromClaim", fake({"D": "4"}), "gpu/big"),
        entry("FromClaim", fake({"E": "5"})),
    ]
    # A subrequest result gets configs for the subrequest, for its parent and for all.
    assert [
        next(iter(c.parameters["env"])) for c in device_configs(configs, driver=GPU, request="gpu/big")
    ] == [
        "C",
        "D",
        "E",
    ]
    assert [
        next(iter(c.parameters["env"])) for c in device_configs(configs, driver=GPU, request="gpu/small")
    ] == [
        "C",
        "E",
    ]


def test_non_opaque_or_malformed_entries_fail() -> None:
    with pytest.raises(DeviceConfigError, match="only opaque"):
        device_configs([{"source": "FromClaim", "future": {}}], driver=GPU, request="gpu")
    with pytest.raises(DeviceConfigError, match="unknown source"):
        device_configs([{"source": "FromElsewhere", "opaque": {"driver": GPU}}], driver=GPU, request="gpu")
    with pytest.raises(DeviceConfigError, match="JSON object"):
        device_configs([entry("FromClaim", [1, 2])], driver=GPU, request="gpu")  # type: ignore[arg-type]


def test_fake_env_later_configs_override_earlier_ones() -> None:
    configs = [
        OpaqueConfig("FromClass", (), fake({"MODE": "class", "KEEP": "yes"})),
        OpaqueConfig("FromClaim", (), fake({"MODE": "claim", "BATCH": 4})),
    ]
    assert config_env(GPU, configs) == {"MODE": "claim", "KEEP": "yes", "BATCH": "4"}


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"apiVersion": "other/v1", "kind": "FakeDeviceConfig"}, "unknown configuration kind"),
        ({"apiVersion": "fake.draco.dev/v1alpha1", "kind": "GpuConfig"}, "'GpuConfig'"),
        (fake({"A": "1"}, sharing="timeSlicing"), "unknown field"),
        (fake({"1BAD": "x"}), "not a variable name"),
        (fake({"A": {"nested": 1}}), "string or a number"),
        (fake({"A": True}), "string or a number"),
        ({"apiVersion": "fake.draco.dev/v1alpha1", "kind": "FakeDeviceConfig", "env": ["A=1"]}, "map"),
    ],
)
def test_fake_rejects_what_it_does_not_understand(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(DeviceConfigError, match=message) as err:
        config_env(GPU, [OpaqueConfig("FromClaim", ("gpu",), parameters)])
    assert "configuration from the claim for gpu" in str(err.value)


def preparer(tmp_path: Path) -> NodePreparer:
    drivers = {d.name: d for d in (FakeDriver(s) for s in parse_fake_config(FAKE_YAML).drivers)}
    return NodePreparer(
        node="node-a", cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers=drivers
    )


def with_config(obj: dict[str, Any], *configs: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["allocation"]["devices"]["config"] = list(configs)
    return obj


def test_prepare_puts_config_env_into_the_cdi_spec(tmp_path: Path) -> None:
    p = preparer(tmp_path)
    obj = with_config(
        claim(result("gpu-0")),
        entry("FromClass", fake({"GPU_MODE": "class", "FROM_CLASS": "1"})),
        entry("FromClaim", fake({"GPU_MODE": "claim"}), "gpu"),
    )
    outcome = p.prepare(obj)
    assert outcome.ok, outcome.devices
    spec = json.loads(next((tmp_path / "cdi").iterdir()).read_text())
    assert spec["devices"][0]["containerEdits"]["env"] == [
        "DRACO_FAKE_DEVICE_GPU_0=gpu-0",
        "GPU_MODE=claim",
        "FROM_CLASS=1",
    ]


def test_unknown_config_fails_prepare_with_its_own_condition_and_leaves_nothing(tmp_path: Path) -> None:
    p = preparer(tmp_path)
    obj = with_config(
        claim(result("gpu-0"), result("nic-0", request="net", driver="nic.draco.dev")),
        entry("FromClaim", {"apiVersion": "v1", "kind": "Mystery"}, "gpu"),
    )
    outcome = p.prepare(obj)
    assert not outcome.ok
    assert {d.reason for d in outcome.devices} == {INVALID_CONFIG_REASON}
    assert "unknown configuration kind 'Mystery'" in (outcome.devices[0].error or "")
    assert not any((tmp_path / "cdi").glob("*")) and p.prepared_uids() == set()
    entries = device_entries(outcome.devices, existing=[], now=datetime(2026, 1, 1, tzinfo=UTC))
    ready = entries[0]["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", INVALID_CONFIG_REASON)
    assert "Mystery" in ready["message"]


def test_every_refused_config_of_every_device_is_named_at_once(tmp_path: Path) -> None:
    spec = parse_fake_config(FAKE_YAML).drivers[0]
    driver = FakeDriver(spec)
    overclock = {"apiVersion": "v9", "kind": "Overclock"}
    bad_env = {"apiVersion": "fake.draco.dev/v1alpha1", "kind": "FakeDeviceConfig", "env": {"1X": "y"}}
    obj = claim(result("gpu-0"), result("gpu-1"))
    obj["status"]["allocation"]["devices"]["config"] = [
        {"source": "FromClass", "requests": [], "opaque": {"driver": driver.name, "parameters": overclock}},
        {"source": "FromClaim", "requests": [], "opaque": {"driver": driver.name, "parameters": bad_env}},
    ]
    p = NodePreparer(
        node="node-a", cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers={driver.name: driver}
    )
    outcome = p.prepare(obj)
    errors = {d.error for d in outcome.devices}
    (error,) = errors  # both devices say the same: every problem, each once
    assert error is not None
    assert error.count("unknown configuration kind 'Overclock'") == 1
    assert "configuration from the device class" in error
    assert error.count("'1X' is not a variable name") == 1 and "configuration from the claim" in error
    assert {d.reason for d in outcome.devices} == {INVALID_CONFIG_REASON}
