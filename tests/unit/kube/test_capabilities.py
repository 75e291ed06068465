"""What draco asks of the API server before it starts: the version it refuses, and how a
managed cluster's version strings are read."""

from __future__ import annotations

from draco.kube.capabilities import server_minor, unsupported_reason


def test_versions_from_1_30_on_are_served_older_ones_refused_with_the_feature() -> None:
    for version in ("1.30.14", "1.31.14", "1.33.13", "1.37.1"):
        major, minor, _ = version.split(".")
        assert unsupported_reason({"major": major, "minor": minor, "gitVersion": f"v{version}"}) is None
    reason = unsupported_reason({"major": "1", "minor": "29", "gitVersion": "v1.29.15"})
    assert reason is not None
    assert "v1.29.15" in reason and "1.30 or newer" in reason and "scheduling gates" in reason


def test_managed_clusters_minor_strings_are_read() -> None:
    assert server_minor({"major": "1", "minor": "30+", "gitVersion": "v1.30.4-eks-a737599"}) == (1, 30)
    assert server_minor({"major": "", "minor": "", "gitVersion": "v1.32.2-gke.1"}) == (1, 32)
    assert server_minor({}) is None
    assert unsupported_reason({}) is None  # unknown: let it run, the features say the rest
