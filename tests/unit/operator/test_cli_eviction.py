"""`draco operator --no-device-taint-eviction` and `--no-extended-resources` reach the
options the controllers read."""

from __future__ import annotations

from draco.operator.cli import parse_options
from draco.operator.scheduler.controller import _settings


def test_device_taint_eviction_is_on_by_default_and_can_be_turned_off() -> None:
    assert parse_options([]).device_taint_eviction is True
    assert parse_options(["--no-device-taint-eviction"]).device_taint_eviction is False


def test_extended_resources_are_on_by_default_and_can_be_turned_off() -> None:
    assert parse_options([]).extended_resources is True
    assert _settings(parse_options([])).extended_resources is True
    off = parse_options(["--no-extended-resources"])
    assert off.extended_resources is False
    assert _settings(off).extended_resources is False
