"""Table cases: consumable capacity and request policies."""

from __future__ import annotations

import pytest

from .cases import capacity
from .kit import Case, build_inventory, params, run_case


@pytest.mark.parametrize("case", params(capacity.CASES))
def test_capacity(case: Case) -> None:
    run_case(case)


def test_shares_of_one_device_get_different_share_ids() -> None:
    from draco.allocator import Allocated, Node, allocate
    from draco.api import ResourceClaim

    c = next(c for c in capacity.CASES if c.id == "share-ids-differ-between-shares")
    out = allocate(
        inventory=build_inventory(c),
        node=Node(c.node, c.labels),
        claims=[ResourceClaim.from_dict(x) for x in c.claims],
    )
    assert isinstance(out, Allocated)
    ids = [r["shareID"] for result in out.results.values() for r in result.to_dict()["devices"]["results"]]
    assert len(ids) == 2
    assert len(set(ids)) == 2, f"two shares of gpu-0 got the same shareID: {ids}"


@pytest.mark.parametrize(
    ("capacity", "requested", "written"),
    [
        # Regression (issue 16): the step's format, not binary (draco wrote 9765625Ki).
        ({"value": "40G", "requestPolicy": {"validRange": {"min": "1G", "step": "1G"}}}, "9500M", "10G"),
        (
            {"value": "40Gi", "requestPolicy": {"validRange": {"min": "1Gi", "step": "512Mi"}}},
            "1500M",
            "1536Mi",
        ),
        # No policy: the request itself, written canonically like any upstream Quantity.
        ({"value": "40G"}, "1000M", "1G"),
        ({"value": "40G", "requestPolicy": {"default": "1000M"}}, None, "1G"),
        ({"value": "4000M"}, None, "4G"),
    ],
)
def test_consumed_capacity_is_written_like_upstream(
    capacity: dict[str, object], requested: str | None, written: str
) -> None:
    """consumedCapacity is written as upstream writes it (checked against upstream's allocator)."""
    from draco.allocator import Allocated, Inventory, Node, SelectorCache, allocate

    from .kit import claim, dev, device_class, req, slice_

    inventory = Inventory.build(
        classes=[device_class("gpu")],
        slices=[slice_(devices=[dev("gpu-0", multi=True, capacity={"memory": capacity})])],
        cache=SelectorCache(),
    )
    requests = {"memory": requested} if requested is not None else None
    out = allocate(
        inventory=inventory,
        node=Node("node-1", {}),
        claims=[claim("claim-0", req("req-0", capacity=requests))],
    )
    assert isinstance(out, Allocated)
    result = out.results["default/claim-0"].to_dict()["devices"]["results"][0]
    assert result["consumedCapacity"] == {"memory": written}
