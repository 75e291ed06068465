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
