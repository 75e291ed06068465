"""InterPodAffinity: the scenarios of upstream's filtering and scoring tests (Kubernetes
1.37), rewritten as tables, plus what draco relies on (which pods count, the fast path)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from draco.scheduling import interpodaffinity, profile, topologyspread
from draco.scheduling.interpodaffinity import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    prepare_filter,
    prepare_score,
)
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo
from tests.unit.scheduling.podkit import (
    cluster,
    incoming,
    node,
    placed,
    scores,
    selector,
    term,
    verdicts,
    weighted,
)

AFF, ANTI, EXISTING = REASON_AFFINITY, REASON_ANTI_AFFINITY, REASON_EXISTING_ANTI_AFFINITY

SCAN = {"service": "securityscan"}
S1 = {"security": "S1"}
S2 = {"security": "S2"}
NODE1 = node("node1", {"region": "r1", "zone": "z11"})
TEAMS = {"default": {}, "subteam1.team1": {"team": "team1"}, "subteam2.team1": {"team": "team1"}}
TEAMS |= {"subteam1.team2": {"team": "team2"}, "subteam2.team2": {"team": "team2"}}


def _in(key: str, *values: str) -> dict[str, Any]:
    return selector(None, (key, "In", values))


def _not_in(key: str, *values: str) -> dict[str, Any]:
    return selector(None, (key, "NotIn", values))


def _exists(key: str) -> dict[str, Any]:
    return selector(None, (key, "Exists", ()))


@dataclass
class Case:
    pod: dict[str, Any]
    pods: list[PodInfo]
    nodes: list[NodeInfo]
    want: Mapping[str, str | None] | None
    namespaces: dict[str, dict[str, str]] = field(default_factory=lambda: TEAMS)


def _filter_case(case: Case) -> None:
    state = cluster(case.nodes, case.pods, namespaces=case.namespaces)
    assert verdicts(prepare_filter, incoming(**case.pod), state) == case.want


SINGLE_NODE = {
    "no terms, nothing placed: PreFilter skips": Case({}, [], [NODE1], None),
    "affinity In matches the existing pod": Case(
        {"labels": S1, "affinity": [term("region", _in("service", "securityscan", "value2"))]},
        [placed("e", "node1", labels=SCAN)],
        [NODE1],
        {"node1": None},
    ),
    "affinity NotIn matches the existing pod": Case(
        {"labels": S1, "affinity": [term("region", _not_in("service", "antivirusscan", "value2"))]},
        [placed("e", "node1", labels=SCAN)],
        [NODE1],
        {"node1": None},
    ),
    "affinity to a pod of another namespace fails": Case(
        {
            "labels": S1,
            "affinity": [term("region", _in("service", "securityscan"), namespaces=["DiffNameSpace"])],
        },
        [placed("e", "node1", labels=SCAN)],
        [NODE1],
        {"node1": AFF},
    ),
    "affinity whose selector does not match the existing pod fails": Case(
        {"labels": S1, "affinity": [term("region", _in("service", "antivirusscan", "value2"))]},
        [placed("e", "node1", labels=SCAN)],
        [NODE1],
        {"node1": AFF},
    ),
    "affinity terms' expressions are ANDed: one not matching fails": Case(
        {
            "labels": S1,
            "affinity": [
                term("region", selector(None, ("service", "Exists", ()), ("wrongkey", "DoesNotExist", ()))),
                term(
                    "region",
                    selector(None, ("service", "In", ["securityscan"]), ("service", "NotIn", ["WrongValue"])),
                ),
                term("region", selector(None, ("service", "Exists", ()), ("wrongkey", "Exists", ()))),
            ],
        },
        [placed("e", "node1", labels=SCAN)],
        [NODE1],
        {"node1": AFF},
    ),
    "affinity and anti-affinity both satisfied": Case(
        {
            "labels": S1,
            "affinity": [term("region", _in("service", "securityscan", "value2"))],
            "anti_affinity": [term("node", _in("service", "antivirusscan", "value2"))],
        },
        [placed("e", "node1", labels=SCAN)],
        [NODE1],
        {"node1": None},
    ),
    "affinity satisfied, anti-affinity violated": Case(
        {
            "labels": S1,
            "affinity": [term("region", _in("service", "securityscan", "value2"))],
            "anti_affinity": [term("zone", _in("service", "securityscan", "value2"))],
        },
        [placed("e", "node1", labels=SCAN)],
        [NODE1],
        {"node1": ANTI},
    ),
    "the existing pod's anti-affinity refuses the incoming pod (symmetry)": Case(
        {
            "labels": SCAN,
            "affinity": [term("region", _in("service", "securityscan", "value2"))],
            "anti_affinity": [term("node", _in("service", "antivirusscan", "value2"))],
        },
        [
            placed(
                "e",
                "node1",
                labels=SCAN,
                anti_affinity=[term("zone", _in("service", "securityscan", "value2"))],
            )
        ],
        [NODE1],
        {"node1": EXISTING},
    ),
    "affinity matching neither a placed pod nor the pod itself fails": Case(
        {"labels": SCAN, "affinity": [term("region", _not_in("service", "securityscan", "value2"))]},
        [placed("e", "node2", labels=SCAN)],
        [NODE1],
        {"node1": AFF},
    ),
    "an existing pod's anti-affinity binds a pod without terms": Case(
        {"labels": SCAN},
        [
            placed(
                "e",
                "node1",
                labels=SCAN,
                anti_affinity=[term("zone", _in("service", "securityscan", "value2"))],
            )
        ],
        [NODE1],
        {"node1": EXISTING},
    ),
    "an existing pod's anti-affinity that does not select the pod: PreFilter skips": Case(
        {"labels": SCAN},
        [placed("e", "node1", labels=SCAN, anti_affinity=[term("zone", _not_in("service", "securityscan"))])],
        [NODE1],
        None,
    ),
    "the incoming pod's anti-affinity refuses, the existing pod's does not": Case(
        {
            "labels": SCAN,
            "anti_affinity": [term("region", _exists("service")), term("region", _exists("security"))],
        },
        [placed("e", "node1", labels=S1, anti_affinity=[term("zone", _exists("security"))])],
        [NODE1],
        {"node1": ANTI},
    ),
    "partial symmetric match a1": Case(
        {
            "labels": SCAN,
            "anti_affinity": [term("zone", _exists("service")), term("zone", _exists("security"))],
        },
        [placed("e", "node1", labels=S1, anti_affinity=[term("zone", _exists("security"))])],
        [NODE1],
        {"node1": ANTI},
    ),
    "partial symmetric match a2": Case(
        {"labels": S1, "anti_affinity": [term("zone", _exists("security"))]},
        [
            placed(
                "e",
                "node1",
                labels=SCAN,
                anti_affinity=[term("zone", _exists("service")), term("zone", _exists("security"))],
            )
        ],
        [NODE1],
        {"node1": EXISTING},
    ),
    "affinity with a matching namespaceSelector": Case(
        {
            "labels": S1,
            "affinity": [
                term("region", _in("service", "securityscan"), namespaceSelector=_in("team", "team1")),
            ],
        },
        [placed("e", "node1", labels=SCAN, namespace="subteam1.team1")],
        [NODE1],
        {"node1": None},
    ),
    "affinity with a namespaceSelector that does not match": Case(
        {
            "labels": S1,
            "affinity": [
                term("region", _in("service", "securityscan"), namespaceSelector=_in("team", "team1")),
            ],
        },
        [placed("e", "node1", labels=SCAN, namespace="subteam1.team2")],
        [NODE1],
        {"node1": AFF},
    ),
    "anti-affinity with a matching namespaceSelector": Case(
        {
            "namespace": "subteam1.team1",
            "labels": S1,
            "anti_affinity": [
                term("zone", _in("service", "securityscan"), namespaceSelector=_in("team", "team1"))
            ],
        },
        [placed("e", "node1", labels=SCAN, namespace="subteam2.team1")],
        [NODE1],
        {"node1": ANTI},
    ),
    "anti-affinity with an empty namespaceSelector: every namespace": Case(
        {
            "namespace": "subteam1.team1",
            "labels": S1,
            "anti_affinity": [term("zone", _in("service", "securityscan"), namespaceSelector={})],
        },
        [placed("e", "node1", labels=SCAN, namespace="subteam2.team1")],
        [NODE1],
        {"node1": ANTI},
    ),
    "anti-affinity with a namespaceSelector that does not match: nothing to refuse": Case(
        {
            "namespace": "subteam1.team1",
            "labels": S1,
            "anti_affinity": [
                term("zone", _in("service", "securityscan"), namespaceSelector=_in("team", "team1"))
            ],
        },
        [placed("e", "node1", labels=SCAN, namespace="subteam1.team2")],
        [NODE1],
        None,
    ),
}


@pytest.mark.parametrize("case", SINGLE_NODE.values(), ids=SINGLE_NODE.keys())
def test_required_affinity_single_node(case: Case) -> None:
    _filter_case(case)


CHINA = {"region": "China"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
INDIA = {"region": "India"}


def _abc(name: str, region: str, zone: str) -> NodeInfo:
    return node(name, {"region": region, "zone": zone, "hostname": name})


MULTIPLE_NODES = {
    "every node of the matching pod's region fits": Case(
        {"affinity": [term("region", _in("foo", "bar"))]},
        [placed("p1", "node1", labels={"foo": "bar"})],
        [node("node1", CHINA), node("node2", CHINA_AZ1), node("node3", INDIA)],
        {"node1": None, "node2": None, "node3": AFF},
    ),
    "the first pod of a group that wants one zone may go to any zone": Case(
        {
            "labels": {"foo": "bar", "service": "securityscan"},
            "affinity": [term("zone", _in("foo", "bar")), term("zone", _in("service", "securityscan"))],
        },
        [placed("p1", "nodeA", labels={"foo": "bar"})],
        [node("nodeA", {"zone": "az1", "hostname": "h1"}), node("nodeB", {"zone": "az2", "hostname": "h2"})],
        {"nodeA": None, "nodeB": None},
    ),
    "the first pod of a group still needs the topology key": Case(
        {
            "labels": {"foo": "bar", "service": "securityscan"},
            "affinity": [term("zone", _in("foo", "bar")), term("zone", _in("service", "securityscan"))],
        },
        [placed("p1", "nodeA", labels={"foo": "bar"})],
        [node("nodeA", {"zoneLabel": "az1"}), node("nodeB", {"zoneLabel": "az2"})],
        {"nodeA": AFF, "nodeB": AFF},
    ),
    "anti-affinity refuses every node of the region": Case(
        {"anti_affinity": [term("region", _in("foo", "abc"))]},
        [placed("p1", "nodeA", labels={"foo": "abc"})],
        [
            node("nodeA", {"region": "r1", "hostname": "nodeA"}),
            node("nodeB", {"region": "r1", "hostname": "nodeB"}),
        ],
        {"nodeA": ANTI, "nodeB": ANTI},
    ),
    "anti-affinity matches when any term matches": Case(
        {"anti_affinity": [term("region", _in("foo", "abc")), term("zone", _in("service", "securityscan"))]},
        [placed("p1", "nodeA", labels={"foo": "abc", "service": "securityscan"})],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z2")],
        {"nodeA": ANTI, "nodeB": ANTI},
    ),
    "anti-affinity leaves the other region": Case(
        {"anti_affinity": [term("region", _in("foo", "abc"))]},
        [placed("p1", "nodeA", labels={"foo": "abc"})],
        [node("nodeA", CHINA), node("nodeB", CHINA_AZ1), node("nodeC", INDIA)],
        {"nodeA": ANTI, "nodeB": ANTI, "nodeC": None},
    ),
    "a pod of another namespace neither matches nor is refused by its own namespace's term": Case(
        {"namespace": "NS1", "labels": {"foo": "123"}, "anti_affinity": [term("region", _in("foo", "bar"))]},
        [
            placed("p1", "nodeA", namespace="NS1", labels={"foo": "bar"}),
            placed("p2", "nodeC", namespace="NS2", anti_affinity=[term("region", _in("foo", "123"))]),
        ],
        [node("nodeA", CHINA), node("nodeB", CHINA_AZ1), node("nodeC", INDIA)],
        {"nodeA": ANTI, "nodeB": ANTI, "nodeC": None},
        {"NS1": {}, "NS2": {}},
    ),
    "an existing pod's term whose key no node has refuses nothing: PreFilter skips": Case(
        {"labels": {"foo": ""}},
        [placed("p1", "nodeA", anti_affinity=[term("invalid-node-label", _exists("foo"))])],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z1")],
        None,
    ),
    "the incoming pod's term whose key no node has refuses nothing": Case(
        {"anti_affinity": [term("invalid-node-label", _exists("foo"))]},
        [placed("p1", "nodeA", labels={"foo": ""})],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z1")],
        None,
    ),
    "existing pods' terms each refuse in their own topology": Case(
        {"labels": {"foo": "", "bar": ""}},
        [
            placed("p1", "nodeA", anti_affinity=[term("zone", _exists("foo"))]),
            placed("p2", "nodeA", anti_affinity=[term("region", _exists("bar"))]),
        ],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z2")],
        {"nodeA": EXISTING, "nodeB": EXISTING},
    ),
    "the incoming pod violates one anti-affinity term on each node": Case(
        {"anti_affinity": [term("zone", _exists("foo")), term("region", _exists("bar"))]},
        [placed("p1", "nodeA", labels={"foo": ""}), placed("p2", "nodeB", labels={"bar": ""})],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z2")],
        {"nodeA": ANTI, "nodeB": ANTI},
    ),
    "an existing pod's terms count only where selector and key both match": Case(
        {"labels": {"foo": "", "bar": ""}},
        [
            placed(
                "p1",
                "nodeA",
                anti_affinity=[term("invalid-node-label", _exists("foo")), term("zone", _exists("bar"))],
            )
        ],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z2")],
        {"nodeA": EXISTING, "nodeB": None},
    ),
    "the incoming pod's terms count only where selector and key both match": Case(
        {"anti_affinity": [term("invalid-node-label", _exists("foo")), term("zone", _exists("bar"))]},
        [placed("podA", "nodeA", labels={"foo": "", "bar": ""})],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z2")],
        {"nodeA": ANTI, "nodeB": None},
    ),
    "existing pods on two nodes refuse those two; the third fits": Case(
        {"labels": {"foo": "", "bar": ""}},
        [
            placed(
                "p1", "nodeA", anti_affinity=[term("zone", _exists("foo")), term("zone", _exists("labelA"))]
            ),
            placed(
                "p2", "nodeB", anti_affinity=[term("zone", _exists("bar")), term("zone", _exists("labelB"))]
            ),
        ],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z2"), _abc("nodeC", "r1", "z3")],
        {"nodeA": EXISTING, "nodeB": EXISTING, "nodeC": None},
    ),
    "one pod matching all affinity terms admits its region and zone": Case(
        {"affinity": [term("region", _exists("foo")), term("zone", _exists("bar"))]},
        [placed("pod1", "nodeA", labels={"foo": "", "bar": ""})],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z1")],
        {"nodeA": None, "nodeB": None},
    ),
    "affinity terms must all be matched by the same pod": Case(
        {"affinity": [term("region", _exists("foo")), term("zone", _exists("bar"))]},
        [placed("pod1", "nodeA", labels={"foo": ""}), placed("pod2", "nodeB", labels={"bar": ""})],
        [_abc("nodeA", "r1", "z1"), _abc("nodeB", "r1", "z2")],
        {"nodeA": AFF, "nodeB": AFF},
    ),
    "hostname affinity: the node of the matching pod only": Case(
        {"affinity": [term("kubernetes.io/hostname", _exists("foo"))]},
        [placed("pod1", "nodeA", labels={"foo": ""})],
        [
            node("nodeA", {"kubernetes.io/hostname": "nodeA"}),
            node("nodeB", {"kubernetes.io/hostname": "nodeB"}),
        ],
        {"nodeA": None, "nodeB": AFF},
    ),
    "hostname anti-affinity: every node but the matching pod's": Case(
        {"anti_affinity": [term("kubernetes.io/hostname", _exists("foo"))]},
        [placed("pod1", "nodeA", labels={"foo": ""})],
        [
            node("nodeA", {"kubernetes.io/hostname": "nodeA"}),
            node("nodeB", {"kubernetes.io/hostname": "nodeB"}),
        ],
        {"nodeA": ANTI, "nodeB": None},
    ),
}


@pytest.mark.parametrize("case", MULTIPLE_NODES.values(), ids=MULTIPLE_NODES.keys())
def test_required_affinity_multiple_nodes(case: Case) -> None:
    _filter_case(case)


HOSTS = [
    node(name, {"kubernetes.io/hostname": name, "zone": zone}) for name, zone in [("a", "z1"), ("b", "z2")]
]
APP = {"app": "web"}
HOST_ANTI = [term("kubernetes.io/hostname", selector(APP))]


def test_which_pods_count() -> None:
    """Terminating pods count; pods left on a deleted node and the pod itself do not."""
    state = cluster(
        HOSTS, [placed("old", "a", labels=APP, terminating=True), placed("gone", "c", labels=APP)]
    )
    assert verdicts(prepare_filter, incoming(labels=APP, anti_affinity=HOST_ANTI), state) == {
        "a": ANTI,
        "b": None,
    }
    # The pod being placed again while the view still has it on "a" does not refuse itself.
    info = incoming(labels=APP, anti_affinity=HOST_ANTI)
    itself = dataclasses.replace(info, node="a")
    assert prepare_filter(info, cluster(HOSTS, [itself])) is None


def test_existing_anti_affinity_uses_the_incoming_namespace_labels() -> None:
    """An existing pod's namespaceSelector reads the labels of the incoming pod's namespace;
    an unknown namespace reads as one without labels."""
    guard = placed(
        "guard",
        "a",
        anti_affinity=[term("zone", selector(APP), namespaceSelector=_not_in("tier", "trusted"))],
    )
    namespaces = {"default": {}, "trusted": {"tier": "trusted"}, "open": {"tier": "open"}}
    state = cluster(HOSTS, [guard], namespaces=namespaces)
    assert verdicts(prepare_filter, incoming(namespace="trusted", labels=APP), state) is None
    assert verdicts(prepare_filter, incoming(namespace="open", labels=APP), state) == {
        "a": EXISTING,
        "b": None,
    }
    assert verdicts(prepare_filter, incoming(namespace="unknown", labels=APP), state) == {
        "a": EXISTING,
        "b": None,
    }


def test_incoming_namespace_selector_only_selects_known_namespaces() -> None:
    """upstream resolves the incoming pod's namespaceSelector to the namespaces it lists:
    a pod of an unknown namespace is not selected, except by ``{}``."""
    state = cluster(HOSTS, [placed("w", "a", namespace="ghost", labels=APP)], namespaces={"default": {}})
    anti = [term("zone", selector(APP), namespaceSelector=_not_in("tier", "trusted"))]
    assert verdicts(prepare_filter, incoming(anti_affinity=anti), state) is None
    anti_all = [term("zone", selector(APP), namespaceSelector={})]
    assert verdicts(prepare_filter, incoming(anti_affinity=anti_all), state) == {"a": ANTI, "b": None}


def test_match_label_keys_separate_revisions() -> None:
    """``matchLabelKeys`` (pod-template-hash) keeps the anti-affinity to the pod's own
    revision; ``mismatchLabelKeys`` (tenant) keeps others' pods away."""
    anti = [term("kubernetes.io/hostname", selector(APP), matchLabelKeys=["pod-template-hash"])]
    old = placed("old", "a", labels={**APP, "pod-template-hash": "v1"})
    state = cluster(HOSTS, [old])
    assert (
        verdicts(
            prepare_filter, incoming(labels={**APP, "pod-template-hash": "v2"}, anti_affinity=anti), state
        )
        is None
    )
    same = incoming(labels={**APP, "pod-template-hash": "v1"}, anti_affinity=anti)
    assert verdicts(prepare_filter, same, state) == {"a": ANTI, "b": None}

    exclusive = [term("zone", _exists("tenant"), mismatchLabelKeys=["tenant"])]
    state = cluster(
        HOSTS, [placed("t1", "a", labels={"tenant": "t1"}), placed("t2", "b", labels={"tenant": "t2"})]
    )
    assert verdicts(prepare_filter, incoming(labels={"tenant": "t1"}, anti_affinity=exclusive), state) == {
        "a": None,
        "b": ANTI,
    }


def test_fast_path_ignores_pods_that_cannot_refuse() -> None:
    """A pod without terms is not checked while no placed pod's required anti-affinity
    selects it, however many pods carry other terms."""
    others = [
        placed("pref", "a", labels=APP, preferred_anti=[weighted(10, term("zone", selector(APP)))]),
        placed("aff", "b", labels=APP, affinity=[term("zone", selector(APP))]),
        placed("anti", "b", labels=APP, anti_affinity=[term("zone", selector({"app": "db"}))]),
    ]
    assert prepare_filter(incoming(labels=APP), cluster(HOSTS, others)) is None


def test_in_the_default_profile_in_order() -> None:
    assert interpodaffinity.NAME == "InterPodAffinity" and topologyspread.NAME == "PodTopologySpread"
    names = [plugin.name for plugin in profile.PROFILE]
    assert names.index("PodTopologySpread") < names.index("InterPodAffinity")
    plugin = profile.plugin("InterPodAffinity")
    assert plugin.prefilter is prepare_filter and plugin.score is prepare_score and plugin.weight == 2


# --- score -------------------------------------------------------------------------------

AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}
STAY_WITH_S1 = [weighted(5, term("region", _in("security", "S1")))]
STAY_WITH_S2 = [weighted(6, term("region", _in("security", "S2")))]
AFFINITY3 = [
    weighted(8, term("region", selector(None, ("security", "NotIn", ["S1"]), ("security", "In", ["S2"])))),
    weighted(2, term("region", selector(None, ("security", "Exists", ()), ("wrongkey", "DoesNotExist", ())))),
]
HARD = [
    term("region", _in("security", "S1", "value2")),
    term("region", selector(None, ("security", "Exists", ()), ("wrongkey", "DoesNotExist", ()))),
]
AWAY_FROM_S1 = [weighted(5, term("az", _in("security", "S1")))]
AWAY_FROM_S2 = [weighted(5, term("az", _in("security", "S2")))]
TEAM1_OR_SUBTEAM2 = {"namespaces": ["subteam2.team2"], "namespaceSelector": _in("team", "team1")}
NS_AFFINITY = [weighted(5, term("region", _in("security", "S1"), **TEAM1_OR_SUBTEAM2))]


@dataclass
class ScoreCase:
    pod: dict[str, Any]
    pods: list[PodInfo]
    nodes: list[NodeInfo]
    want: dict[str, int] | None


def _n(name: str, labels: dict[str, str]) -> NodeInfo:
    return node(name, labels)


SCORES = {
    "no affinity anywhere: skipped": ScoreCase(
        {"labels": S1}, [], [_n("node1", CHINA), _n("node2", INDIA), _n("node3", AZ1)], None
    ),
    "preferred affinity: the matching pod's region scores high": ScoreCase(
        {"labels": S1, "preferred": STAY_WITH_S1},
        [placed("a", "node1", labels=S1), placed("b", "node2", labels=S2), placed("c", "node3", labels=S1)],
        [_n("node1", CHINA), _n("node2", INDIA), _n("node3", AZ1)],
        {"node1": 100, "node2": 0, "node3": 0},
    ),
    "every node of that region scores the same": ScoreCase(
        {"preferred": STAY_WITH_S1},
        [placed("a", "node1", labels=S1)],
        [_n("node1", CHINA), _n("node2", CHINA_AZ1), _n("node3", INDIA)],
        {"node1": 100, "node2": 100, "node3": 0},
    ),
    "the region with more matching pods scores high": ScoreCase(
        {"labels": S1, "preferred": STAY_WITH_S2},
        [
            placed("a", "node1", labels=S2),
            placed("b", "node1", labels=S2),
            placed("c", "node2", labels=S2),
            placed("d", "node3", labels=S2),
            placed("e", "node4", labels=S2),
            placed("f", "node5", labels=S2),
        ],
        [_n("node1", CHINA), _n("node2", INDIA), _n("node3", CHINA), _n("node4", CHINA), _n("node5", INDIA)],
        {"node1": 100, "node2": 0, "node3": 100, "node4": 100, "node5": 0},
    ),
    "several weighted terms with operators, some not matching": ScoreCase(
        {"labels": S1, "preferred": AFFINITY3},
        [placed("a", "node1", labels=S1), placed("b", "node2", labels=S2), placed("c", "node3", labels=S1)],
        [_n("node1", CHINA), _n("node2", INDIA), _n("node3", AZ1)],
        {"node1": 20, "node2": 100, "node3": 0},
    ),
    "symmetry: existing pods' preferred affinity selecting the incoming pod": ScoreCase(
        {"labels": S2},
        [
            placed("a", "node1", labels=S1, preferred=STAY_WITH_S1),
            placed("b", "node2", labels=S2, preferred=STAY_WITH_S2),
        ],
        [_n("node1", CHINA), _n("node2", INDIA), _n("node3", AZ1)],
        {"node1": 0, "node2": 100, "node3": 0},
    ),
    "symmetry with a namespaceSelector on the existing pod's term": ScoreCase(
        {"namespace": "subteam1.team1", "labels": S1},
        [
            placed("a", "node1", labels=S1, preferred=NS_AFFINITY),
            placed("b", "node2", labels=S2, preferred=STAY_WITH_S2),
        ],
        [_n("node1", CHINA), _n("node2", INDIA), _n("node3", AZ1)],
        {"node1": 100, "node2": 0, "node3": 0},
    ),
    "anti-affinity symmetry with a namespaceSelector: negative weights": ScoreCase(
        {"namespace": "subteam1.team1", "labels": S1},
        [
            placed(
                "a",
                "node1",
                labels=S1,
                preferred_anti=[weighted(5, term("region", _in("security", "S1"), **TEAM1_OR_SUBTEAM2))],
            ),
            placed("b", "node2", labels=S2, preferred=STAY_WITH_S2),
        ],
        [_n("node1", CHINA), _n("node2", INDIA), _n("node3", AZ1)],
        {"node1": 0, "node2": 100, "node3": 100},
    ),
    "symmetry: existing pods' required affinity at hardPodAffinityWeight": ScoreCase(
        {"labels": S1},
        [placed("a", "node1", labels=S1, affinity=HARD), placed("b", "node2", labels=S2, affinity=HARD)],
        [_n("node1", CHINA), _n("node2", INDIA), _n("node3", AZ1)],
        {"node1": 100, "node2": 100, "node3": 0},
    ),
    "preferred anti-affinity: the node without matching pods scores high": ScoreCase(
        {"labels": S1, "preferred_anti": AWAY_FROM_S1},
        [placed("a", "node1", labels=S1), placed("b", "node2", labels=S2)],
        [_n("node1", AZ1), _n("node2", CHINA)],
        {"node1": 0, "node2": 100},
    ),
    "preferred anti-affinity: a node without the key scores high": ScoreCase(
        {"labels": S1, "preferred_anti": AWAY_FROM_S1},
        [placed("a", "node1", labels=S1), placed("b", "node2", labels=S1)],
        [_n("node1", AZ1), _n("node2", CHINA)],
        {"node1": 0, "node2": 100},
    ),
    "anti-affinity symmetry": ScoreCase(
        {"labels": S2},
        [
            placed("a", "node1", labels=S1, preferred_anti=AWAY_FROM_S2),
            placed("b", "node2", labels=S2, preferred_anti=AWAY_FROM_S1),
        ],
        [_n("node1", AZ1), _n("node2", AZ2)],
        {"node1": 0, "node2": 100},
    ),
    "affinity, anti-affinity and both symmetries together": ScoreCase(
        {
            "labels": S1,
            "preferred": [weighted(8, term("region", _in("security", "S1")))],
            "preferred_anti": AWAY_FROM_S2,
        },
        [
            placed("a", "node1", labels=S1),
            placed("b", "node2", labels=S2),
            placed(
                "c",
                "node3",
                preferred=[weighted(8, term("region", _in("security", "S1")))],
                preferred_anti=AWAY_FROM_S2,
            ),
            placed("d", "node4", preferred_anti=AWAY_FROM_S1),
        ],
        [_n("node1", CHINA), _n("node2", AZ1), _n("node3", INDIA), _n("node4", AZ2)],
        {"node1": 100, "node2": 0, "node3": 100, "node4": 0},
    ),
    "a topology where only some nodes hold pods with affinity": ScoreCase(
        {"labels": S1},
        [
            placed("a", "node1", labels=S1),
            placed(
                "b",
                "node2",
                preferred=[weighted(8, term("region", _in("security", "S1")))],
                preferred_anti=AWAY_FROM_S2,
            ),
        ],
        [_n("node1", CHINA), _n("node2", CHINA)],
        {"node1": 0, "node2": 0},
    ),
    "preferred affinity with a namespaceSelector counts the selected namespaces only": ScoreCase(
        {"namespace": "subteam1.team1", "labels": S1, "preferred": NS_AFFINITY},
        [
            placed("a", "node1", namespace="subteam1.team1", labels=S1),
            placed("b", "node1", namespace="subteam1.team1", labels=S1),
            placed("c", "node1", namespace="subteam1.team2", labels=S1),
            placed("d", "node2", namespace="subteam2.team1", labels=S1),
        ],
        [_n("node1", CHINA), _n("node2", INDIA)],
        {"node1": 100, "node2": 0},
    ),
}


@pytest.mark.parametrize("case", SCORES.values(), ids=SCORES.keys())
def test_preferred_affinity(case: ScoreCase) -> None:
    state = cluster(case.nodes, case.pods, namespaces=TEAMS)
    assert scores(prepare_score, incoming(**case.pod), state) == case.want


def test_scores_are_spread_between_lowest_and_highest() -> None:
    """Raw -5, 0, 3 become 0, 62, 100 (truncated); the weight is the profile's."""
    zones = [node(f"n{i}", {"zone": f"z{i}"}) for i in range(3)]
    pods = [
        placed("away", "n0", labels=S1),
        *(placed(f"with{i}", "n2", labels=S2) for i in range(3)),
    ]
    pod = incoming(
        labels=S1,
        preferred=[weighted(1, term("zone", _in("security", "S2")))],
        preferred_anti=[weighted(5, term("zone", _in("security", "S1")))],
    )
    assert scores(prepare_score, pod, cluster(zones, pods)) == {"n0": 0, "n1": 62, "n2": 100}
    prepared = prepare_score(pod, cluster(zones, pods), zones)
    assert prepared is not None
