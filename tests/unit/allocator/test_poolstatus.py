"""Pool status (KEP-5677's shape) from the allocator's inventory: the worked examples of
the KEP (a Full/Half partitionable GPU, shareable NICs), taints, admin access, incomplete
pools and a request's filters."""

from __future__ import annotations

from typing import Any

import pytest

from draco.allocator.inventory import Inventory
from draco.allocator.poolstatus import (
    PARTITION_SUMMARY_OVER_CAP,
    PARTITION_TYPE_MISSING,
    POOL_INCOMPLETE,
    SHAREABLE_SUMMARY_OVER_CAP,
    answer_request,
    pool_statuses,
)
from draco.api.constants import UNHEALTHY_TAINT_KEY
from tests.unit.allocator.kit import (
    GPU,
    NIC,
    allocated,
    counter_set,
    dev,
    devs,
    res,
    slice_,
    taint,
    taint_rule,
)

PROFILE = f"{GPU}/profile"


def _inventory(
    slices: list[dict[str, Any]], *, claims: list[dict[str, Any]] = (), rules: list[Any] = ()
) -> Inventory:  # type: ignore[assignment]
    return Inventory.build(classes=[], slices=slices, taint_rules=rules, allocated_claims=claims)


def _gpu(memory: str = "80Gi", *, attribute: str | None = PROFILE) -> dict[str, Any]:
    """KEP-5677's partitionable GPU: one Full (80Gi) or two Half (40Gi) partitions."""
    gpu = slice_(
        devices=[
            dev("gpu-0-full", attrs={"profile": "Full"}, consumes={"gpu-0": {"memory": "80Gi"}}),
            dev("gpu-0-half-1", attrs={"profile": "Half"}, consumes={"gpu-0": {"memory": "40Gi"}}),
            dev("gpu-0-half-2", attrs={"profile": "Half"}, consumes={"gpu-0": {"memory": "40Gi"}}),
        ],
        shared_counters=[counter_set("gpu-0", {"memory": memory})],
    )
    if attribute is not None:
        gpu["spec"]["partitionTypeAttribute"] = attribute
    return gpu


def _summary(inventory: Inventory) -> dict[str, tuple[int, int]]:
    (pool,) = pool_statuses(inventory)
    return {p.type: (p.total, p.allocatable) for p in pool.partition_summary}


@pytest.mark.parametrize(
    ("in_use", "memory", "expected"),
    [
        ((), "80Gi", {"Full": (1, 1), "Half": (2, 2)}),
        (("gpu-0-half-1",), "80Gi", {"Full": (1, 0), "Half": (2, 1)}),
        (("gpu-0-full",), "80Gi", {"Full": (1, 0), "Half": (2, 0)}),
        # The unallocated devices bound it when the counters have room for more.
        ((), "800Gi", {"Full": (1, 1), "Half": (2, 2)}),
    ],
)
def test_partitions_that_still_fit_follow_the_kep_examples(
    in_use: tuple[str, ...], memory: str, expected: dict[str, tuple[int, int]]
) -> None:
    claims = [allocated(f"c-{name}", res("r", name)) for name in in_use]
    inventory = _inventory([_gpu(memory)], claims=claims)
    assert _summary(inventory) == expected
    (pool,) = pool_statuses(inventory)
    assert (pool.total_devices, pool.allocated_devices, pool.available_devices) == (
        3,
        len(in_use),
        3 - len(in_use),
    )
    assert pool.validation_error is None


def test_a_request_default_names_the_partition_type_only_when_no_slice_does() -> None:
    undeclared = _inventory([_gpu(attribute=None)])
    assert pool_statuses(undeclared)[0].partition_summary == ()
    (pool,) = pool_statuses(undeclared, default_partition_type_attribute=PROFILE)
    assert {p.type for p in pool.partition_summary} == {"Full", "Half"}
    declared = _inventory([_gpu(attribute=f"{GPU}/other")])
    (pool,) = pool_statuses(declared, default_partition_type_attribute=PROFILE)
    assert pool.validation_error is not None and pool.validation_error.startswith(PARTITION_TYPE_MISSING)
    assert pool.partition_summary == ()
    assert pool.total_devices == 3  # the counts stay


def test_partitions_of_one_type_on_different_counters_fit_one_after_another() -> None:
    """MIG: one profile's partitions draw on different memory slices (upstream would
    refuse the pool as PartitionCostMismatch)."""
    gpu = slice_(
        devices=[
            dev(
                f"mig-1g-{i}",
                attrs={"profile": "1g"},
                consumes={"gpu-0": {f"slice-{i}": "1", "compute": "1"}},
            )
            for i in range(3)
        ],
        shared_counters=[
            counter_set("gpu-0", {"slice-0": "1", "slice-1": "1", "slice-2": "1", "compute": "2"})
        ],
    )
    gpu["spec"]["partitionTypeAttribute"] = PROFILE
    inventory = _inventory([gpu])
    assert _summary(inventory) == {"1g": (3, 2)}  # compute allows two
    assert _summary(_inventory([gpu], claims=[allocated("c", res("r", "mig-1g-0"))])) == {"1g": (3, 1)}


def test_a_pool_without_counters_cannot_name_partitions() -> None:
    plain = slice_(devices=devs(2, attrs={"profile": "Full"}))
    plain["spec"]["partitionTypeAttribute"] = PROFILE
    (pool,) = pool_statuses(_inventory([plain]))
    assert pool.validation_error is not None and pool.validation_error.startswith(PARTITION_TYPE_MISSING)


def test_more_than_32_partition_types_is_an_error_not_a_cut() -> None:
    gpu = slice_(
        devices=[
            dev(f"p-{i}", attrs={"profile": f"t{i}"}, consumes={"gpu-0": {"memory": "1"}}) for i in range(33)
        ],
        shared_counters=[counter_set("gpu-0", {"memory": "64"})],
    )
    gpu["spec"]["partitionTypeAttribute"] = PROFILE
    (pool,) = pool_statuses(_inventory([gpu]))
    assert pool.validation_error is not None and pool.validation_error.startswith(PARTITION_SUMMARY_OVER_CAP)
    assert pool.partition_summary == ()


def test_shareable_devices_count_once_and_sum_their_capacity() -> None:
    """The KEP's NICs: nic-0 with two claims of 7Gi in all, nic-1 with 2Gi, nic-2 free."""
    nics = slice_(
        driver=NIC,
        devices=[dev(f"nic-{i}", multi=True, capacity={"bandwidth": "10Gi"}) for i in range(3)],
    )

    def share(claim: str, device: str, amount: str, share_id: str) -> dict[str, Any]:
        result = res("r", device, driver=NIC, shareID=share_id, consumedCapacity={"bandwidth": amount})
        return allocated(claim, result)

    claims = [
        share("a", "nic-0", "4Gi", "00000000-0000-0000-0000-000000000001"),
        share("b", "nic-0", "3Gi", "00000000-0000-0000-0000-000000000002"),
        share("c", "nic-1", "2Gi", "00000000-0000-0000-0000-000000000003"),
    ]
    (pool,) = pool_statuses(_inventory([nics], claims=claims))
    assert (pool.total_devices, pool.allocated_devices, pool.available_devices) == (3, 2, 1)
    assert pool.shareable_summary is not None
    assert pool.shareable_summary.to_wire() == {
        "fullyAvailableDevices": 1,
        "partiallyAvailableDevices": 2,
        "capacity": [{"name": "bandwidth", "total": "30Gi", "consumed": "9Gi", "available": "21Gi"}],
    }


def test_more_than_32_shareable_capacities_is_an_error() -> None:
    device = dev("d", multi=True, capacity={f"c{i}": "1" for i in range(33)})
    (pool,) = pool_statuses(_inventory([slice_(devices=[device])]))
    assert pool.validation_error is not None and pool.validation_error.startswith(SHAREABLE_SUMMARY_OVER_CAP)
    assert pool.shareable_summary is None


def test_tainted_devices_are_unavailable_and_admin_access_holds_nothing() -> None:
    gpus = slice_(devices=[dev("gpu-0", taints=[taint("broken", "NoSchedule")]), dev("gpu-1"), dev("gpu-2")])
    rules = [taint_rule("drain", taint("drain", "NoExecute"), driver=GPU, device="gpu-1")]
    claims = [
        allocated("held", res("r", "gpu-0")),
        allocated("watching", res("r", "gpu-2", adminAccess=True)),
    ]
    (pool,) = pool_statuses(_inventory([gpus], claims=claims, rules=rules))
    # gpu-0 is allocated and tainted: taken off twice, and the count stops at 0 (1.37's rule).
    assert (pool.total_devices, pool.allocated_devices, pool.unavailable_devices) == (3, 1, 2)
    assert pool.available_devices == 0
    assert pool.node_name == "node-1"


def test_none_effect_taints_leave_a_device_available() -> None:
    (pool,) = pool_statuses(_inventory([slice_(devices=[dev("gpu-0", taints=[taint("note", "None")])])]))
    assert (pool.unavailable_devices, pool.available_devices) == (0, 1)


def test_unhealthy_devices_are_the_agents_health_taint_whatever_its_effect() -> None:
    devices = [
        dev("gpu-0", taints=[taint(UNHEALTHY_TAINT_KEY, "NoExecute", "xid-79")]),
        dev("gpu-1", taints=[taint(UNHEALTHY_TAINT_KEY, "NoSchedule", "xid-48")]),
        dev("gpu-2", taints=[taint("maintenance", "NoSchedule")]),
        dev("gpu-3"),
    ]
    (pool,) = pool_statuses(_inventory([slice_(devices=devices)]))
    assert (pool.unavailable_devices, pool.unhealthy_devices, pool.available_devices) == (3, 2, 1)
    assert "unhealthyDevices" not in pool.to_wire()  # draco's, not the request's status


def test_an_incomplete_pool_has_an_error_and_no_counts() -> None:
    half = slice_("half", count=2, devices=devs(2))
    (pool,) = pool_statuses(_inventory([half]))
    assert pool.incomplete
    assert (
        pool.validation_error
        == f"{POOL_INCOMPLETE} pool {GPU}/node-1 is incomplete: observed 1/2 slices at generation 0"
    )
    assert pool.to_wire() == {
        "driver": GPU,
        "poolName": "node-1",
        "generation": 0,
        "nodeName": "node-1",
        "validationError": pool.validation_error,
    }


def test_only_the_newest_generation_counts() -> None:
    old = slice_("old", generation=1, devices=devs(4))
    new = slice_("new", generation=2, devices=devs(2))
    (pool,) = pool_statuses(_inventory([old, new]))
    assert (pool.generation, pool.total_devices, pool.resource_slice_count) == (2, 2, 1)


def test_a_pool_over_several_nodes_has_no_node_name() -> None:
    a = slice_("a", node="node-1", pool="shared", count=2, devices=[dev("x")])
    b = slice_("b", node="node-2", pool="shared", count=2, devices=[dev("y")])
    (pool,) = pool_statuses(_inventory([a, b]))
    assert pool.node_name is None and pool.total_devices == 2


def test_a_request_filters_by_driver_and_pool_and_keeps_the_first_limit() -> None:
    slices = [slice_(f"s-{n}", node=f"node-{n}", devices=devs(1)) for n in (3, 1, 2)]
    slices.append(slice_("nic", driver=NIC, devices=devs(1)))
    inventory = _inventory(slices)
    answer = answer_request(inventory, {"driver": GPU, "limit": 2})
    assert answer.pool_count == 3
    assert [p.pool_name for p in answer.pools] == ["node-1", "node-2"]
    assert [p.pool_name for p in answer_request(inventory, {"driver": GPU, "poolName": "node-3"}).pools] == [
        "node-3"
    ]
    assert answer_request(inventory, {"driver": "none.example.com"}).pool_count == 0
    assert answer.incomplete == []
