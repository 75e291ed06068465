"""Table cases: the 32-results limit and fatal input errors."""

from __future__ import annotations

import pytest

from .cases import limits
from .kit import Case, build_inventory, params, run_case


@pytest.mark.parametrize("case", params(limits.CASES))
def test_limits(case: Case) -> None:
    run_case(case)


def test_search_budget_running_out_is_a_timeout_not_unfit() -> None:
    """A search that needs many steps raises AllocationTimeoutError under a tiny budget."""
    from draco.allocator import Node, SearchBudget, allocate
    from draco.api import ResourceClaim
    from draco.errors import AllocationTimeoutError

    from . import kit

    # Three devices per numa node, two of them of the same model (models cycle a, b, c
    # over the nodes): three models exist and every numa node offers three devices, yet
    # no three devices share a numa node with distinct models. Only trying combinations
    # shows it (17 steps today).
    models = "abc"
    devices = [
        kit.dev(f"gpu-{n}-{i}", attrs={"numa": n, "model": model, "serial": f"s{n}{i}"})
        for n in range(6)
        for i, model in enumerate([models[n % 3], models[n % 3], models[(n + 1) % 3]])
    ]
    c = kit.case(
        "budget",
        claims=[
            kit.claim(
                "claim-0",
                kit.req("req-0", count=3),
                constraints=[kit.match("gpu.example.com/numa"), kit.distinct("gpu.example.com/model")],
            )
        ],
        slices=[kit.slice_(devices=devices)],
        expected=kit.unfit(),
    )
    kit.run_case(c)  # with the default budget: does not fit
    claims = [ResourceClaim.from_dict(x) for x in c.claims]
    node = Node(c.node, c.labels)
    with pytest.raises(AllocationTimeoutError):
        allocate(inventory=build_inventory(c), node=node, claims=claims, budget=SearchBudget(max_steps=3))
