"""When a waiting pod is tried again: its backoff after failed attempts (1 s doubling to
10 s, reset once allocated), the capacity changes that wake it (only those that may help),
and the changes an attempt missed while it ran. Virtual time throughout: the clock is a
number the tests move."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from draco.allocator.inventory import Inventory
from draco.operator.scheduler.waiting import RECENT_CHANGES, WaitingPods
from draco.scheduling.view import ClusterView
from draco.scheduling.wakeups import (
    CLAIMS_ONLY,
    EVERYTHING,
    UNKNOWN,
    CapacityChange,
    Interest,
    backoff_s,
    interest_of,
)
from tests.unit.operator.test_view import claim, cluster, node_slice, pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def waiting() -> tuple[WaitingPods, Clock, list[tuple[str, float]]]:
    clock = Clock()
    queued: list[tuple[str, float]] = []
    pods = WaitingPods(lambda key, delay: queued.append((key, delay)), clock=clock)
    return pods, clock, queued


GPU_POOL = CapacityChange(freed=frozenset({("gpu.example.com", "n1")}))
NIC_POOL = CapacityChange(freed=frozenset({("nic.example.com", "n1")}))


def test_backoff_doubles_from_one_second_to_ten() -> None:
    assert [backoff_s(n) for n in range(7)] == [0.0, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff_s(10_000) == 10.0


def test_a_failed_pod_is_woken_no_sooner_than_its_backoff_allows() -> None:
    pods, clock, queued = waiting()
    interest = Interest(pools=frozenset({("gpu.example.com", "n1")}), drivers=frozenset({"gpu.example.com"}))
    assert pods.failed("ns/p") == (1, 1.0)
    pods.wait("ns/p", frozenset({"ns/c"}), interest)
    clock.now += 0.25
    pods.capacity_changed(GPU_POOL)
    pods.claim_changed("ns/c")
    assert queued == [("ns/p", 0.75), ("ns/p", 0.75)]
    queued.clear()
    clock.now += 1
    pods.capacity_changed(GPU_POOL)
    assert queued == [("ns/p", 0.0)], "past the backoff: at once"


def test_each_failure_doubles_the_wait_and_allocation_resets_it() -> None:
    pods, clock, _ = waiting()
    delays = []
    for _ in range(6):
        _, delay = pods.failed("ns/p")
        delays.append(delay)
        assert pods.backoff_left("ns/p") == delay
        clock.now += delay
        assert pods.backoff_left("ns/p") == 0.0
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    pods.succeeded("ns/p")
    assert pods.failed("ns/p") == (1, 1.0)
    pods.forget("ns/p")
    assert pods.failures == {} and pods.backoff_left("ns/p") == 0.0


def test_a_pod_is_attempted_at_most_once_per_backoff_step_under_churn() -> None:
    """A claim that churns every 50 ms in the pod's own pools: the pod is queued for the
    end of its backoff each time, so a queue that keeps the earliest deadline runs it once
    per step."""
    pods, clock, queued = waiting()
    interest = Interest(pools=frozenset({("gpu.example.com", "n1")}), drivers=frozenset({"gpu.example.com"}))
    start = clock.now
    attempts: list[float] = []
    due: float | None = start  # the first attempt
    while clock.now < start + 60:
        if due is not None and clock.now >= due:
            due = None
            attempts.append(clock.now - start)
            pods.failed("ns/p")
            pods.wait("ns/p", frozenset(), interest)
        pods.capacity_changed(GPU_POOL)  # the churn: every 50 ms
        for _key, delay in queued:
            due = clock.now + delay if due is None else min(due, clock.now + delay)
        queued.clear()
        clock.now += 0.05
    assert len(attempts) <= 9  # at 0, 1, 3, 7, 15, 25, 35, 45, 55 s
    steps = [b - a for a, b in itertools.pairwise(attempts)]
    assert all(
        step >= expected - 0.051 for step, expected in zip(steps, [1, 2, 4, 8, 10, 10, 10, 10], strict=False)
    )


def test_a_change_wakes_only_the_pods_it_may_help() -> None:
    pods, _, queued = waiting()
    gpu = Interest(
        pools=frozenset({("gpu.example.com", "n1")}),
        drivers=frozenset({"gpu.example.com"}),
        classes=frozenset({"gpu"}),
    )
    nic = Interest(
        pools=frozenset({("nic.example.com", "n1")}),
        drivers=frozenset({"nic.example.com"}),
        classes=frozenset({"nic"}),
    )
    pods.wait("ns/gpu", frozenset(), gpu)
    pods.wait("ns/nic", frozenset(), nic)
    pods.wait("ns/cpu", frozenset(), Interest(node_resources=True))
    pods.wait("ns/claims", frozenset({"ns/c"}), CLAIMS_ONLY)
    pods.wait("ns/first", frozenset(), UNKNOWN)
    pods.wait("ns/none", frozenset(), Interest(classes=frozenset({"fpga"}), unmatched=True))

    def woken(change: CapacityChange) -> set[str]:
        queued.clear()
        pods.capacity_changed(change)
        return {key for key, _ in queued}

    assert woken(GPU_POOL) == {"ns/gpu", "ns/first"}
    assert woken(NIC_POOL) == {"ns/nic", "ns/first"}
    assert woken(CapacityChange(freed=frozenset({("gpu.example.com", "n2")}))) == {"ns/first"}
    # A slice of a driver the pod uses (a new pool too), or any slice for a pod whose
    # request matched nothing at all.
    assert woken(CapacityChange(slices=frozenset({("gpu.example.com", "n9")}))) == {
        "ns/gpu",
        "ns/first",
        "ns/none",
    }
    assert woken(CapacityChange(classes=frozenset({"fpga"}))) == {"ns/none", "ns/first"}
    assert woken(CapacityChange(node_resources=True)) == {"ns/cpu", "ns/first"}
    assert woken(EVERYTHING) == {"ns/gpu", "ns/nic", "ns/cpu", "ns/claims", "ns/first", "ns/none"}
    assert woken(CapacityChange()) == {"ns/first"}
    pods.stop("ns/first")
    assert woken(GPU_POOL | NIC_POOL) == {"ns/gpu", "ns/nic"}


def test_an_attempt_learns_of_the_changes_it_missed_that_may_help_it() -> None:
    pods, _, _ = waiting()
    gpu = Interest(pools=frozenset({("gpu.example.com", "n1")}))
    mark = pods.mark()
    assert not pods.missed(mark, gpu)
    pods.note(NIC_POOL)
    assert not pods.missed(mark, gpu), "a change elsewhere is no reason to look again"
    pods.note(GPU_POOL)
    assert pods.missed(mark, gpu)
    mark = pods.mark()
    for _ in range(RECENT_CHANGES + 1):
        pods.note(NIC_POOL)
    assert pods.missed(mark, gpu), "older than what is remembered: assume it helps"


def test_an_attempt_learns_that_one_of_its_claims_changed_meanwhile() -> None:
    """On its first attempt a pod waits on nothing yet: a binding condition its node agent
    reports while the attempt still runs wakes nobody, so the attempt asks when it ends."""
    pods, _, queued = waiting()
    mark = pods.mark()
    pods.claim_changed("ns/other")
    assert not pods.missed(mark, CLAIMS_ONLY, frozenset({"ns/c"}))
    pods.claim_changed("ns/c")
    assert queued == [], "nobody waited on it yet"
    assert pods.missed(mark, CLAIMS_ONLY, frozenset({"ns/c"}))
    assert not pods.missed(pods.mark(), CLAIMS_ONLY, frozenset({"ns/c"}))


def test_an_attempt_learns_that_a_claim_was_generated_for_its_pod_meanwhile() -> None:
    """A pod whose claim-statuses annotation names a claim that is gone waits, on its first
    attempt, on that old name; the claim the lifecycle makes for it meanwhile has a new one.
    Its arrival must bring the attempt back, or the pod waits in silence."""
    pods, _, queued = waiting()
    mark = pods.mark()
    pods.claim_generated("ns/other")
    assert not pods.missed(mark, CLAIMS_ONLY, frozenset({"ns/old"}), pod_key="ns/p")
    pods.claim_generated("ns/p")
    assert queued == [], "it did not wait yet: its attempt asks when it ends"
    assert pods.missed(mark, CLAIMS_ONLY, frozenset({"ns/old"}), pod_key="ns/p")
    assert not pods.missed(pods.mark(), CLAIMS_ONLY, frozenset({"ns/old"}), pod_key="ns/p")
    pods.wait("ns/p", frozenset({"ns/old"}), CLAIMS_ONLY)
    pods.claim_generated("ns/p")
    assert queued == [("ns/p", 0.0)], "once it waits, the new claim wakes it"
    pods.succeeded("ns/p")
    assert not pods.missed(mark, CLAIMS_ONLY, frozenset({"ns/old"}), pod_key="ns/p"), (
        "allocated, it is forgotten (one record per pod would stay for each pod placed)"
    )


def inventory_of(view: ClusterView) -> Inventory:
    inventory = view.inventory()
    return inventory


def pending(device_class: str, **request: Any) -> dict[str, Any]:
    body = claim("p")
    body["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": device_class, **request}
    return body


def test_the_interest_of_a_pod_names_the_pools_and_drivers_its_requests_match() -> None:
    view = cluster(devices=2)
    other = node_slice("n2", 1)
    other["spec"]["driver"] = "nic.example.com"
    view.upsert_slice(other)
    view.upsert_class({"metadata": {"name": "any"}, "spec": {}})
    inventory = inventory_of(view)
    gpu = interest_of(inventory, [pending("gpu", count=5)], node_resources=False)
    assert gpu == Interest(
        pools=frozenset({("gpu.example.com", "n1")}),
        drivers=frozenset({"gpu.example.com"}),
        classes=frozenset({"gpu"}),
    )
    everything = interest_of(inventory, [pending("any")], node_resources=True)
    assert everything.pools == {("gpu.example.com", "n1"), ("nic.example.com", "n2")}
    assert everything.node_resources
    missing = interest_of(inventory, [pending("nope")], node_resources=False)
    assert missing.unmatched and missing.classes == {"nope"}
    none = interest_of(
        inventory, [pending("gpu", selectors=[{"cel": {"expression": "false"}}])], node_resources=False
    )
    assert none.unmatched and not none.pools
    broken = interest_of(
        inventory, [pending("gpu", selectors=[{"cel": {"expression": "device.("}}])], node_resources=False
    )
    assert broken.unmatched


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("release", CapacityChange(freed=frozenset({("gpu.example.com", "n1")}))),
        ("slice", CapacityChange(slices=frozenset({("gpu.example.com", "n1")}))),
        ("class", CapacityChange(classes=frozenset({"gpu"}))),
        ("node", EVERYTHING),
        ("pod", CapacityChange(node_resources=True, pods=True)),
        ("abandon", CapacityChange(freed=frozenset({("gpu.example.com", "n1")}))),
        ("rule", EVERYTHING),
    ],
)
def test_the_view_says_what_changed(change: str, expected: CapacityChange) -> None:
    view = cluster(devices=2)
    view.upsert_claim(claim("a", rv=2, devices=("gpu-0",)))
    view.upsert_pod(pod("placed", node_name="n1"))
    allocation = claim("b", devices=("gpu-1",))["status"]["allocation"]
    view.begin({"ns/b": allocation})
    seen: list[CapacityChange] = []
    view.on_change(seen.append)
    if change == "release":
        view.upsert_claim(claim("a", rv=3))
    elif change == "slice":
        view.upsert_slice(node_slice("n1", 3))
    elif change == "class":
        view.upsert_class({"metadata": {"name": "gpu"}, "spec": {}})
    elif change == "pod":
        view.delete_pod("ns/placed")
    elif change == "abandon":
        view.abandon(["ns/b"])
    elif change == "rule":
        view.upsert_taint_rule(
            {"metadata": {"name": "r"}, "spec": {"taint": {"key": "k", "effect": "NoSchedule"}}}
        )
    else:
        view.upsert_node({"metadata": {"name": "n3"}, "status": {"allocatable": {"cpu": "1"}}})
    assert seen == [expected]
