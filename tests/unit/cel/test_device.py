"""The `device` variable: fields, domain defaulting, missing keys, views of API devices."""

from __future__ import annotations

import pytest

from draco.api import Device
from draco.api.quantity import Quantity
from draco.cel import MISSING_KEY_HINT, DeviceView, SelectorRuntimeError, SemVer, compile_selector
from draco.errors import CELRuntimeError
from tests.unit.cel.kit import DRIVER, evaluate, gpu


def test_driver_and_allow_multiple_allocations() -> None:
    assert evaluate('device.driver == "gpu.example.com"')
    assert not evaluate('device.driver == "nic.example.com"')
    assert evaluate("device.allowMultipleAllocations == false")
    assert evaluate("device.allowMultipleAllocations", gpu(allow_multiple_allocations=True))


def test_unqualified_names_land_in_the_driver_domain() -> None:
    assert evaluate('device.attributes["gpu.example.com"].model == "a100"')
    assert evaluate('device.capacity["gpu.example.com"].memory == quantity("80Gi")')


def test_qualified_names_split_at_the_first_slash() -> None:
    assert evaluate('device.attributes["numa.example.com"].node == 1')
    assert evaluate('device.capacity["numa.example.com"].bandwidth.isLessThan(quantity("2"))')
    view = DeviceView(DRIVER, {"a.example.com/b/c": 1}, {}, False)
    assert view.cel_value["attributes"]["a.example.com"] == {"b/c": 1}


@pytest.mark.parametrize(
    "attributes",
    [{"model": "u", f"{DRIVER}/model": "q"}, {f"{DRIVER}/model": "q", "model": "u"}],
    ids=["unqualified-first", "qualified-first"],
)
def test_a_name_published_both_ways_shows_the_qualified_value(attributes: dict[str, str]) -> None:
    # Kubernetes 1.37 picks by Go's map order, 1.38 the qualified one (kubernetes/kubernetes
    # #142202, "Consumable capacity and CEL resolution ... now also prefers fully-qualified").
    view = DeviceView(DRIVER, attributes, {}, False)
    assert view.cel_value["attributes"][DRIVER] == {"model": "q"}


@pytest.mark.parametrize(
    "capacity",
    [
        {"memory": Quantity("1Gi"), f"{DRIVER}/memory": Quantity("8Gi")},
        {f"{DRIVER}/memory": Quantity("8Gi"), "memory": Quantity("1Gi")},
    ],
    ids=["unqualified-first", "qualified-first"],
)
def test_a_capacity_published_both_ways_shows_the_qualified_value(capacity: dict[str, Quantity]) -> None:
    """kubernetes/kubernetes#142202: CEL sees the capacity of the fully qualified name, the
    one the allocator consumes for a request of either spelling."""
    view = DeviceView(DRIVER, {}, capacity, False)
    assert view.cel_value["capacity"][DRIVER] == {"memory": Quantity("8Gi")}


def test_an_unknown_domain_is_an_empty_map() -> None:
    assert evaluate('device.attributes["other.example.com"].size() == 0')
    assert evaluate('!("other.example.com" in device.attributes)')
    assert evaluate('"gpu.example.com" in device.attributes && "numa.example.com" in device.capacity')


def test_a_missing_key_is_an_error_naming_selector_device_and_hint() -> None:
    selector = compile_selector('device.attributes["gpu.example.com"].vendor == "acme"')
    with pytest.raises(SelectorRuntimeError) as caught:
        selector.matches(gpu(), context='claim ns/x request "gpu" selector #1')
    message = str(caught.value)
    assert 'claim ns/x request "gpu" selector #1' in message
    assert "gpu.example.com/node-a/gpu-0" in message
    assert "no such key: vendor" in message
    assert MISSING_KEY_HINT in message
    assert isinstance(caught.value, CELRuntimeError)
    assert caught.value.device == "gpu.example.com/node-a/gpu-0"


def test_missing_keys_in_an_unknown_domain_are_errors_too() -> None:
    with pytest.raises(SelectorRuntimeError, match="no such key: model"):
        evaluate('device.attributes["other.example.com"].model == "a100"')


def test_has_and_optional_chaining_guard_missing_keys() -> None:
    assert evaluate('!has(device.attributes["gpu.example.com"].vendor)')
    assert evaluate('has(device.attributes["gpu.example.com"].model)')
    assert evaluate('device.attributes["gpu.example.com"].?vendor.orValue("none") == "none"')
    assert evaluate('device.attributes["gpu.example.com"].?model.orValue("none") == "a100"')
    assert evaluate('device.attributes["x"].?foo.orValue(false) == false')
    assert evaluate('!device.attributes["gpu.example.com"].?vendor.hasValue()')
    assert evaluate('device.attributes[?"other.example.com"].?model.orValue(1) == 1')


def test_list_attributes_and_includes() -> None:
    assert evaluate('device.attributes["gpu.example.com"].tags.includes("fast")')
    assert evaluate('!device.attributes["gpu.example.com"].tags.includes("slow")')
    assert evaluate('device.attributes["gpu.example.com"].model.includes("a100")')
    assert evaluate('"training" in device.attributes["gpu.example.com"].tags')
    too_long = gpu(attributes={"many": list(range(49))})
    with pytest.raises(SelectorRuntimeError, match="cannot be applied to lists longer than 48 values"):
        evaluate('device.attributes["gpu.example.com"].many.includes(3)', too_long)


def test_from_device_converts_versions_and_lists() -> None:
    api_device = Device.model_validate(
        {
            "name": "gpu-7",
            "attributes": {
                "model": {"string": "h100"},
                "driverVersion": {"version": "535.104.5"},
                "numa.example.com/node": {"int": 1},
                "ecc": {"bool": True},
                "firmware": {"versions": ["1.0.0", "1.1.0-rc.1"]},
            },
            "capacity": {"memory": {"value": "80Gi"}},
            "allowMultipleAllocations": True,
        }
    )
    view = DeviceView.from_device(api_device, driver=DRIVER, pool="node-b")
    assert view.id == "gpu.example.com/node-b/gpu-7"
    attributes = view.cel_value["attributes"]
    assert attributes[DRIVER]["driverVersion"] == SemVer.parse("535.104.5")
    assert attributes[DRIVER]["firmware"] == (SemVer.parse("1.0.0"), SemVer.parse("1.1.0-rc.1"))
    assert attributes["numa.example.com"] == {"node": 1}
    assert view.cel_value["capacity"][DRIVER]["memory"] == Quantity("80Gi")
    assert view.allow_multiple_allocations
    assert evaluate('device.attributes["gpu.example.com"].driverVersion.major() == 535', view)


def test_a_device_with_an_invalid_version_fails_every_selector() -> None:
    api_device = Device.model_validate({"name": "gpu-7", "attributes": {"v": {"version": "1.2"}}})
    view = DeviceView.from_device(api_device, driver=DRIVER)
    assert view.unusable is not None
    with pytest.raises(SelectorRuntimeError, match="attribute v: parse semantic version"):
        evaluate("true", view)


def test_a_non_bool_result_from_dynamic_data_is_a_runtime_error() -> None:
    with pytest.raises(
        SelectorRuntimeError, match="CEL result of type string could not be converted to bool"
    ):
        evaluate('device.attributes["gpu.example.com"].model')
