"""What a device record keeps: equal attribute values shared, and a fixed-size digest of
what CEL sees instead of the content (the selector cache keeps one per device)."""

from __future__ import annotations

from draco.allocator.devices import CapacityRecord, attribute_set, cel_fingerprint, qualify
from draco.api.quantity import Quantity


def test_equal_attribute_values_are_one_object() -> None:
    one = attribute_set({"string": "".join(["A", "100"])})
    two = attribute_set({"string": "".join(["A", "100"])})
    assert one == ("string", frozenset({"A100"}))
    assert one is two
    assert attribute_set({"int": 1}) != attribute_set({"bool": True})
    assert qualify("model", "gpu.example.com") is qualify("".join(["mod", "el"]), "gpu.example.com")


def test_the_cel_fingerprint_tells_exactly_what_cel_sees() -> None:
    capacity = {"memory": CapacityRecord(value=Quantity("80Gi"), policy=None)}

    def fingerprint(attributes: dict[str, object], *, driver: str = "d", multiple: bool = False) -> bytes:
        return cel_fingerprint(driver, {"name": "ignored", "attributes": attributes}, capacity, multiple)

    base = fingerprint({"a": {"int": 1}, "b": {"string": "x"}})
    assert len(base) == 16
    assert fingerprint({"b": {"string": "x"}, "a": {"int": 1}}) == base  # attribute order does not matter
    assert fingerprint({"a": {"int": 2}, "b": {"string": "x"}}) != base
    assert fingerprint({"a": {"bool": True}, "b": {"string": "x"}}) != base
    assert fingerprint({"a": {"int": 1}, "b": {"string": "x"}}, driver="e") != base
    assert fingerprint({"a": {"int": 1}, "b": {"string": "x"}}, multiple=True) != base
    other = {"memory": CapacityRecord(value=Quantity("40Gi"), policy=None)}
    assert cel_fingerprint("d", {"attributes": {"a": {"int": 1}, "b": {"string": "x"}}}, other, False) != base
