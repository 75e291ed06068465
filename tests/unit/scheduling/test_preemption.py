"""Preemption as a value (`draco.scheduling.preemption`), on snapshots: upstream's victim
selection and node order, devices freed only when no remaining pod holds them, groups
evicted whole, and nothing for a pod of equal or lower priority."""

from __future__ import annotations

from typing import Any

from draco.allocator import Inventory
from draco.allocator.outcome import Node
from draco.scheduling.cluster import Snapshot
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo, pod_info
from draco.scheduling.podplan import PodRequest
from draco.scheduling.preemption import (
    HeldClaim,
    NoPreemption,
    Preemption,
    budget_of,
    preempt,
    preempt_group,
)

DRIVER = "gpu.example.com"
CLASSES = [{"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}]


def node(name: str, cpu: int = 4000) -> NodeInfo:
    return NodeInfo(
        name=name,
        labels={"kubernetes.io/hostname": name},
        allocatable={"cpu": cpu, "memory": 32 << 30, "pods": 110},
    )


def gpu_slice(node_name: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node_name}-slice"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node_name,
            "devices": [{"name": f"gpu-{i}"} for i in range(count)],
        },
    }


def body(
    name: str,
    *,
    priority: int | None = None,
    cpu: str = "1",
    labels: dict[str, str] | None = None,
    started: str = "",
    **spec: Any,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **spec},
        "status": {"startTime": started} if started else {},
    }
    if priority is not None:
        pod["spec"]["priority"] = priority
    return pod


def running(name: str, on: str, **kw: Any) -> PodInfo:
    return pod_info(body(name, **kw), node=on)


def gpu_claim(name: str, node_name: str | None = None, device: str = "gpu-0") -> dict[str, Any]:
    claim: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]}
        },
    }
    if node_name is not None:
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device}]
                }
            }
        }
    return claim


def held(claim: dict[str, Any], *uids: str) -> HeldClaim:
    return HeldClaim(f"ns/{claim['metadata']['name']}", claim, frozenset(uids))


def request(pod: dict[str, Any], claims: list[dict[str, Any]] | None = None) -> PodRequest:
    return PodRequest(
        f"ns/{pod['metadata']['name']}", pod_info(pod), tuple(claims or ()), pod=pod, needs_node=True
    )  # type: ignore[arg-type]


def run(
    cluster: Snapshot,
    pod: dict[str, Any],
    *,
    claims: list[dict[str, Any]] | None = None,
    slices: list[dict[str, Any]] = (),  # type: ignore[assignment]
    held_claims: list[HeldClaim] = (),  # type: ignore[assignment]
    budgets: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> Preemption | NoPreemption:
    inventory = Inventory.build(
        classes=CLASSES, slices=list(slices), allocated_claims=[h.claim for h in held_claims]
    )
    before = {key: inventory.allocated_on_node(key) for key in cluster.node_names()}
    answer = preempt(
        request(pod, claims),
        cluster=cluster,
        names=sorted(cluster.node_names()),
        inventory=inventory,
        claims=held_claims,
        allocator_nodes=lambda chosen: [Node(n, cluster.nodes[n].labels) for n in chosen],
        budgets=[budget_of(b) for b in budgets],
    )
    # The inventory comes back as it came.
    assert {key: inventory.allocated_on_node(key) for key in cluster.node_names()} == before
    return answer


def victims(answer: Preemption | NoPreemption) -> list[str]:
    assert isinstance(answer, Preemption), answer
    return [v.pod.name for v in answer.victims]


def test_one_gpu_pod_evicts_exactly_the_one_low_priority_pod_holding_a_gpu() -> None:
    cluster = Snapshot(
        nodes={"a": node("a")}, pods=[running("low0", "a", priority=1), running("low1", "a", priority=1)]
    )
    c0, c1 = gpu_claim("c0", "a", "gpu-0"), gpu_claim("c1", "a", "gpu-1")
    answer = run(
        cluster,
        body("high", priority=100),
        claims=[gpu_claim("want")],
        slices=[gpu_slice("a", 2)],
        held_claims=[held(c0, "uid-low0"), held(c1, "uid-low1")],
    )
    assert isinstance(answer, Preemption) and answer.node == "a"
    assert len(answer.victims) == 1
    victim = answer.victims[0]
    assert victim.frees == (f"ns/{victim.pod.name.replace('low', 'c')}",)
    assert "priority 1 is lower than the preemptor's 100" in victim.why
    assert answer.plan is not None and answer.plan.allocations


def test_equal_or_lower_priority_never_preempts() -> None:
    cluster = Snapshot(nodes={"a": node("a", cpu=1000)}, pods=[running("other", "a", priority=5)])
    for priority in (5, 4):
        answer = run(cluster, body("p", priority=priority))
        assert isinstance(answer, NoPreemption), priority


def test_a_pod_without_priority_counts_zero() -> None:
    """A pod whose PriorityClass was gone (or never set) has no spec.priority: it counts 0,
    so it preempts nobody of priority 0 and is preempted by priority 1."""
    cluster = Snapshot(nodes={"a": node("a", cpu=1000)}, pods=[running("unset", "a")])
    assert isinstance(run(cluster, body("zero", priority=0)), NoPreemption)
    assert victims(run(cluster, body("one", priority=1))) == ["unset"]


def test_preemption_policy_never_evicts_nobody() -> None:
    cluster = Snapshot(nodes={"a": node("a", cpu=1000)}, pods=[running("low", "a", priority=0)])
    answer = run(cluster, body("p", priority=10, preemptionPolicy="Never"))
    assert isinstance(answer, NoPreemption) and "preemptionPolicy=Never" in answer.reason


def test_a_shared_claim_frees_its_device_only_when_every_consumer_goes() -> None:
    """Node a: one GPU held by a claim two low pods share. Node b: one GPU held by one low
    pod, all of priority 1. Evicting one sharer frees nothing, so b (one victim, sum 1) is
    chosen over a (two, sum 2)."""
    shared, alone = gpu_claim("shared", "a"), gpu_claim("alone", "b")
    cluster = Snapshot(
        nodes={"a": node("a"), "b": node("b")},
        pods=[
            running("s0", "a", priority=1),
            running("s1", "a", priority=1),
            running("solo", "b", priority=1),
        ],
    )
    answer = run(
        cluster,
        body("high", priority=10),
        claims=[gpu_claim("want")],
        slices=[gpu_slice("a", 1), gpu_slice("b", 1)],
        held_claims=[held(shared, "uid-s0", "uid-s1"), held(alone, "uid-solo")],
    )
    assert victims(answer) == ["solo"]
    # With b gone, both sharers go (neither alone frees the device).
    cluster_a = Snapshot(
        nodes={"a": node("a")}, pods=[running("s0", "a", priority=1), running("s1", "a", priority=1)]
    )
    answer = run(
        cluster_a,
        body("high", priority=10),
        claims=[gpu_claim("want")],
        slices=[gpu_slice("a", 1)],
        held_claims=[held(shared, "uid-s0", "uid-s1")],
    )
    assert victims(answer) == ["s0", "s1"]


def test_a_claim_shared_with_a_higher_priority_pod_frees_nothing() -> None:
    shared = gpu_claim("shared", "a")
    cluster = Snapshot(
        nodes={"a": node("a")}, pods=[running("low", "a", priority=1), running("top", "a", priority=50)]
    )
    answer = run(
        cluster,
        body("high", priority=10),
        claims=[gpu_claim("want")],
        slices=[gpu_slice("a", 1)],
        held_claims=[held(shared, "uid-low", "uid-top")],
    )
    assert isinstance(answer, NoPreemption)


def test_node_order_lowest_highest_victim_priority_then_sum_then_count() -> None:
    # a: one victim of priority 5; b: two of priorities 1 and 2 (highest 2 < 5): b wins.
    cluster = Snapshot(
        nodes={"a": node("a", cpu=1000), "b": node("b", cpu=1000)},
        pods=[
            running("a5", "a", priority=5),
            running("b1", "b", priority=1, cpu="500m"),
            running("b2", "b", priority=2, cpu="500m"),
        ],
    )
    assert victims(run(cluster, body("p", priority=10))) == ["b1", "b2"]
    # a: priorities 3 and 3 (sum 6); b: 3 and 1 (sum 4): equal highest, smaller sum wins.
    cluster = Snapshot(
        nodes={"a": node("a", cpu=1000), "b": node("b", cpu=1000)},
        pods=[
            running("a3", "a", priority=3, cpu="500m"),
            running("a3b", "a", priority=3, cpu="500m"),
            running("b3", "b", priority=3, cpu="500m"),
            running("b1", "b", priority=1, cpu="500m"),
        ],
    )
    assert victims(run(cluster, body("p", priority=10))) == ["b1", "b3"]


def test_fewest_victims_then_latest_start() -> None:
    # a: one victim of priority 0; b: two: highest and sum are equal, the count decides.
    cluster = Snapshot(
        nodes={"a": node("a", cpu=1000), "b": node("b", cpu=1000)},
        pods=[
            running("a0", "a", priority=0, cpu="1"),
            running("b0", "b", priority=0, cpu="500m"),
            running("b0b", "b", priority=0, cpu="500m"),
        ],
    )
    assert victims(run(cluster, body("p", priority=10))) == ["a0"]
    # Everything equal: the node whose victim started last.
    cluster = Snapshot(
        nodes={"a": node("a", cpu=1000), "b": node("b", cpu=1000)},
        pods=[
            running("old", "a", priority=0, started="2026-01-01T00:00:00Z"),
            running("new", "b", priority=0, started="2026-06-01T00:00:00Z"),
        ],
    )
    assert victims(run(cluster, body("p", priority=10))) == ["new"]


def test_victims_are_the_fewest_needed_the_most_important_reprieved_first() -> None:
    # The node holds 4 cpu: three low pods of 1 cpu each and one of 1 cpu at priority 3.
    # A 2-cpu pod needs two evicted (1 free): the most important (priority 3, then the
    # earliest started) are reprieved first.
    cluster = Snapshot(
        nodes={"a": node("a", cpu=4000)},
        pods=[
            running("p3", "a", priority=3),
            running("p1-old", "a", priority=1, started="2026-01-01T00:00:00Z"),
            running("p1-new", "a", priority=1, started="2026-06-01T00:00:00Z"),
        ],
    )
    assert victims(run(cluster, body("p", priority=10, cpu="2"))) == ["p1-new"]


PDB = {
    "metadata": {"name": "keep", "namespace": "ns"},
    "spec": {"selector": {"matchLabels": {"app": "kept"}}},
    "status": {"disruptionsAllowed": 0},
}


def test_a_pdb_is_respected_where_another_victim_exists() -> None:
    # a: a pod a PDB protects (priority 1); b: an unprotected one of priority 2 (a worse
    # victim by priority): fewest PDB violations comes first.
    cluster = Snapshot(
        nodes={"a": node("a", cpu=1000), "b": node("b", cpu=1000)},
        pods=[running("kept", "a", priority=1, labels={"app": "kept"}), running("free", "b", priority=2)],
    )
    assert victims(run(cluster, body("p", priority=10), budgets=[PDB])) == ["free"]
    assert victims(run(cluster, body("p", priority=10))) == ["kept"]


def test_on_one_node_the_pdb_protected_pod_is_reprieved_first() -> None:
    cluster = Snapshot(
        nodes={"a": node("a", cpu=2000)},
        pods=[running("kept", "a", priority=1, labels={"app": "kept"}), running("free", "a", priority=1)],
    )
    assert victims(run(cluster, body("p", priority=10), budgets=[PDB])) == ["free"]


def test_a_pdb_is_violated_when_nothing_else_helps() -> None:
    cluster = Snapshot(
        nodes={"a": node("a", cpu=1000)}, pods=[running("kept", "a", priority=1, labels={"app": "kept"})]
    )
    answer = run(cluster, body("p", priority=10), budgets=[PDB])
    assert isinstance(answer, Preemption) and answer.violations == 1
    assert answer.victims[0].violates == "ns/keep"


def test_a_group_is_a_victim_only_whole() -> None:
    """A running gang of two (one member per node) of low priority: evicting it to make
    room on a evicts both members; a single pod of the same priority on b is preferred
    (one victim), and a gang with a member of higher priority is not evicted at all."""
    gang = {"scheduling.draco.dev/pod-group": "train"}
    cluster = Snapshot(
        nodes={"a": node("a", cpu=1000), "b": node("b", cpu=1000)},
        pods=[running("g0", "a", priority=1, labels=gang), running("g1", "b", priority=1, labels=gang)],
    )
    answer = run(cluster, body("p", priority=10))
    assert victims(answer) == ["g0", "g1"]
    assert isinstance(answer, Preemption) and {v.group for v in answer.victims} == {"ns/train"}
    cluster = Snapshot(
        nodes={"a": node("a", cpu=1000), "b": node("b", cpu=1000)},
        pods=[running("g0", "a", priority=1, labels=gang), running("g1", "b", priority=20, labels=gang)],
    )
    assert isinstance(run(cluster, body("p", priority=10)), NoPreemption)


def test_a_gang_preempts_as_one_or_not_at_all() -> None:
    singles = [running(f"s{i}", f"n{i}", priority=1) for i in range(4)]
    nodes = {f"n{i}": node(f"n{i}", cpu=1000) for i in range(4)}
    members = [body(f"m{i}", priority=10, labels={"scheduling.draco.dev/pod-group": "g"}) for i in range(4)]

    def group(cluster: Snapshot) -> tuple[Preemption, ...] | NoPreemption:
        inventory = Inventory.build(classes=CLASSES, slices=[])
        return preempt_group(
            [request(m) for m in members],
            cluster=cluster,
            names=lambda _: sorted(cluster.node_names()),
            inventory=inventory,
            claims=[],
            allocator_nodes=lambda chosen: [Node(n, cluster.nodes[n].labels) for n in chosen],
        )

    answers = group(Snapshot(nodes=nodes, pods=singles))
    assert not isinstance(answers, NoPreemption)
    assert sorted(v.pod.name for a in answers for v in a.victims) == ["s0", "s1", "s2", "s3"]
    assert sorted(a.node for a in answers) == ["n0", "n1", "n2", "n3"]
    # One single pod is of higher priority than the gang: three would fit, not four: none.
    singles[3] = running("s3", "n3", priority=50)
    answer = group(Snapshot(nodes=nodes, pods=singles))
    assert isinstance(answer, NoPreemption) and "whole" in answer.reason
