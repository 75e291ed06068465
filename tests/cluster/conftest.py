"""The whole test cluster (`make e2e-cluster`): control plane, kube-controller-manager and a
real node (`draco.tools.dev.cluster.Cluster`), draco's image imported into the node's
containerd, and helm. Not part of `make test` (tests/conftest.py leaves this folder out
unless `DRACO_CLUSTER_TESTS` is set): the image build and the cluster cost minutes.

Needs `KUBEBUILDER_ASSETS` with kube-controller-manager (`hack/controlplane.sh
kube-controller-manager`), `DRACO_NODE_ASSETS` (`hack/node.sh`), `DRACO_IMAGE` (the tarball
`hack/image.sh` prints, or `make image` with an engine and `docker save`), `DRACO_IMAGE_NAME`
(the name inside it) and `HELM` (`hack/helm.sh`); root.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from draco.logs import get_logger
from draco.tools.dev.cluster import Cluster
from draco.tools.dev.controlplane import find_binaries
from draco.tools.dev.node import find_node_assets
from tests.e2e.hostnet import HostNetwork, host_network


def _required(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: run `make e2e-cluster` (it builds and sets what is needed)")
    return value


@pytest.fixture(scope="session")
def image() -> tuple[Path, str]:
    """The image tarball and the name it carries."""
    return Path(_required("DRACO_IMAGE")), _required("DRACO_IMAGE_NAME")


@pytest.fixture(scope="session")
def helm() -> str:
    return _required("HELM")


@pytest.fixture(scope="session")
def host_network_before_cluster() -> HostNetwork:
    """The host's network namespace before the cluster started (it must stay so)."""
    return host_network()


@pytest.fixture(scope="session")
def cluster(image: tuple[Path, str], host_network_before_cluster: HostNetwork) -> Iterator[Cluster]:
    """A started whole cluster with the image imported into its node's containerd."""

    def terminate(*_: object) -> None:
        raise SystemExit(143)

    previous = signal.signal(signal.SIGTERM, terminate)
    started = time.monotonic()
    real = Cluster(binaries=find_binaries(), node_assets=find_node_assets()).start()
    try:
        assert real.node is not None
        real.node.import_image(image[0])
        get_logger(__name__).warning(
            "Test cluster started, image imported", seconds=round(time.monotonic() - started, 1)
        )
        yield real
    finally:
        real.stop()
        signal.signal(signal.SIGTERM, previous)
