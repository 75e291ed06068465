"""The whole test cluster's pure parts: the range its Services (and its API server) use."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from draco.errors import ControlPlaneError
from draco.tools.dev.cluster import Cluster, _free_service_range, _used_addresses


def test_the_service_range_is_a_free_24_of_its_own() -> None:
    services = _free_service_range()
    assert services.prefixlen == 24 and services.subnet_of(ipaddress.IPv4Network("10.90.0.0/16"))
    assert not any(services.overlaps(u) for u in _used_addresses() if u.prefixlen >= 8)


def test_it_needs_kube_controller_manager(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match=r"hack/controlplane\.sh kube-controller-manager"):
        Cluster(binaries=tmp_path, node_assets=tmp_path).start()
