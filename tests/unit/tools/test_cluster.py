"""The whole test cluster's parts that need no binaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from draco.errors import ControlPlaneError
from draco.tools.dev.cluster import Cluster


def test_it_needs_kube_controller_manager(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match=r"hack/controlplane\.sh kube-controller-manager"):
        Cluster(binaries=tmp_path, node_assets=tmp_path).start()
