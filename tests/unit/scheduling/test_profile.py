"""The default profile: one table of kube-scheduler's plugins, each with its extension
points and weight, in the order draco runs the filters."""

from __future__ import annotations

import pytest

from draco.scheduling import framework, noderesources, profile
from draco.scheduling.framework import Plugin
from draco.scheduling.nodefit import NodeInfo, NodeTaint, node_info_from_dict
from draco.scheduling.podinfo import pod_info
from tests.unit.scheduling.rulekit import cluster, container, info, node, placed, pod, requests_pod


def test_every_plugin_of_the_default_profile_is_in_the_table_in_order() -> None:
    assert [(p.name, p.weight) for p in profile.PROFILE] == [
        ("NodeName", 0),
        ("NodeAffinity", 2),
        ("TaintToleration", 3),
        ("NodeUnschedulable", 0),
        ("NodePorts", 0),
        ("NodeResourcesFit", 1),
        ("VolumeRestrictions", 0),
        ("NodeVolumeLimits", 0),
        ("VolumeBinding", 1),
        ("VolumeZone", 0),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("DynamicResources", 2),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
    ]
    node_only = [p.name for p in profile.PROFILE if p.node_check is not None]
    assert node_only == ["NodeName", "NodeAffinity", "TaintToleration", "NodeUnschedulable"]
    assert [p.name for p in profile.PROFILE if p.devices] == ["DynamicResources"]
    scored = [p.name for p in profile.PROFILE if p.score is not None]
    assert all(profile.plugin(name).weight > 0 for name in scored)
    with pytest.raises(KeyError):
        profile.plugin("NoSuchPlugin")


def test_the_node_only_filters_name_the_first_that_refuses() -> None:
    """nodeName and the selector before taints, a cordoned node's taint last; the nodes
    kube-scheduler refused the pod's line on before everything."""
    tainted = NodeInfo("t", {"zone": "a"}, taints=(NodeTaint("gpu", "yes", "NoSchedule"),))
    cordoned = node_info_from_dict(
        {"metadata": {"name": "c", "labels": {"zone": "a"}}, "spec": {"unschedulable": True}}
    )
    both = node_info_from_dict(
        {
            "metadata": {"name": "b", "labels": {"zone": "b"}},
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
            },
        }
    )
    picky = pod_info({"metadata": {"name": "p"}, "spec": {"nodeSelector": {"zone": "a"}}})
    assert profile.node_unfit(picky, tainted) == "node(s) had untolerated taint {gpu=yes}"
    assert (
        profile.node_unfit(picky, cordoned)
        == "node(s) had untolerated taint {node.kubernetes.io/unschedulable}"
    )
    assert profile.node_unfit(picky, both) == "node(s) didn't match Pod's node affinity/selector"
    anywhere = pod_info({"metadata": {"name": "p"}, "spec": {}})
    assert profile.node_unfit(anywhere, both) == "node(s) had untolerated taint {gpu=yes}"
    tolerant = pod_info(
        {"metadata": {"name": "p"}, "spec": {"tolerations": [{"operator": "Exists"}], "nodeName": "c"}}
    )
    assert profile.node_unfit(tolerant, cordoned) is None
    assert profile.node_unfit(tolerant, tainted) == "node(s) didn't match Pod's node affinity/selector"
    refused = pod_info({"metadata": {"name": "p"}, "spec": {}}, avoid=frozenset({"t"}))
    assert profile.node_unfit(refused, tainted) == "node(s) refused this pod before (kube-scheduler)"


def test_a_plain_pod_costs_nothing_in_the_port_and_volume_rules() -> None:
    """Only NodeResourcesFit runs per node for a pod without host ports and volumes."""
    body = requests_pod({"cpu": "1"})
    snapshot = cluster([node("n", allocatable={"cpu": "2", "pods": "1"})])
    prepared = profile.prepare(info(body), snapshot)
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
    prepared = profile.prepare(info(body), snapshot)
    assert prepared.unfit_rule(snapshot.nodes["busy"]) == (
        "NodePorts",
        "node(s) didn't have free ports for the requested pod ports",
    )
    assert prepared.unfit_rule(snapshot.nodes["small"]) == ("NodeResourcesFit", "Insufficient cpu")


def test_a_table_of_other_plugins_is_run_as_given() -> None:
    """The framework runs whatever table it is given: only NodeResourcesFit here."""
    body = pod(containers=[container(ports=["TCP/0.0.0.0/80"], requests={"cpu": "1"})])
    snapshot = cluster([node("busy", allocatable={"cpu": "2", "pods": "5"})], [placed(body, "busy")])
    only_fit = [Plugin("NodeResourcesFit", prefilter=noderesources.fit_filter)]
    prepared = framework.prepare(only_fit, info(body), snapshot)
    assert prepared.unfit_rule(snapshot.nodes["busy"]) is None
