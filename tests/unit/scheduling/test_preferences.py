"""The preference scores: TaintToleration (taint_toleration_test.go, TestTaintTolerationScore),
NodeAffinity (node_affinity_test.go, TestNodeAffinityPriority), ImageLocality
(image_locality_test.go, TestImageLocalityPriority), and the normalisation they share
(normalize_score_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from draco.scheduling import imagelocality, nodeaffinity, tainttoleration
from draco.scheduling.framework import MAX_NODE_SCORE
from draco.scheduling.imagelocality import normalized_image_name
from draco.scheduling.normalize import default_normalize
from tests.unit.scheduling.rulekit import cluster, node, pod, run_score


@pytest.mark.parametrize(
    ("scores", "reverse", "expected"),
    [
        ([10, 20, 30], False, [33, 66, 100]),
        ([10, 20, 30], True, [67, 34, 0]),
        ([0, 0, 0], False, [0, 0, 0]),
        ([0, 0, 0], True, [100, 100, 100]),
        ([1000, 10, 20, 30], False, [100, 1, 2, 3]),
        ([1000, 10, 20, 30], True, [0, 99, 98, 97]),
        ([1, 1, 1, 1], False, [100, 100, 100, 100]),
        ([1, 1, 1, 1], True, [0, 0, 0, 0]),
        ([], False, []),
    ],
)
def test_default_normalize(scores: list[int], reverse: bool, expected: list[int]) -> None:
    assert default_normalize(scores, maximum=MAX_NODE_SCORE, reverse=reverse) == expected


# --- TaintToleration ------------------------------------------------------------------------


def taint(key: str, value: str, effect: str = "PreferNoSchedule") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def toleration(key: str, value: str, effect: str = "PreferNoSchedule") -> dict[str, str]:
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


TAINTS = [
    (
        "tolerated taints score higher than intolerable ones",
        [toleration("foo", "bar")],
        [[taint("foo", "bar")], [taint("foo", "blah")]],
        [100, 0],
    ),
    (
        "nodes whose taints are all tolerated score alike, whatever their number",
        [toleration("cpu-type", "arm64"), toleration("disk-type", "ssd")],
        [[], [taint("cpu-type", "arm64")], [taint("cpu-type", "arm64"), taint("disk-type", "ssd")]],
        [100, 100, 100],
    ),
    (
        "the more intolerable taints, the lower the score",
        [toleration("foo", "bar")],
        [[], [taint("cpu-type", "arm64")], [taint("cpu-type", "arm64"), taint("disk-type", "ssd")]],
        [100, 50, 0],
    ),
    (
        "only PreferNoSchedule taints and the tolerations that can match them count",
        [toleration("cpu-type", "arm64", "NoSchedule"), toleration("disk-type", "ssd", "NoSchedule")],
        [
            [],
            [taint("cpu-type", "arm64", "NoSchedule")],
            [taint("cpu-type", "arm64"), taint("disk-type", "ssd")],
        ],
        [100, 100, 0],
    ),
    (
        "no taints and no tolerations: the node without taints",
        [],
        [[], [taint("cpu-type", "arm64")]],
        [100, 0],
    ),
    (
        "a toleration without effect tolerates PreferNoSchedule",
        [{"key": "foo", "operator": "Exists"}],
        [[taint("foo", "x")], [taint("bar", "x")]],
        [100, 0],
    ),
]


@pytest.mark.parametrize(
    ("tolerations", "taints", "expected"), [t[1:] for t in TAINTS], ids=[t[0] for t in TAINTS]
)
def test_taint_toleration_score(tolerations: Any, taints: Any, expected: list[int]) -> None:
    snapshot = cluster([node(f"node{i}", taints=t) for i, t in enumerate(taints)])
    assert (
        run_score(tainttoleration.taint_toleration_score, pod(tolerations=tolerations), snapshot) == expected
    )


def test_nodes_without_prefer_no_schedule_taints_score_alike() -> None:
    snapshot = cluster([node("a", taints=[taint("k", "v", "NoSchedule")]), node("b")])
    assert run_score(tainttoleration.taint_toleration_score, pod(), snapshot) is None


# --- NodeAffinity --------------------------------------------------------------------------


def preferred(*terms: tuple[int, dict[str, str]]) -> dict[str, Any]:
    """``affinity`` with preferred terms: (weight, {key: value} ANDed as ``In``)."""
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": weight,
                    "preference": {
                        "matchExpressions": [
                            {"key": k, "operator": "In", "values": [v]} for k, v in labels.items()
                        ]
                    },
                }
                for weight, labels in terms
            ]
        }
    }


LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}
AFFINITY1 = preferred((2, {"foo": "bar"}))
AFFINITY2 = preferred(
    (2, {"foo": "bar"}), (4, {"key": "value"}), (5, {"foo": "bar", "key": "value", "az": "az1"})
)

AFFINITIES = [
    ("no node matches: every node scores 0", AFFINITY1, [LABEL4, LABEL2, LABEL3], [0, 0, 0]),
    ("only node1 matches", AFFINITY1, [LABEL1, LABEL2, LABEL3], [100, 0, 0]),
    ("all nodes match with different priorities", AFFINITY2, [LABEL1, LABEL5, LABEL2], [18, 100, 36]),
]


@pytest.mark.parametrize(
    ("affinity", "labels", "expected"), [a[1:] for a in AFFINITIES], ids=[a[0] for a in AFFINITIES]
)
def test_node_affinity_score(affinity: Any, labels: Any, expected: list[int]) -> None:
    snapshot = cluster([node(f"node{i}", labels=label) for i, label in enumerate(labels)])
    assert run_score(nodeaffinity.node_affinity_score, pod(affinity=affinity), snapshot) == expected


def test_node_affinity_without_preferred_terms_scores_alike() -> None:
    snapshot = cluster([node("node1", labels=LABEL1), node("node2", labels=LABEL2)])
    assert run_score(nodeaffinity.node_affinity_score, pod(), snapshot) is None


def test_node_affinity_preferred_terms_can_match_fields() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 3,
                    "preference": {
                        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]
                    },
                },
                {"weight": 7, "preference": {}},
            ]
        }
    }
    snapshot = cluster([node("a"), node("b")])
    assert run_score(nodeaffinity.node_affinity_score, pod(affinity=affinity), snapshot) == [0, 100]


# --- ImageLocality -------------------------------------------------------------------------

MB = 1024 * 1024


def images(*entries: tuple[int, list[str]]) -> list[dict[str, Any]]:
    return [{"names": names, "sizeBytes": size * MB} for size, names in entries]


NODE_40_300_2000 = images(
    (40, ["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"]),
    (300, ["gcr.io/300:latest", "gcr.io/300:v1"]),
    (2000, ["gcr.io/2000:latest"]),
)
NODE_250_10 = images((250, ["gcr.io/250:latest"]), (10, ["gcr.io/10:latest", "gcr.io/10:v1"]))
NODE_600_40_900 = images(
    (600, ["gcr.io/600:latest"]), (40, ["gcr.io/40:latest"]), (900, ["gcr.io/900:latest"])
)
NODE_300_600_900 = images(
    (300, ["gcr.io/300:latest"]), (600, ["gcr.io/600:latest"]), (900, ["gcr.io/900:latest"])
)
NODE_4000_30 = images((4000, ["gcr.io/4000:latest"]), (30, ["gcr.io/30:latest"]))
NODE_20_30_40 = images((20, ["gcr.io/20:latest"]), (30, ["gcr.io/30:latest"]), (40, ["gcr.io/40:latest"]))


def image_pod(*names: str, init: tuple[str, ...] = (), volume: str | None = None) -> dict[str, Any]:
    body = pod(
        containers=[{"name": f"c{i}", "image": n} for i, n in enumerate(names)],
        init=[{"name": f"i{i}", "image": n} for i, n in enumerate(init)],
    )
    if volume is not None:
        body["spec"]["volumes"] = [{"name": "imageVolume", "image": {"reference": volume}}]
    return body


IMAGES = [
    (
        "two images spread on two nodes, prefer the larger",
        image_pod("gcr.io/40", "gcr.io/250"),
        [NODE_40_300_2000, NODE_250_10],
        [0, 5],
    ),
    (
        "two images on one node, prefer this node",
        image_pod("gcr.io/40", "gcr.io/300"),
        [NODE_40_300_2000, NODE_250_10],
        [7, 0],
    ),
    (
        "if exceed limit, use limit",
        image_pod("gcr.io/10", "gcr.io/4000"),
        [NODE_4000_30, NODE_250_10],
        [100, 0],
    ),
    (
        "if exceed limit, use limit (with a node without images)",
        image_pod("gcr.io/10", "gcr.io/4000"),
        [NODE_4000_30, NODE_250_10, []],
        [66, 0, 0],
    ),
    (
        "pod with multiple large images, node2 is preferred",
        image_pod("gcr.io/300", "gcr.io/600", "gcr.io/900"),
        [NODE_600_40_900, NODE_300_600_900, []],
        [32, 36, 0],
    ),
    (
        "pod with multiple small images",
        image_pod("gcr.io/30", "gcr.io/40"),
        [NODE_20_30_40, NODE_4000_30],
        [1, 0],
    ),
    (
        "pod with an image volume",
        image_pod("gcr.io/30", volume="gcr.io/300"),
        [NODE_300_600_900, NODE_4000_30],
        [6, 0],
    ),
    (
        "pod with images as containers",
        image_pod("gcr.io/30", "gcr.io/300"),
        [NODE_300_600_900, NODE_4000_30],
        [6, 0],
    ),
    (
        "pod with an image as init container",
        image_pod("gcr.io/30", init=("gcr.io/300",)),
        [NODE_300_600_900, NODE_4000_30],
        [6, 0],
    ),
]


@pytest.mark.parametrize(
    ("body", "node_images", "expected"), [i[1:] for i in IMAGES], ids=[i[0] for i in IMAGES]
)
def test_image_locality_score(body: Any, node_images: Any, expected: list[int]) -> None:
    snapshot = cluster([node(f"node{i}", images=held) for i, held in enumerate(node_images)])
    assert run_score(imagelocality.image_locality_score, body, snapshot) == expected


def test_image_locality_without_node_images_scores_alike() -> None:
    """Node records kept without ``status.images``: nothing to prefer."""
    snapshot = cluster([node("a"), node("b")])
    assert run_score(imagelocality.image_locality_score, image_pod("gcr.io/300"), snapshot) is None


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("gcr.io/300", "gcr.io/300:latest"),
        ("gcr.io/300:v1", "gcr.io/300:v1"),
        ("localhost:5000/app", "localhost:5000/app:latest"),
        ("localhost:5000/app:2", "localhost:5000/app:2"),
        ("nginx", "nginx:latest"),
    ],
)
def test_image_names_without_a_tag_are_latest(name: str, normalized: str) -> None:
    assert normalized_image_name(name) == normalized
