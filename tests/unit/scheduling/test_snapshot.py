"""Snapshot: a pod placed after it was built counts as one listed placed."""

from __future__ import annotations

import pytest

from draco.scheduling.podinfo import pod_info
from tests.unit.scheduling.rulekit import cluster, container, node, placed, pod


def test_a_placed_pod_counts_on_its_node_like_a_listed_one() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    first = pod(
        "first",
        containers=[container(requests={"cpu": "500m", "example.com/gpu": "1"}, ports=["TCP/0.0.0.0/80"])],
        affinity=anti,
    )
    first["metadata"]["labels"] = {"app": "web"}
    listed = cluster([node("a"), node("b")], [placed(first, "a")])
    later = cluster([node("a"), node("b")])
    later.place(placed(first, "a"))
    for state in (listed, later):
        assert state.requested("a") == {"cpu": 500, "example.com/gpu": 1, "pods": 1}
        assert state.requested("b") == {}
        assert state.requested_nonzero("a") == (500, 200 * 1024 * 1024)
        assert [p.name for p in state.pods_on("a")] == ["first"]
        assert [p.name for p in state.pods_in("default")] == ["first"]
        assert [p.name for p in state.pods_with_affinity()] == ["first"]
        assert [p.name for p in state.pods_with_required_anti_affinity()] == ["first"]
    later.place(placed(pod("second", containers=[container(requests={"cpu": "1"})]), "a"))
    assert later.requested("a") == {"cpu": 1500, "example.com/gpu": 1, "pods": 2}
    assert [p.name for p in later.pods_in("default")] == ["first", "second"]


def test_only_a_pod_with_a_node_can_be_placed() -> None:
    state = cluster([node("a")])
    with pytest.raises(ValueError, match="not placed on a node"):
        state.place(pod_info(pod("nowhere")))
