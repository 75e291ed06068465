"""The default profile: every rule module registered at its place, with its weight."""

from __future__ import annotations

import pytest

from draco.scheduling import framework, noderesources, profile


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
