"""Selector results are cached per (selector, device content), across inventories."""

from __future__ import annotations

from draco.allocator import Allocated, Inventory, Node, SelectorCache, Unfit, allocate

from .kit import claim, counter_set, dev, device_class, req, slice_

CLASSES = [device_class("gpu", selectors=['device.attributes["gpu.example.com"].model == "a100"'])]


def _slices(nodes: int, *, model: str = "a100") -> list[dict[str, object]]:
    return [
        slice_(node=f"node-{n}", devices=[dev(f"gpu-{i}", attrs={"model": model}) for i in range(4)])
        for n in range(nodes)
    ]


def test_identical_devices_share_one_evaluation_per_selector() -> None:
    cache = SelectorCache()
    inventory = Inventory.build(classes=CLASSES, slices=_slices(3), cache=cache)
    for n in range(3):
        outcome = allocate(inventory=inventory, node=Node(f"node-{n}"), claims=[claim("c", req("gpu"))])
        assert isinstance(outcome, Allocated)
    # Two class selectors (driver, model) on one device content.
    assert cache.evaluations == 2


def test_a_rebuilt_inventory_reuses_results_and_evaluates_only_new_content() -> None:
    cache = SelectorCache()
    inventory = Inventory.build(classes=CLASSES, slices=_slices(2), cache=cache)
    allocate(inventory=inventory, node=Node("node-0"), claims=[claim("c", req("gpu"))])
    before = cache.evaluations
    changed = [*_slices(2), slice_(node="node-9", devices=[dev("gpu-0", attrs={"model": "h100"})])]
    rebuilt = Inventory.build(classes=CLASSES, slices=changed, cache=cache)
    allocate(inventory=rebuilt, node=Node("node-0"), claims=[claim("c", req("gpu"))])
    assert cache.evaluations == before
    outcome = allocate(inventory=rebuilt, node=Node("node-9"), claims=[claim("c", req("gpu"))])
    assert isinstance(outcome, Unfit)
    assert cache.evaluations == before + 2


def test_a_bounded_cache_starts_over_without_changing_answers() -> None:
    cache = SelectorCache(max_results=3)
    inventory = Inventory.build(classes=CLASSES, slices=_slices(2), cache=cache)
    for _ in range(3):
        outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu", count=4))])
        assert isinstance(outcome, Allocated)


def test_counters_left_after_allocated_devices_are_explained() -> None:
    devices = [
        dev("whole", attrs={"model": "a100"}, consumes={"gpu": {"memory": "40Gi"}}),
        dev("half", attrs={"model": "a100"}, consumes={"gpu": {"memory": "20Gi"}}),
    ]
    slices = [
        slice_("counters", count=2, shared_counters=[counter_set("gpu", {"memory": "40Gi"})]),
        slice_("devices", count=2, devices=devices),
    ]
    from .kit import allocated, res

    inventory = Inventory.build(
        classes=CLASSES, slices=slices, allocated_claims=[allocated("used", res("gpu", "half"))]
    )
    outcome = allocate(inventory=inventory, node=Node("node-1"), claims=[claim("c", req("gpu"))])
    assert isinstance(outcome, Unfit)
    assert "1 in use, 1 short of shared counters; 0 left" in outcome.explanation
