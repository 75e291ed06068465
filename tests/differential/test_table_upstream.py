"""The allocator's table cases (tests/unit/allocator/cases) through upstream's allocator.

The table states what draco answers; here upstream answers the same problems and must
agree on the outcome and on the devices chosen, so that the table itself cannot drift
from upstream. Cases with DeviceTaintRules are left out (upstream applies rules in the
scheduler's slice tracker, outside the allocator), and so are the few listed in
``NOT_UPSTREAM`` with the reason. Where allocated devices over-commit counters, upstream
answers with those counters relieved (the departure "over-committed counters").
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from .compare import overcommitted_counters, relieved
from .upstream import Upstream, build_upstream, go_available, solve_draco, stored_claim

MODULES = (
    "admin",
    "all_mode",
    "basics",
    "binding",
    "capacity",
    "combos",
    "constraints",
    "counters",
    "first_available",
    "limits",
    "nodes",
    "pools",
    "results",
    "taints",
)

#: Cases whose input no API server would hold, with why.
NOT_UPSTREAM = {
    "node-selector-slice-on-node-name-field": (
        "a matchFields requirement with two values is invalid in a ResourceSlice (validation rejects it); "
        "upstream's node selector parser errors on it, draco's matches it"
    ),
}
#: Kubernetes 1.38 (kubernetes/kubernetes#142202): a capacity named with or without its
#: driver's domain is one capacity; the 1.37 allocator run here compares names literally,
#: so it answers these of upstream's 1.38 cases (and draco's last) otherwise.
NOT_UPSTREAM.update(
    {
        f"consumable-capacity-request-{name}-{kind}": (
            "Kubernetes 1.38 resolves capacity names with and without the driver's domain; 1.37 does not"
        )
        for name in (
            "unqualified-and-qualified-device",
            "qualified-and-unqualified-device",
            "unqualified-and-device-with-unqualified-and-qualified-capacity-names",
            "unqualified-and-device-with-qualified-and-unqualified-capacity-names",
            "with-unqualified-and-qualified-capacity-request-names",
            "with-qualified-and-unqualified-capacity-request-names",
        )
        for kind in ("exclusive", "shared")
    }
)
NOT_UPSTREAM["capacity-consumed-under-the-other-spelling-counts"] = NOT_UPSTREAM[
    "consumable-capacity-request-unqualified-and-qualified-device-shared"
]

_LIST_KINDS = ("ints", "bools", "strings", "versions")


def _cases() -> list[Any]:
    params = []
    for module in MODULES:
        for case in importlib.import_module(f"tests.unit.allocator.cases.{module}").CASES:
            marks = []
            if case.taint_rules:
                marks.append(
                    pytest.mark.skip(reason="DeviceTaintRules are applied outside upstream's allocator")
                )
            elif case.id in NOT_UPSTREAM:
                marks.append(pytest.mark.skip(reason=NOT_UPSTREAM[case.id]))
            params.append(pytest.param(case, id=f"{module}/{case.id}", marks=marks))
    return params


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    if not go_available():
        pytest.skip("Go is not installed: this test builds upstream's allocator with Go >= 1.26")
    process = Upstream(build_upstream())
    try:
        yield process
    finally:
        process.close()


def _devices(results: list[dict[str, Any]]) -> list[list[tuple[str, str, str]]]:
    return [
        [(r["request"], r["pool"], r["device"]) for r in (a.get("devices") or {}).get("results") or []]
        for a in results
    ]


# The first case may wait for the upstream allocator's first build (minutes on a cold cache).
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("case", _cases())
def test_table_case_agrees_with_upstream(case: Any, upstream: Upstream) -> None:
    problem: dict[str, Any] = {
        "id": case.id,
        "node": {"name": case.node, "labels": dict(case.labels)},
        "classes": case.classes,
        "slices": case.slices,
        "allocated": [stored_claim(c) for c in case.allocated],
        "claims": [stored_claim(c) for c in case.claims],
    }
    uses_lists = any(
        kind in attribute
        for s in case.slices
        for device in s["spec"].get("devices") or []
        for attribute in (device.get("attributes") or {}).values()
        for kind in _LIST_KINDS
    )
    if uses_lists:
        problem["features"] = {"listTypeAttributes": True}  # always on in draco
    mine = solve_draco(problem)
    if overcommitted_counters(problem):
        problem = relieved(problem)  # the departure "over-committed counters"
    theirs = upstream.solve(problem)
    kind = theirs.kind
    if kind == "node-error" and mine.kind == "unfit" and "is invalid" in mine.message:
        kind = "unfit"  # the departure "invalid pool is unfit"
    assert (kind, _devices(theirs.results)) == (mine.kind, _devices(mine.results)), (
        f"upstream {theirs.kind} {_devices(theirs.results)} {theirs.message[:300]!r}; "
        f"draco {mine.kind} {_devices(mine.results)} {mine.message[:300]!r}"
    )
