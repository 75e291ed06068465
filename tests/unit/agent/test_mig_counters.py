"""MIG partitions and their counters: exactly the combinations NVML's placements allow.

The driver publishes no partitions today (dynamic partitioning is not implemented; MIG
mode on publishes the existing MIG devices, which consume the same counters). The model
is checked here on every partition of the replayed H100 and A100: the sets of partitions
the counters admit are the sets NVML could create together, and the real allocator hands
out what fits and refuses what does not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from draco.agent.drivers import mig
from draco.allocator import Allocated, Inventory, Node, Unfit, allocate
from tests.unit.agent.gpus import A100_MIG, H100, driver

DRIVER = "gpu.nvidia.draco.dev"
NODE = "gpu-node"


def profiles_of(shape: Sequence[Any]) -> list[mig.Profile]:
    return driver(shape).gpus[0].profiles


def counters_fit(chosen: Sequence[mig.Partition], profiles: Sequence[mig.Profile]) -> bool:
    """Whether the consumptions of `chosen` stay within the counter set (the allocator's rule)."""
    counter_set = mig.counter_set("c", profiles)
    assert counter_set is not None
    used: dict[str, int] = {}
    for part in chosen:
        for name, value in mig.consumption("c", profiles, part.profile, part.start)["counters"].items():
            used[name] = used.get(name, 0) + int(value["value"])
    return all(used[name] <= int(counter_set["counters"][name]["value"]) for name in used)


def all_sets(
    parts: Sequence[mig.Partition], ok: Callable[[Sequence[mig.Partition]], bool]
) -> set[frozenset[str]]:
    """Every set of partitions `ok` admits (it is closed under taking subsets)."""
    found: set[frozenset[str]] = set()

    def grow(start: int, chosen: list[mig.Partition]) -> None:
        found.add(frozenset(p.name for p in chosen))
        for i in range(start, len(parts)):
            chosen.append(parts[i])
            if ok(chosen):
                grow(i + 1, chosen)
            chosen.pop()

    grow(0, [])
    return found


@pytest.mark.parametrize(("shape", "count"), [(H100, 25), (A100_MIG, 25)])
def test_every_partition_has_a_unique_stable_name(shape: Sequence[Any], count: int) -> None:
    parts = mig.partitions(0, profiles_of(shape))
    names = [p.name for p in parts]
    assert len(names) == count == len(set(names))
    assert mig.partitions(0, profiles_of(shape)) == parts


def test_the_h100s_profiles_with_the_same_slices_and_memory_do_not_collide() -> None:
    names = {p.name for p in mig.partitions(0, profiles_of(H100))}
    assert "gpu-0-mig-1g10gb-19-0" in names
    assert "gpu-0-mig-1g10gbme-20-0" in names
    assert "gpu-0-mig-7g80gb-0-0" in names
    assert not any("79gb" in n for n in names)


@pytest.mark.parametrize("shape", [H100, A100_MIG], ids=["h100", "a100"])
def test_the_counters_admit_exactly_the_combinations_nvml_can_create(shape: Sequence[Any]) -> None:
    profiles = profiles_of(shape)
    parts = mig.partitions(0, profiles)
    by_counters = all_sets(parts, lambda chosen: counters_fit(chosen, profiles))
    by_placements = all_sets(parts, lambda chosen: mig.fits_together(chosen, profiles))
    assert by_counters == by_placements
    assert len(by_placements) > 100

    # Totals alone (memory, compute slices) admit overlapping placements: 4g at 0 with 1g at 0.
    full = max(profiles, key=lambda p: p.slices)

    def totals_fit(chosen: Sequence[mig.Partition]) -> bool:
        return (
            sum(p.profile.slices for p in chosen) <= full.slices
            and sum(p.profile.memory_mib for p in chosen) <= full.memory_mib
        )

    by_totals = all_sets(parts, totals_fit)
    assert by_totals > by_placements


@pytest.mark.parametrize(
    ("profile", "start", "fits"),
    [("3g.40gb", 0, True), ("3g.40gb", 4, True), ("3g.40gb", 2, False), ("4g.40gb", 4, False)],
)
def test_placements_are_nvmls_not_any_free_slices(profile: str, start: int, fits: bool) -> None:
    profiles = profiles_of(H100)
    by_name = {p.name: p for p in profiles}
    assert (start in dict(by_name[profile].placements)) is fits


# ---- the real allocator on a slice of every partition


def partition_slices(shape: Sequence[Any]) -> list[dict[str, Any]]:
    profiles = profiles_of(shape)
    counter_set = mig.counter_set("gpu-0-counters", profiles)
    devices: list[dict[str, Any]] = [
        {
            "name": "gpu-0",
            "attributes": {"type": {"string": "gpu"}},
            "consumesCounters": [mig.whole_gpu_consumption("gpu-0-counters", profiles)],
        }
    ]
    for part in mig.partitions(0, profiles):
        devices.append(
            {
                "name": part.name,
                "attributes": {"type": {"string": "mig"}, "profile": {"string": part.profile.name}},
                "consumesCounters": [mig.consumption("gpu-0-counters", profiles, part.profile, part.start)],
            }
        )
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 2}
    return [
        {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-{i}"},
            "spec": {"driver": DRIVER, "pool": pool, "nodeName": NODE, **spec},
        }
        for i, spec in enumerate([{"sharedCounters": [counter_set]}, {"devices": devices}])
    ]


CLASSES = [
    {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": kind},
        "spec": {"selectors": [{"cel": {"expression": f"device.attributes['{DRIVER}'].type == '{kind}'"}}]},
    }
    for kind in ("gpu", "mig")
]


def claim_for(wanted: dict[str, int]) -> dict[str, Any]:
    requests = []
    for profile, count in wanted.items():
        exactly: dict[str, Any] = {"deviceClassName": "gpu" if profile == "gpu" else "mig", "count": count}
        if profile != "gpu":
            expression = f"device.attributes['{DRIVER}'].profile == '{profile}'"
            exactly["selectors"] = [{"cel": {"expression": expression}}]
        requests.append({"name": "r" + mig.profile_slug(profile), "exactly": exactly})
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "parts", "namespace": "default", "uid": "uid-parts"},
        "spec": {"devices": {"requests": requests}},
    }


H100_FITS = [
    {"gpu": 1},
    {"7g.80gb": 1},
    {"4g.40gb": 1, "3g.40gb": 1},
    {"3g.40gb": 2},
    {"1g.10gb": 7},
    {"1g.10gb+me": 1, "1g.10gb": 6},
    {"1g.20gb": 4},
    {"2g.20gb": 3, "1g.20gb": 1},
    {"4g.40gb": 1, "1g.10gb": 3},
    {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
]
H100_UNFIT = [
    {"gpu": 1, "1g.10gb": 1},
    {"7g.80gb": 1, "1g.10gb": 1},
    {"1g.10gb+me": 2},
    {"3g.40gb": 2, "1g.10gb": 1},
    {"4g.40gb": 1, "2g.20gb": 2},
    {"2g.20gb": 3, "3g.40gb": 1},
    {"1g.20gb": 4, "1g.10gb": 1},
    {"1g.10gb": 6, "1g.20gb": 1, "1g.10gb+me": 1},
]


def run(shape: Sequence[Any], wanted: dict[str, int]) -> Allocated | Unfit:
    inventory = Inventory.build(classes=CLASSES, slices=partition_slices(shape))
    return allocate(inventory=inventory, node=Node(NODE), claims=[claim_for(wanted)])


@pytest.mark.parametrize("wanted", H100_FITS, ids=lambda w: "+".join(f"{n}x{p}" for p, n in w.items()))
def test_creatable_h100_layouts_are_allocatable(wanted: dict[str, int]) -> None:
    out = run(H100, wanted)
    assert isinstance(out, Allocated), out
    devices = [r["device"] for r in out.results.json()["default/parts"]["devices"]["results"]]
    profiles = {p.name: p for p in mig.partitions(0, profiles_of(H100))}
    assert mig.fits_together([profiles[d] for d in devices if d != "gpu-0"], profiles_of(H100))


@pytest.mark.parametrize("wanted", H100_UNFIT, ids=lambda w: "+".join(f"{n}x{p}" for p, n in w.items()))
def test_layouts_nvml_cannot_create_are_not(wanted: dict[str, int]) -> None:
    assert isinstance(run(H100, wanted), Unfit)


def test_the_a100_gpu_test4_layout_is_allocatable_from_every_partition() -> None:
    out = run(A100_MIG, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    assert isinstance(out, Allocated)
    assert isinstance(run(A100_MIG, {"4g.20gb": 1, "3g.20gb": 2}), Unfit)
