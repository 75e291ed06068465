"""`draco operator --no-device-taint-eviction` reaches the options the controller reads."""

from __future__ import annotations

from draco.operator.cli import parse_options


def test_device_taint_eviction_is_on_by_default_and_can_be_turned_off() -> None:
    assert parse_options([]).device_taint_eviction is True
    assert parse_options(["--no-device-taint-eviction"]).device_taint_eviction is False
