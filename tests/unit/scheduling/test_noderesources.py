"""NodeResourcesFit's filter and LeastAllocated score, NodeResourcesBalancedAllocation: the
scenarios of upstream's fit_test.go (TestEnoughRequests, TestNotEnoughRequests,
TestStorageRequests), least_allocated_test.go and balanced_allocation_test.go."""

from __future__ import annotations

from typing import Any

import pytest

from draco.scheduling import framework, noderesources, profile
from draco.scheduling.noderesources import REASON_TOO_MANY_PODS, insufficient
from tests.unit.scheduling.rulekit import cluster, node, placed, pod, requests_pod, run_filter, run_score

A = "example.com/aaa"
B = "example.com/bbb"
K8S_A = "kubernetes.io/something"
K8S_B = "subdomain.kubernetes.io/something"
HUGE = "hugepages-2Mi"

#: upstream's test node: cpu 10m, memory 20, 32 pods, 5 of A, storage 20, 5 huge pages.
ALLOCATABLE = {"cpu": "10m", "memory": "20", "pods": "32", A: "5", "ephemeral-storage": "20", HUGE: "5"}


def r(cpu: int = 0, memory: int = 0, **more: Any) -> dict[str, str]:
    """Container requests in upstream's ``framework.Resource`` terms (cpu in millicores)."""
    names = {"a": A, "b": B, "k8s_a": K8S_A, "k8s_b": K8S_B, "huge": HUGE, "storage": "ephemeral-storage"}
    return {"cpu": f"{cpu}m", "memory": str(memory), **{names[k]: str(v) for k, v in more.items()}}


ENOUGH = [
    ("no resources requested always fits", pod(), r(10, 20), None),
    ("too many resources fails", requests_pod(r(1, 1)), r(10, 20), insufficient("cpu")),
    ("fails due to init container cpu", requests_pod(r(1, 1), init=[r(3, 1)]), r(8, 19), insufficient("cpu")),
    (
        "fails due to highest init container cpu",
        requests_pod(r(1, 1), init=[r(3, 1), r(2, 1)]),
        r(8, 19),
        insufficient("cpu"),
    ),
    (
        "fails due to init container memory",
        requests_pod(r(1, 1), init=[r(1, 3)]),
        r(9, 19),
        insufficient("memory"),
    ),
    (
        "fails due to highest init container memory",
        requests_pod(r(1, 1), init=[r(1, 3), r(1, 2)]),
        r(9, 19),
        insufficient("memory"),
    ),
    ("init container fits: the max, not the sum", requests_pod(r(1, 1), init=[r(1, 1)]), r(9, 19), None),
    ("multiple init containers fit", requests_pod(r(1, 1), init=[r(1, 1), r(1, 1)]), r(9, 19), None),
    ("both resources fit", requests_pod(r(1, 1)), r(5, 5), None),
    ("one resource memory fits", requests_pod(r(2, 1)), r(9, 5), insufficient("cpu")),
    ("one resource cpu fits", requests_pod(r(1, 2)), r(5, 19), insufficient("memory")),
    ("equal edge case", requests_pod(r(5, 1)), r(5, 19), None),
    ("equal edge case for init container", requests_pod(r(4, 1), init=[r(5, 1)]), r(5, 19), None),
    ("extended resource fits", requests_pod(r(a=1)), r(), None),
    ("extended resource fits for init container", requests_pod(init=[r(a=1)]), r(), None),
    ("extended resource capacity enforced", requests_pod(r(a=10)), r(a=0), insufficient(A)),
    (
        "extended resource capacity enforced for init container",
        requests_pod(init=[r(a=10)]),
        r(a=0),
        insufficient(A),
    ),
    ("extended resource allocatable enforced", requests_pod(r(a=1)), r(a=5), insufficient(A)),
    ("extended resource allocatable enforced for init", requests_pod(init=[r(a=1)]), r(a=5), insufficient(A)),
    (
        "extended resource enforced for multiple containers",
        requests_pod(r(a=3), r(a=3)),
        r(a=2),
        insufficient(A),
    ),
    ("extended resource admits multiple init containers", requests_pod(init=[r(a=3), r(a=3)]), r(a=2), None),
    (
        "extended resource enforced for multiple init containers",
        requests_pod(init=[r(a=6), r(a=3)]),
        r(a=2),
        insufficient(A),
    ),
    ("extended resource the node lacks", requests_pod(r(b=1)), r(), insufficient(B)),
    ("extended resource the node lacks, init container", requests_pod(init=[r(b=1)]), r(), insufficient(B)),
    ("kubernetes.io resource capacity enforced", requests_pod(r(k8s_a=10)), r(), insufficient(K8S_A)),
    (
        "kubernetes.io resource enforced for init container",
        requests_pod(init=[r(k8s_b=10)]),
        r(),
        insufficient(K8S_B),
    ),
    ("hugepages resource capacity enforced", requests_pod(r(1, 1, huge=10)), r(huge=0), insufficient(HUGE)),
    (
        "hugepages capacity enforced for init container",
        requests_pod(init=[r(1, 1, huge=10)]),
        r(huge=0),
        insufficient(HUGE),
    ),
    (
        "hugepages enforced for multiple containers",
        requests_pod(r(1, 1, huge=3), r(1, 1, huge=3)),
        r(huge=2),
        insufficient(HUGE),
    ),
    (
        "resources + pod overhead fits",
        requests_pod(r(1, 1), overhead={"cpu": "3m", "memory": "13"}),
        r(5, 5),
        None,
    ),
    (
        "requests + overhead does not fit for memory",
        requests_pod(r(1, 1), overhead={"cpu": "1m", "memory": "15"}),
        r(5, 5),
        insufficient("memory"),
    ),
    ("a zero request of a resource the node lacks is not checked", requests_pod(r(1, 1, b=0)), r(), None),
    (
        "both pod-level and container-level resources fit",
        requests_pod(r(1, 1), resources={"requests": {"cpu": "1m", "memory": "2"}}),
        r(5, 5),
        None,
    ),
    (
        "pod-level cpu resource not fit",
        requests_pod(r(1, 1), resources={"requests": {"cpu": "7m", "memory": "2"}}),
        r(5, 5),
        insufficient("cpu"),
    ),
    (
        "pod-level memory resource not fit",
        requests_pod(r(1, 1), resources={"requests": {"cpu": "3m", "memory": "2"}}),
        r(5, 19),
        insufficient("memory"),
    ),
    (
        "pod-level hugepages resource fit",
        pod(resources={"requests": {"cpu": "3m", "memory": "2", HUGE: "5"}}),
        None,
        None,
    ),
    (
        "pod-level hugepages replace the containers'",
        requests_pod(r(1, 1, huge=3), resources={"requests": {"cpu": "3m", "memory": "2", HUGE: "5"}}),
        None,
        None,
    ),
    (
        "pod-level hugepages resource not fit",
        pod(resources={"requests": {"cpu": "3m", "memory": "2", HUGE: "10"}}),
        None,
        insufficient(HUGE),
    ),
    # TestStorageRequests
    ("empty storage requested, and pod fits", requests_pod(r(1, 1)), r(2, 10), None),
    (
        "ephemeral storage request exceeds allocatable",
        requests_pod(r(storage=25)),
        r(2, 2),
        insufficient("ephemeral-storage"),
    ),
    ("ephemeral local storage is sufficient", requests_pod(init=[r(storage=5)]), r(2, 2, storage=10), None),
    ("ephemeral storage: pod fits", requests_pod(r(storage=10)), r(2, 2), None),
]


@pytest.mark.parametrize(("body", "existing", "reason"), [c[1:] for c in ENOUGH], ids=[c[0] for c in ENOUGH])
def test_fit_compares_every_requested_resource(
    body: dict[str, Any], existing: dict[str, str] | None, reason: str | None
) -> None:
    on_node = [placed(requests_pod(existing), "n")] if existing is not None else []
    snapshot = cluster([node("n", allocatable=ALLOCATABLE)], on_node)
    assert run_filter(noderesources.fit_filter, body, snapshot) == [reason]


NOT_ENOUGH = [
    ("even without specified resources", pod(), r(10, 20)),
    ("even if both resources fit", requests_pod(r(1, 1)), r(5, 5)),
    ("even for equal edge case", requests_pod(r(5, 1)), r(5, 19)),
    ("even for equal edge case due to init container", requests_pod(r(5, 1), init=[r(5, 1)]), r(5, 19)),
]


@pytest.mark.parametrize(("body", "existing"), [c[1:] for c in NOT_ENOUGH], ids=[c[0] for c in NOT_ENOUGH])
def test_fit_counts_the_pods_whatever_they_request(body: dict[str, Any], existing: dict[str, str]) -> None:
    snapshot = cluster(
        [node("n", allocatable={"cpu": "10m", "memory": "20", "pods": "1"})],
        [placed(requests_pod(existing), "n")],
    )
    assert run_filter(noderesources.fit_filter, body, snapshot) == [REASON_TOO_MANY_PODS]


def test_fit_refuses_a_node_without_allocatable_pods() -> None:
    """No ``pods`` allocatable means no room for a pod (upstream's ``AllowedPodNumber`` 0)."""
    snapshot = cluster(
        [node("n", allocatable={"cpu": "1", "memory": "1Gi"}), node("m", allocatable={"pods": "1"})]
    )
    assert run_filter(noderesources.fit_filter, requests_pod(r(1, 1)), snapshot) == [
        REASON_TOO_MANY_PODS,
        insufficient("cpu"),
    ]


def test_fit_reads_sidecars_beside_the_containers() -> None:
    """A restartable init container runs beside the containers: their requests add up."""
    body = pod(
        containers=[{"name": "c", "image": "x", "resources": {"requests": {"cpu": "6m"}}}],
        init=[
            {"name": "s", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "5m"}}}
        ],
    )
    snapshot = cluster([node("n", allocatable=ALLOCATABLE)])
    assert run_filter(noderesources.fit_filter, body, snapshot) == [insufficient("cpu")]


# --- LeastAllocated (NodeResourcesFit's score) --------------------------------------------


def capacity(name: str, cpu: str, memory: str) -> Any:
    return node(name, allocatable={"cpu": cpu, "memory": memory, "pods": "110"})


def on(node_name: str, cpu: str, memory: str) -> Any:
    return placed(requests_pod({"cpu": cpu, "memory": memory}), node_name)


BIG_REQUEST = requests_pod({"cpu": "1000", "memory": "2000"}, {"cpu": "2000", "memory": "3000"})

LEAST_ALLOCATED = [
    (
        "nothing scheduled, nothing requested",
        pod(),
        [("n1", "4000", "10000"), ("n2", "4000", "10000")],
        [],
        [100, 100],
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        BIG_REQUEST,
        [("n1", "4000", "10000"), ("n2", "6000", "10000")],
        [],
        [37, 50],
    ),
    (
        "no resources requested, pods without requests scheduled",
        pod(),
        [("n1", "4000", "10000"), ("n2", "4000", "10000")],
        [("n1", pod()), ("n1", pod()), ("n2", pod()), ("n2", pod())],
        [100, 100],
    ),
    (
        "no resources requested, pods scheduled with resources",
        pod(),
        [("n1", "10000", "20000"), ("n2", "10000", "20000")],
        [("n1", ("3000", "0")), ("n1", ("3000", "0")), ("n2", ("3000", "0")), ("n2", ("3000", "5000"))],
        [70, 57],
    ),
    (
        "resources requested, pods scheduled with resources",
        BIG_REQUEST,
        [("n1", "10000", "20000"), ("n2", "10000", "20000")],
        [("n1", ("3000", "0")), ("n2", ("3000", "5000"))],
        [57, 45],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        BIG_REQUEST,
        [("n1", "10000", "20000"), ("n2", "10000", "50000")],
        [("n1", ("3000", "0")), ("n2", ("3000", "5000"))],
        [57, 60],
    ),
    (
        "requested resources exceed node capacity",
        requests_pod({"cpu": "3000", "memory": "0"}),
        [("n1", "4000", "10000"), ("n2", "4000", "10000")],
        [("n1", ("3000", "0")), ("n2", ("3000", "5000"))],
        [50, 25],
    ),
    (
        "zero node resources, pods scheduled with resources",
        pod(),
        [("n1", "0", "0"), ("n2", "0", "0")],
        [("n1", ("3000", "0")), ("n2", ("3000", "5000"))],
        [0, 0],
    ),
]


@pytest.mark.parametrize(
    ("body", "nodes", "existing", "expected"),
    [c[1:] for c in LEAST_ALLOCATED],
    ids=[c[0] for c in LEAST_ALLOCATED],
)
def test_least_allocated_scores(body: Any, nodes: Any, existing: Any, expected: list[int]) -> None:
    pods = [
        placed(what, name) if isinstance(what, dict) else on(name, *what)  # a body, or (cpu, memory)
        for name, what in existing
    ]
    snapshot = cluster([capacity(*n) for n in nodes], pods)
    assert run_score(noderesources.fit_score, body, snapshot) == expected


def test_least_allocated_counts_missing_requests_as_defaults() -> None:
    """A container without requests counts 100m and 200Mi when scoring (never when filtering)."""
    snapshot = cluster(
        [capacity("n1", "1", "1000Mi"), capacity("n2", "1", "1000Mi")],
        [placed(pod(containers=[{"name": "c", "image": "x"}]), "n1")],
    )
    # n1: cpu (1000-100-100)/1000 = 80, memory (1000-200-200)/1000 = 60; n2: 90 and 80.
    assert run_score(noderesources.fit_score, pod(containers=[{"name": "c", "image": "x"}]), snapshot) == [
        70,
        85,
    ]


# --- NodeResourcesBalancedAllocation -------------------------------------------------------


def milli_node(name: str, milli_cpu: int, memory: int, **extended: int) -> Any:
    allocatable = {"cpu": f"{milli_cpu}m", "memory": str(memory), "pods": "110"}
    allocatable.update({k.replace("_", "/"): str(v) for k, v in extended.items()})
    return node(name, allocatable=allocatable)


CPU_AND_MEMORY = requests_pod({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"})
CPU_ONLY = requests_pod({"cpu": "1000m"}, {"cpu": "2000m"})

BALANCED = [
    (
        "nothing scheduled, resources requested, differently sized nodes",
        CPU_AND_MEMORY,
        [("n1", 4000, 10000), ("n2", 6000, 10000)],
        [],
        [68, 75],
    ),
    (
        "resources requested, pods scheduled with resources",
        CPU_AND_MEMORY,
        [("n1", 10000, 20000), ("n2", 10000, 20000)],
        [("n1", CPU_ONLY), ("n2", CPU_AND_MEMORY)],
        [73, 74],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        CPU_AND_MEMORY,
        [("n1", 10000, 20000), ("n2", 10000, 50000)],
        [("n1", CPU_ONLY), ("n2", CPU_AND_MEMORY)],
        [73, 70],
    ),
    (
        "nodes to reach min/max score",
        requests_pod({"memory": "2000"}, {"memory": "3000"}),
        [("n1", 3000, 5000), ("n2", 3000, 5000)],
        [("n1", CPU_ONLY)],
        [100, 50],
    ),
    (
        "requested resources at node capacity",
        CPU_ONLY,
        [("n1", 6000, 10000), ("n2", 6000, 10000)],
        [("n1", CPU_ONLY), ("n2", CPU_AND_MEMORY)],
        [62, 62],
    ),
    (
        "an extended resource the node has does not enter the default score",
        CPU_AND_MEMORY,
        [("n1", 3500, 40000), ("n2", 3500, 40000)],
        [],
        [56, 56],
    ),
]


@pytest.mark.parametrize(
    ("body", "nodes", "existing", "expected"), [c[1:] for c in BALANCED], ids=[c[0] for c in BALANCED]
)
def test_balanced_allocation_scores(body: Any, nodes: Any, existing: Any, expected: list[int]) -> None:
    snapshot = cluster([milli_node(*n) for n in nodes], [placed(b, name) for name, b in existing])
    assert run_score(noderesources.balanced_score, body, snapshot) == expected


def test_balanced_allocation_skips_a_pod_that_requests_nothing() -> None:
    snapshot = cluster([milli_node("n1", 4000, 10000), milli_node("n2", 4000, 10000)])
    assert run_score(noderesources.balanced_score, pod(), snapshot) is None
    assert run_score(noderesources.balanced_score, requests_pod({"nvidia.com/gpu": "1"}), snapshot) is None


def test_total_scores_weigh_each_rule() -> None:
    """Two nodes alike but for their free cpu: LeastAllocated (weight 1) and
    BalancedAllocation (weight 1) add up."""
    snapshot = cluster([milli_node("n1", 4000, 10000), milli_node("n2", 6000, 10000)])
    body = CPU_AND_MEMORY
    from tests.unit.scheduling.rulekit import info

    totals = framework.total_scores(
        [profile.plugin("NodeResourcesFit"), profile.plugin("NodeResourcesBalancedAllocation")],
        info(body),
        snapshot,
        list(snapshot.nodes.values()),
    )
    assert totals == [37 + 68, 50 + 75]


def test_the_inline_balance_is_the_general_one() -> None:
    """`balanced_score` scores nodes that report cpu and memory inline: the same numbers as
    `balanced_allocation_score`, over random nodes and pods."""
    import random

    from draco.scheduling.cluster import Snapshot
    from draco.scheduling.nodefit import NodeInfo
    from draco.scheduling.noderesources import balanced_allocation_score, balanced_score
    from draco.scheduling.podinfo import PodInfo

    rng = random.Random(7)
    for _ in range(200):
        nodes = [
            NodeInfo(
                name=f"n{i}",
                allocatable={
                    "cpu": rng.choice([1000, 4000, 64000]),
                    "memory": rng.choice([1 << 30, 512 << 30]),
                },
            )
            for i in range(4)
        ]
        placed = [
            PodInfo(
                uid=f"u{i}",
                namespace="ns",
                name=f"p{i}",
                node=f"n{rng.randrange(4)}",
                requests={"cpu": rng.randrange(0, 8000), "memory": rng.randrange(0, 64 << 30)},
            )
            for i in range(6)
        ]
        cluster = Snapshot(nodes={n.name: n for n in nodes}, pods=placed)
        pod = PodInfo(
            uid="new",
            namespace="ns",
            name="new",
            requests={"cpu": rng.randrange(1, 4000), "memory": rng.randrange(0, 16 << 30)},
        )
        scores = balanced_score(pod, cluster, nodes)
        assert scores is not None
        assert list(scores) == [balanced_allocation_score(pod, n, cluster) for n in nodes]
