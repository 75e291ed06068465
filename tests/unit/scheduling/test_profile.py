"""The default profile: every rule module registered at its place, with its weight."""

from __future__ import annotations

import pytest

from draco.scheduling import framework, noderesources, profile
from tests.unit.scheduling.rulekit import cluster, container, info, needs, node, placed, pod, requests_pod


def test_the_rules_take_their_place_in_the_default_profile() -> None:
    assert [name for name, _ in profile.FILTERS] == [
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
    ]
    assert [name for name, _ in profile.SCORES] == [
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "VolumeBinding",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
    ]


def test_registering_again_replaces_and_unknown_names_are_refused() -> None:
    before = list(framework.FILTERS)
    framework.register("NodeResourcesFit", prefilter=noderesources.fit_filter)
    assert before == framework.FILTERS
    with pytest.raises(ValueError):
        framework.register("NoSuchPlugin", prefilter=noderesources.fit_filter)
    assert before == framework.FILTERS


def test_a_plain_pod_costs_nothing_in_the_port_and_volume_rules() -> None:
    """Only NodeResourcesFit runs per node for a pod without host ports and volumes."""
    body = requests_pod({"cpu": "1"})
    snapshot = cluster([node("n", allocatable={"cpu": "2", "pods": "1"})])
    prepared = framework.prepare(info(body), needs(body), snapshot)
    assert [name for name, _ in prepared.filters] == ["NodeResourcesFit"]
    assert prepared.unfit_rule(snapshot.nodes["n"]) is None


def test_the_first_rule_that_refuses_a_node_names_it() -> None:
    body = pod(containers=[container(ports=["TCP/0.0.0.0/80"], requests={"cpu": "1"})])
    snapshot = cluster(
        [
            node("busy", allocatable={"cpu": "2", "pods": "5"}),
            node("small", allocatable={"cpu": "500m", "pods": "5"}),
        ],
        [placed(body, "busy")],
    )
    prepared = framework.prepare(info(body), needs(body), snapshot)
    assert prepared.unfit_rule(snapshot.nodes["busy"]) == (
        "NodePorts",
        "node(s) didn't have free ports for the requested pod ports",
    )
    assert prepared.unfit_rule(snapshot.nodes["small"]) == ("NodeResourcesFit", "Insufficient cpu")
