"""PodTopologySpread: the scenarios of upstream's filtering and scoring tests (Kubernetes
1.37), rewritten as tables, plus the system default constraints."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from draco.scheduling import profile
from draco.scheduling.cluster import Snapshot
from draco.scheduling.labels import label_selector
from draco.scheduling.nodefit import NodeInfo, NodeTaint
from draco.scheduling.podinfo import ControllerRef, PodInfo
from draco.scheduling.topologyspread import (
    NAME,
    REASON_MISSING_LABEL,
    REASON_SKEW,
    default_selector,
    prepare_filter,
    prepare_score,
)
from tests.unit.scheduling.podkit import cluster, incoming, node, placed, scores, selector, spread, verdicts

SKEW, MISSING = REASON_SKEW, REASON_MISSING_LABEL
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
FOO, BAR = selector({"foo": ""}), selector({"bar": ""})
HARD, SOFT = "DoNotSchedule", "ScheduleAnyway"
TAINTED = (NodeTaint("node.kubernetes.io/unschedulable", "", "NoSchedule"),)


def zn(name: str, zone: str | None = "", *, node_label: bool = True, **labels: str) -> NodeInfo:
    """A node in ``zone`` (label ``zone``) carrying ``node: <name>``; None: no zone label."""
    all_labels = {
        **({"zone": zone} if zone is not None else {}),
        **({"node": name} if node_label else {}),
        **labels,
    }
    return node(name, all_labels)


def four(**extra: dict[str, str]) -> list[NodeInfo]:
    """node-a, node-b in zone1; node-x, node-y in zone2 (``extra`` labels per node)."""
    zones = {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"}
    return [
        node(name, {"zone": zone, "node": name, **extra.get(name.replace("-", "_"), {})})
        for name, zone in zones.items()
    ]


def on(*placements: tuple[str, dict[str, str]], **kwargs: Any) -> list[PodInfo]:
    return [placed(f"e{i}", where, labels=labels, **kwargs) for i, (where, labels) in enumerate(placements)]


F, B, FB = {"foo": ""}, {"bar": ""}, {"foo": "", "bar": ""}


@dataclass
class Case:
    pod: dict[str, Any]
    nodes: list[NodeInfo]
    pods: list[PodInfo]
    want: Mapping[str, str | None] | None
    namespaces: dict[str, dict[str, str]] = field(default_factory=lambda: {"default": {}, "ns2": {}})


def _run(case: Case) -> None:
    state = cluster(case.nodes, case.pods, namespaces=case.namespaces)
    assert verdicts(prepare_filter, incoming(**case.pod), state) == case.want


def _one(max_skew: int, key: str, sel: dict[str, Any] | None = FOO, **extra: Any) -> dict[str, Any]:
    return spread(max_skew, key, HARD, sel, **extra)


def _required(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression = {"key": key, "operator": operator, "values": list(values)}
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expression]}]
        }
    }


def _required_in(key: str, *values: str) -> dict[str, Any]:
    return _required(key, "In", *values)


A_B_0_3 = on(("node-a", F), ("node-a", F), ("node-b", F), ("node-y", F), ("node-y", F), ("node-y", F))
ALL_FIT = {"node-a": None, "node-b": None, "node-x": None, "node-y": None}

SINGLE = {
    "no existing pods": Case({"labels": F, "constraints": [_one(1, "zone")]}, four(), [], ALL_FIT),
    "no existing pods, the pod does not match itself": Case(
        {"labels": F, "constraints": [_one(1, "zone", BAR)]}, four(), [], ALL_FIT
    ),
    "pods of another namespace do not count": Case(
        {"labels": F, "constraints": [_one(1, "zone")]},
        four(),
        on(("node-x", F), ("node-y", F), namespace="ns2"),
        ALL_FIT,
    ),
    "a null selector matches no pod": Case(
        {"labels": F, "constraints": [_one(1, "zone", None)]},
        four(),
        on(("node-x", F), ("node-y", F)),
        ALL_FIT,
    ),
    "3/3 across zones: every node fits": Case(
        {"labels": F, "constraints": [_one(1, "zone")]},
        four(),
        on(("node-a", F), ("node-a", F), ("node-b", F), ("node-y", F), ("node-y", F), ("node-y", F)),
        ALL_FIT,
    ),
    "1/2 across zones, node-b without the zone label": Case(
        {"labels": F, "constraints": [_one(1, "zone")]},
        [
            zn("node-a", "zone1"),
            zn("node-b", None, zon="zone1"),
            zn("node-x", "zone2"),
            zn("node-y", "zone2"),
        ],
        on(("node-a", F), ("node-b", F), ("node-x", F), ("node-y", F)),
        {"node-a": None, "node-b": MISSING, "node-x": SKEW, "node-y": SKEW},
    ),
    "no node has the key": Case(
        {"labels": F, "constraints": [_one(1, "rack")]},
        [zn("node-a", "zone1"), zn("node-x", "zone2")],
        [],
        {"node-a": MISSING, "node-x": MISSING},
    ),
    "2/1/0/3 across nodes: only node-x fits": Case(
        {"labels": F, "constraints": [_one(1, "node")]},
        four(),
        A_B_0_3,
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
    "2/1/0/3 with maxSkew 2: node-b and node-x fit": Case(
        {"labels": F, "constraints": [_one(2, "node")]},
        four(),
        A_B_0_3,
        {"node-a": SKEW, "node-b": None, "node-x": None, "node-y": SKEW},
    ),
    "2/1/0/3, the pod does not match itself": Case(
        {"labels": B, "constraints": [_one(1, "node")]},
        four(),
        A_B_0_3,
        {"node-a": SKEW, "node-b": None, "node-x": None, "node-y": SKEW},
    ),
    "node affinity leaves node-b and node-x out: 2/~1~/~0~/3": Case(
        {
            "labels": F,
            "constraints": [_one(1, "node")],
            "node_affinity": _required_in("node", "node-a", "node-y"),
        },
        four(),
        A_B_0_3,
        {"node-a": None, "node-b": None, "node-x": None, "node-y": SKEW},
    ),
    "terminating pods do not count": Case(
        {"labels": F, "constraints": [_one(1, "node")]},
        [zn("node-a", None), zn("node-b", None)],
        [*on(("node-a", F), terminating=True), *on(("node-b", F))],
        {"node-a": None, "node-b": SKEW},
    ),
    "node affinity leaves node-b out: 0/~2~/0/1 by zone": Case(
        {
            "labels": F,
            "constraints": [_one(1, "zone")],
            "node_affinity": _required("node", "NotIn", "node-b"),
        },
        four(),
        on(("node-b", F), ("node-b", F), ("node-y", F)),
        {"node-a": None, "node-b": None, "node-x": SKEW, "node-y": SKEW},
    ),
    "2/2/1 by node, fewer domains than minDomains: the minimum is 0": Case(
        {"labels": F, "constraints": [_one(2, "node", minDomains=4)]},
        [zn("node-a", None), zn("node-b", None), zn("node-c", None)],
        on(("node-a", F), ("node-a", F), ("node-b", F), ("node-b", F), ("node-c", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-c": None},
    ),
    "2/2/1 by node, more domains than minDomains": Case(
        {"labels": F, "constraints": [_one(2, "node", minDomains=2)]},
        [zn("node-a", None), zn("node-b", None), zn("node-c", None)],
        on(("node-a", F), ("node-a", F), ("node-b", F), ("node-b", F), ("node-c", F)),
        {"node-a": None, "node-b": None, "node-c": None},
    ),
    "2/1 by zone, fewer domains than minDomains": Case(
        {"labels": F, "constraints": [_one(2, "zone", minDomains=3)]},
        four(),
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": None},
    ),
    "2/1 by zone, as many domains as minDomains": Case(
        {"labels": F, "constraints": [_one(2, "zone", minDomains=1)]},
        four(),
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        ALL_FIT,
    ),
    "nodeAffinityPolicy Honor (node selector): 1/1/0/~1~": Case(
        {"labels": F, "constraints": [_one(1, "node")], "nodeSelector": {"foo": ""}},
        four(node_a=F, node_b=F, node_x=F),
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": None},
    ),
    "nodeAffinityPolicy Ignore (node selector): 1/1/0/1": Case(
        {
            "labels": F,
            "constraints": [_one(1, "node", nodeAffinityPolicy="Ignore")],
            "nodeSelector": {"foo": ""},
        },
        four(node_a=F, node_b=F, node_x=F),
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
    "nodeAffinityPolicy Honor (node affinity): 1/1/0/~1~": Case(
        {
            "labels": F,
            "constraints": [_one(1, "node")],
            "node_affinity": _required_in("foo", ""),
        },
        four(node_a=F, node_b=F, node_x=F),
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": None},
    ),
    "nodeAffinityPolicy Ignore (node affinity): 1/1/0/1": Case(
        {
            "labels": F,
            "constraints": [_one(1, "node", nodeAffinityPolicy="Ignore")],
            "node_affinity": _required_in("foo", ""),
        },
        four(node_a=F, node_b=F, node_x=F),
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
    "nodeTaintsPolicy Honor: 1/1/0/~1~": Case(
        {"labels": F, "constraints": [_one(1, "node", nodeTaintsPolicy="Honor")]},
        [*four()[:3], NodeInfo("node-y", {"zone": "zone2", "node": "node-y"}, taints=TAINTED)],
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": None},
    ),
    "nodeTaintsPolicy Ignore (the default): 1/1/0/1": Case(
        {"labels": F, "constraints": [_one(1, "node")]},
        [*four()[:3], NodeInfo("node-y", {"zone": "zone2", "node": "node-y"}, taints=TAINTED)],
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
}


@pytest.mark.parametrize("case", SINGLE.values(), ids=SINGLE.keys())
def test_single_constraint(case: Case) -> None:
    _run(case)


ZONE_NODE = [_one(1, "zone"), _one(1, "node")]
ZONE_FOO_NODE_BAR = [_one(1, "zone"), _one(1, "node", BAR)]
NONE_FIT = {"node-a": SKEW, "node-b": SKEW, "node-x": SKEW, "node-y": SKEW}

MULTIPLE = {
    "zone and node, [3/3, 2/1/0/3]": Case(
        {"labels": F, "constraints": ZONE_NODE},
        four(),
        A_B_0_3,
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
    "zone and node, [3/4, 2/1/0/4]: no node": Case(
        {"labels": F, "constraints": ZONE_NODE}, four(), [*A_B_0_3, *on(("node-y", F))], NONE_FIT
    ),
    "different selectors, [1/0, 1/0/0/1]": Case(
        {"labels": FB, "constraints": ZONE_FOO_NODE_BAR},
        four(),
        on(("node-a", F), ("node-y", B)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
    "different selectors, [1/0, 0/0/1/1]: no node": Case(
        {"labels": FB, "constraints": ZONE_FOO_NODE_BAR},
        four(),
        on(("node-a", F), ("node-x", B), ("node-y", B)),
        NONE_FIT,
    ),
    "different selectors, [2/3, 1/0/0/1]": Case(
        {"labels": FB, "constraints": ZONE_FOO_NODE_BAR},
        four(),
        on(("node-a", F), ("node-a", FB), ("node-y", F), ("node-y", FB), ("node-y", F)),
        {"node-a": SKEW, "node-b": None, "node-x": SKEW, "node-y": SKEW},
    ),
    "different selectors, the pod does not match the zone one": Case(
        {"labels": B, "constraints": ZONE_FOO_NODE_BAR},
        four(),
        on(("node-a", F), ("node-x", B), ("node-y", B)),
        {"node-a": None, "node-b": None, "node-x": SKEW, "node-y": SKEW},
    ),
    "zone and node, node-x without the node label": Case(
        {"labels": F, "constraints": ZONE_NODE},
        [
            zn("node-a", "zone1"),
            zn("node-b", "zone1"),
            zn("node-x", "zone2", node_label=False),
            zn("node-y", "zone2"),
        ],
        on(("node-a", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": None, "node-x": MISSING, "node-y": SKEW},
    ),
    "inclusion policies, zone Honor/Ignore, node Ignore/Ignore": Case(
        {
            "labels": F,
            "nodeSelector": F,
            "constraints": [_one(1, "zone"), _one(1, "node", nodeAffinityPolicy="Ignore")],
        },
        four(node_a=F, node_b=F, node_x=F),
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
    "inclusion policies, zone Honor/Honor, node Honor/Ignore": Case(
        {"labels": F, "constraints": [_one(1, "zone", nodeTaintsPolicy="Honor"), _one(1, "node")]},
        [
            *four(node_a=F, node_b=F, node_x=F)[:3],
            NodeInfo("node-y", {"zone": "zone2", "node": "node-y"}, taints=TAINTED),
        ],
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
    "inclusion policies, zone Honor/Ignore, node Honor/Ignore": Case(
        {"labels": F, "nodeSelector": F, "constraints": ZONE_NODE},
        [
            zn("node-a", "zone1", foo=""),
            zn("node-b", "zone1"),
            zn("node-x", "zone2", foo=""),
            NodeInfo("node-y", {"zone": "zone2", "node": "node-y", "foo": ""}, taints=TAINTED),
        ],
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": None, "node-x": None, "node-y": SKEW},
    ),
    "inclusion policies, zone Honor/Honor, node Ignore/Ignore": Case(
        {
            "labels": F,
            "nodeSelector": F,
            "constraints": [
                _one(1, "zone", nodeTaintsPolicy="Honor"),
                _one(1, "node", nodeAffinityPolicy="Ignore"),
            ],
        },
        [
            zn("node-a", "zone1", foo=""),
            zn("node-b", "zone1"),
            zn("node-x", "zone2", foo=""),
            NodeInfo("node-y", {"zone": "zone2", "node": "node-y", "foo": ""}, taints=TAINTED),
        ],
        on(("node-a", F), ("node-b", F), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": SKEW},
    ),
    "two constraints on zone, [3/3, 2/1]": Case(
        {"labels": FB, "constraints": [_one(1, "zone", BAR), _one(1, "zone")]},
        four(),
        on(("node-a", FB), ("node-a", F), ("node-b", FB), ("node-y", F), ("node-y", FB), ("node-y", F)),
        {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": None},
    ),
    "two constraints on zone, [3/4, 2/1]: no node": Case(
        {"labels": FB, "constraints": [_one(1, "zone", BAR), _one(1, "zone")]},
        four(),
        on(
            ("node-a", FB),
            ("node-a", F),
            ("node-b", FB),
            ("node-y", F),
            ("node-y", FB),
            ("node-y", F),
            ("node-y", F),
        ),
        NONE_FIT,
    ),
}


@pytest.mark.parametrize("case", MULTIPLE.values(), ids=MULTIPLE.keys())
def test_multiple_constraints(case: Case) -> None:
    _run(case)


def test_only_hard_constraints_filter() -> None:
    """A pod with ScheduleAnyway constraints only, or none at all, is not filtered."""
    state = cluster(four(), A_B_0_3)
    assert prepare_filter(incoming(labels=F, constraints=[spread(1, "node", SOFT, FOO)]), state) is None
    assert prepare_filter(incoming(labels=F), state) is None


def test_match_label_keys_count_the_pods_own_revision() -> None:
    """``matchLabelKeys: [pod-template-hash]`` spreads each revision on its own."""
    constraint = _one(1, "node", selector({"app": "web"}), matchLabelKeys=["pod-template-hash"])
    old = {"app": "web", "pod-template-hash": "v1"}
    state = cluster([zn("node-a", None), zn("node-b", None)], on(("node-a", old), ("node-a", old)))
    new = {"app": "web", "pod-template-hash": "v2"}
    assert verdicts(prepare_filter, incoming(labels=new, constraints=[constraint]), state) == {
        "node-a": None,
        "node-b": None,
    }
    assert verdicts(prepare_filter, incoming(labels=old, constraints=[constraint]), state) == {
        "node-a": SKEW,
        "node-b": None,
    }


def test_empty_selector_counts_no_pod_as_in_1_37() -> None:
    """``labelSelector: {}`` counts no placed pod in 1.37 (``countPodsMatchSelector``
    tests ``Empty()``), while the pod still matches itself: every node passes."""
    state = cluster([zn("node-a", None), zn("node-b", None)], on(("node-a", F), ("node-a", F)))
    constraint = _one(1, "node", {})
    assert verdicts(prepare_filter, incoming(labels=F, constraints=[constraint]), state) == {
        "node-a": None,
        "node-b": None,
    }


def test_pods_on_deleted_nodes_and_the_pod_itself_do_not_count() -> None:
    info = incoming(labels=F, constraints=[_one(1, "node")])
    itself = dataclasses.replace(info, node="node-a")
    state = cluster([zn("node-a", None), zn("node-b", None)], [itself, *on(("gone", F))])
    assert verdicts(prepare_filter, info, state) == {"node-a": None, "node-b": None}


# --- score -------------------------------------------------------------------------------


def _soft(max_skew: int, key: str, sel: dict[str, Any] | None = FOO, **extra: Any) -> dict[str, Any]:
    return spread(max_skew, key, SOFT, sel, **extra)


def hosts(*names: str, **labels: str) -> list[NodeInfo]:
    return [node(name, {HOSTNAME: name, **labels}) for name in names]


@dataclass
class ScoreCase:
    pod: dict[str, Any]
    nodes: list[NodeInfo]
    pods: list[PodInfo]
    want: dict[str, int] | None
    #: The feasible nodes (default: all).
    feasible: list[str] | None = None
    services: dict[str, list[dict[str, str]]] = field(default_factory=dict)


def _counts(**per_node: int) -> list[PodInfo]:
    return [
        placed(f"{name}-{i}", name.replace("_", "-"), labels=F)
        for name, n in per_node.items()
        for i in range(n)
    ]


ABCD = hosts("node-a", "node-b", "node-c", "node-d")
ZONED = [
    node(name, {"zone": zone, HOSTNAME: name})
    for name, zone in [("node-a", "zone1"), ("node-b", "zone1"), ("node-c", "zone2"), ("node-d", "zone2")]
]

SCORE_CASES = {
    "no soft constraint: skipped": ScoreCase(
        {"labels": F, "constraints": [_one(1, HOSTNAME)]}, ABCD, [], None
    ),
    "no existing pods": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME)]},
        hosts("node-a", "node-b"),
        [],
        {"node-a": 100, "node-b": 100},
    ),
    "only one feasible node": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME)]},
        hosts("node-a", "node-b"),
        _counts(node_a=2, node_b=1),
        {"node-a": 100},
        ["node-a"],
    ),
    "the same number of pods everywhere": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME)]},
        hosts("node-a", "node-b"),
        _counts(node_a=1, node_b=1),
        {"node-a": 100, "node-b": 100},
    ),
    "by node, 2/1/0/3": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME)]},
        ABCD,
        _counts(node_a=2, node_b=1, node_d=3),
        {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
    ),
    "by node, a null selector": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME, None)]},
        ABCD,
        _counts(node_a=2, node_b=1, node_d=3),
        {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100},
    ),
    "by node, 2/1/0/3, maxSkew 2": ScoreCase(
        {"labels": F, "constraints": [_soft(2, HOSTNAME)]},
        ABCD,
        _counts(node_a=2, node_b=1, node_d=3),
        {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
    ),
    "by node, 4/3/2/1, maxSkew 3": ScoreCase(
        {"labels": F, "constraints": [_soft(3, HOSTNAME)]},
        ABCD,
        _counts(node_a=4, node_b=3, node_c=2, node_d=1),
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
    ),
    "system defaults, nodes without zones, pods selected by a Service": ScoreCase(
        {"labels": F},
        ABCD,
        _counts(node_a=4, node_b=3, node_c=2, node_d=1),
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
        services={"default": [{"foo": ""}]},
    ),
    "by node, 4/2/1/~3~": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME)]},
        hosts("node-a", "node-b", "node-x", "node-y"),
        _counts(node_a=4, node_b=2, node_x=1, node_y=3),
        {"node-a": 33, "node-b": 83, "node-x": 100},
        ["node-a", "node-b", "node-x"],
    ),
    "by node, 4/?2?/1/~3~: node-b lacks the key": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME)]},
        [*hosts("node-a"), node("node-b", {"n": "node-b"}), *hosts("node-x", "node-y")],
        _counts(node_a=4, node_b=2, node_x=1, node_y=3),
        {"node-a": 16, "node-b": 0, "node-x": 100},
        ["node-a", "node-b", "node-x"],
    ),
    "by zone, 4/2/1/~3~": ScoreCase(
        {"labels": F, "constraints": [_soft(1, "zone")]},
        [
            node(n, {"zone": z, HOSTNAME: n})
            for n, z in [("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2")]
        ],
        _counts(node_a=4, node_b=2, node_x=1, node_y=3),
        {"node-a": 75, "node-b": 75, "node-x": 100},
        ["node-a", "node-b", "node-x"],
    ),
    "zone and node, 2/~1~/2/~4~": ScoreCase(
        {"labels": F, "constraints": [_soft(1, "zone"), _soft(1, HOSTNAME)]},
        [
            node(n, {"zone": z, HOSTNAME: n})
            for n, z in [("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2")]
        ],
        _counts(node_a=2, node_b=1, node_x=2, node_y=4),
        {"node-a": 100, "node-x": 63},
        ["node-a", "node-x"],
    ),
    "two constraints on zone": ScoreCase(
        {"labels": FB, "constraints": [_soft(1, "zone"), _soft(1, "zone", BAR)]},
        [
            node(n, {"zone": z})
            for n, z in [("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2")]
        ],
        on(("node-a", FB), ("node-a", F), ("node-b", FB), ("node-y", F), ("node-y", FB), ("node-y", F)),
        {"node-a": 85, "node-x": 100},
        ["node-a", "node-x"],
    ),
    "pods of another namespace do not count": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME)]},
        hosts("node-a", "node-b"),
        [*_counts(node_a=1), *on(("node-b", F), ("node-b", F), namespace="ns2")],
        {"node-a": 0, "node-b": 100},
    ),
    "terminating pods do not count": ScoreCase(
        {"labels": F, "constraints": [_soft(1, HOSTNAME)]},
        hosts("node-a", "node-b"),
        [*_counts(node_a=1), *on(("node-b", F), ("node-b", F), terminating=True)],
        {"node-a": 0, "node-b": 100},
    ),
    "minDomains does not matter to ScheduleAnyway": ScoreCase(
        {"labels": F, "constraints": [_soft(2, "node", minDomains=10)]},
        [zn("node-a", None), zn("node-b", None), zn("node-c", None)],
        _counts(node_a=2, node_b=2, node_c=1),
        {"node-a": 75, "node-b": 75, "node-c": 100},
    ),
    "nodeAffinityPolicy Honor by node": ScoreCase(
        {"labels": F, "nodeSelector": F, "constraints": [_soft(1, "node")]},
        [zn("node-a", None, foo=""), zn("node-b", None, foo=""), zn("node-c", None)],
        _counts(node_a=2, node_b=1, node_c=1),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    "matchLabelKeys merged into empty selectors": ScoreCase(
        {
            "labels": FB,
            "constraints": [
                _soft(1, "zone", {}, matchLabelKeys=["foo"]),
                _soft(1, HOSTNAME, {}, matchLabelKeys=["bar"]),
            ],
        },
        ZONED,
        on(("node-a", F), ("node-b", FB), ("node-c", F), ("node-c", B)),
        {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
    ),
    "matchLabelKeys ANDed with a selector": ScoreCase(
        {
            "labels": {**FB, "baz": ""},
            "constraints": [_soft(1, "zone"), _soft(1, HOSTNAME, BAR, matchLabelKeys=["baz"])],
        },
        ZONED,
        on(
            ("node-a", F),
            ("node-b", {**FB, "baz": ""}),
            ("node-c", F),
            ("node-c", B),
            ("node-c", {**B, "baz": ""}),
        ),
        {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
    ),
    "nodeAffinityPolicy Honor: pods on nodes the pod cannot use do not count": ScoreCase(
        {"labels": F, "nodeSelector": F, "constraints": [_soft(1, "zone")]},
        [
            node("node-a", {"zone": "zone1", "foo": ""}),
            node("node-x", {"zone": "zone2", "foo": ""}),
            node("node-y", {"zone": "zone2"}),
        ],
        _counts(node_a=1, node_y=2),
        {"node-a": 0, "node-x": 100},
        ["node-a", "node-x"],
    ),
    "nodeAffinityPolicy Ignore: they count": ScoreCase(
        {"labels": F, "nodeSelector": F, "constraints": [_soft(1, "zone", nodeAffinityPolicy="Ignore")]},
        [
            node("node-a", {"zone": "zone1", "foo": ""}),
            node("node-x", {"zone": "zone2", "foo": ""}),
            node("node-y", {"zone": "zone2"}),
        ],
        _counts(node_a=1, node_y=2),
        {"node-a": 100, "node-x": 33},
        ["node-a", "node-x"],
    ),
    "nodeTaintsPolicy Honor: pods on tainted nodes do not count": ScoreCase(
        {"labels": F, "constraints": [_soft(1, "zone", nodeTaintsPolicy="Honor")]},
        [
            node("node-a", {"zone": "zone1"}),
            node("node-x", {"zone": "zone2"}),
            NodeInfo("node-y", {"zone": "zone2"}, taints=TAINTED),
        ],
        _counts(node_a=1, node_y=2),
        {"node-a": 0, "node-x": 100},
        ["node-a", "node-x"],
    ),
    "nodeTaintsPolicy Ignore: they count": ScoreCase(
        {"labels": F, "constraints": [_soft(1, "zone")]},
        [
            node("node-a", {"zone": "zone1"}),
            node("node-x", {"zone": "zone2"}),
            NodeInfo("node-y", {"zone": "zone2"}, taints=TAINTED),
        ],
        _counts(node_a=1, node_y=2),
        {"node-a": 100, "node-x": 33},
        ["node-a", "node-x"],
    ),
}


@pytest.mark.parametrize("case", SCORE_CASES.values(), ids=SCORE_CASES.keys())
def test_pod_topology_spread_score(case: ScoreCase) -> None:
    state = cluster(case.nodes, case.pods, services=case.services)
    assert scores(prepare_score, incoming(**case.pod), state, case.feasible) == case.want


def test_score_weight_and_round_half_away_from_zero() -> None:
    """Raw scores are rounded (2 pods * log(3 + 2) = 3.22 -> 3) before they are normalised."""
    prepared = prepare_score(
        incoming(labels=F, constraints=[_soft(1, HOSTNAME)]),
        cluster(hosts("a", "b", "c"), _counts(a=2)),
        hosts("a", "b", "c"),
    )
    assert profile.plugin(NAME).weight == 2
    assert prepared is not None and list(prepared) == [0, 100, 100]


# --- system default constraints -----------------------------------------------------------

RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True, "uid": "rs"}


def test_default_selector_from_services_and_the_controller() -> None:
    """Services of the namespace that select the pod and its controller's selector, ANDed."""
    info = incoming(labels={"app": "web", "tier": "fe"})
    state = cluster(
        hosts("a"),
        services={"default": [{"app": "web"}, {"app": "db"}, {}]},
        controllers={"default/ReplicaSet/web-1": label_selector(selector(None, ("tier", "In", ["fe"])))},
    )
    chosen = default_selector(info, state)
    assert chosen is not None and {r.key for r in chosen.requirements} == {"app"}
    owned = placed("p", "a", labels={"app": "web", "tier": "fe"})
    owned = dataclasses.replace(owned, controller=ControllerRef("apps/v1", "ReplicaSet", "web-1"))
    chosen = default_selector(owned, state)
    assert chosen is not None and {r.key for r in chosen.requirements} == {"app", "tier"}
    other_version = dataclasses.replace(
        owned, controller=ControllerRef("extensions/v1beta1", "ReplicaSet", "web-1")
    )
    chosen = default_selector(other_version, state)
    assert chosen is not None and {r.key for r in chosen.requirements} == {"app"}
    assert default_selector(dataclasses.replace(owned, labels={"x": "y"}, controller=None), state) is None


def test_system_defaults_score_replicas_of_a_replica_set() -> None:
    """A pod without constraints, owned by a ReplicaSet: hostname maxSkew 3 and zone maxSkew
    5 over its siblings; a node without a zone is still scored (requireAllTopologies off)."""
    nodes = [
        node("a", {HOSTNAME: "a", ZONE: "z1"}),
        node("b", {HOSTNAME: "b", ZONE: "z1"}),
        node("c", {HOSTNAME: "c"}),
    ]
    web = {"app": "web"}
    siblings = [placed(f"w{i}", "a", labels=web) for i in range(3)]
    state = cluster(nodes, siblings, controllers={"default/ReplicaSet/web-1": label_selector(selector(web))})
    pod = incoming(labels=web, owner=RS)
    # a: 3 * log(5) + 2 + 3 * log(4) + 4 = 15; b: 2 + 3 * log(4) + 4 = 10; c: 2 (no zone).
    assert scores(prepare_score, pod, state) == {"a": 13, "b": 46, "c": 100}
    # Nothing selects it: no default constraint, not scored.
    assert scores(prepare_score, incoming(labels=web), state) is None
    # Its own constraints replace the defaults, and then every key is required.
    assert (
        scores(prepare_score, incoming(labels=web, owner=RS, constraints=[_one(1, HOSTNAME)]), state) is None
    )


def test_no_defaults_from_a_state_without_workload_selectors() -> None:
    """A cluster state that does not answer WorkloadSelectors applies no system default."""

    class Plain:
        def __init__(self, inner: Snapshot) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            if name in ("service_selectors", "controller_selector"):
                raise AttributeError(name)
            return getattr(self._inner, name)

    state = cluster(ABCD, _counts(node_a=2), services={"default": [{"foo": ""}]})
    info = incoming(labels=F)
    assert prepare_score(info, state, ABCD) is not None
    assert prepare_score(info, Plain(state), ABCD) is None  # type: ignore[arg-type]
