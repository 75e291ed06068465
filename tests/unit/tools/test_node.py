"""The test node's pure parts: finding its binaries, the configuration it writes."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path

import pytest

from draco.errors import ControlPlaneError
from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import (
    BINARIES,
    BRIDGE,
    CNI_PLUGINS,
    PAUSE_IMAGE,
    Node,
    _pod_subnet,
    find_node_assets,
)


def fake_assets(root: Path) -> Path:
    for name in BINARIES:
        (root / "bin").mkdir(parents=True, exist_ok=True)
        (root / "bin" / name).write_text("#!/bin/sh\n")
        (root / "bin" / name).chmod(0o755)
    for name in CNI_PLUGINS:
        (root / "cni").mkdir(exist_ok=True)
        (root / "cni" / name).write_text("#!/bin/sh\n")
        (root / "cni" / name).chmod(0o755)
    (root / "images").mkdir()
    (root / "images" / "images.tar").write_bytes(b"")
    return root


def test_assets_must_be_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRACO_NODE_ASSETS", raising=False)  # `make test` sets it
    with pytest.raises(ControlPlaneError, match=r"hack/node\.sh"):
        find_node_assets("")


def test_missing_assets_are_listed(tmp_path: Path) -> None:
    root = fake_assets(tmp_path / "assets")
    (root / "bin" / "kubelet").unlink()
    (root / "cni" / "bridge").unlink()
    with pytest.raises(ControlPlaneError, match="bin/kubelet, cni/bridge"):
        find_node_assets(root)
    assert find_node_assets(fake_assets(tmp_path / "other")) == tmp_path / "other"


def test_the_pod_subnet_is_apart_from_other_nodes_of_the_control_plane() -> None:
    taken = [f"10.89.{third}.0/24" for third in range(256) if third != 7]
    assert _pod_subnet(taken) == ipaddress.IPv4Network("10.89.7.0/24")
    assert _pod_subnet([]).subnet_of(ipaddress.IPv4Network("10.89.0.0/16"))
    with pytest.raises(ControlPlaneError, match=r"10\.89\.x\.0/24"):
        _pod_subnet(["10.89.0.0/16"])


def test_containerd_config_enables_nri_and_cri_with_the_local_images(tmp_path: Path) -> None:
    node = Node(plane=ControlPlane(binaries=tmp_path), assets=fake_assets(tmp_path / "a"))
    node.workdir = tmp_path / "w"
    node.containerd_socket = tmp_path / "w" / "containerd.sock"
    node.nri_socket = tmp_path / "w" / "nri.sock"
    node.restrict_oom_score_adj = True
    config = tomllib.loads(node._containerd_config())
    assert config["version"] == 3
    nri = config["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["disable"] is False and nri["socket_path"] == str(node.nri_socket)
    assert nri["default_validator"]["enable"] is True
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["enable_cdi"] is False and runtime["restrict_oom_score_adj"] is True
    assert runtime["cni"]["bin_dirs"] == [str(tmp_path / "a" / "cni")]
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False and runc["BinaryName"] == str(tmp_path / "a" / "bin" / "runc")
    assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE_IMAGE
    # The pods' network-namespace pins live in the node's folder, not in /var/run/netns.
    assert runtime["netns_mounts_under_state_dir"] is True
    # Nothing of this containerd lives outside its folder.
    for path in (config["root"], config["state"], config["grpc"]["address"], nri["plugin_path"]):
        assert path.startswith(str(tmp_path / "w"))


def test_the_pods_bridge_is_their_gateway_to_the_nodes_address(tmp_path: Path) -> None:
    """Inside the node's namespace: the bridge has the node's address, pods route through it."""
    node = Node(plane=ControlPlane(binaries=tmp_path), assets=fake_assets(tmp_path / "a"))
    node.workdir, node.subnet, node.address = tmp_path / "w", "10.89.3.0/24", "10.89.3.1"
    node._write_cni()
    (conf,) = (tmp_path / "w" / "cni" / "net.d").glob("*.conflist")
    (bridge,) = json.loads(conf.read_text())["plugins"]
    assert bridge["bridge"] == BRIDGE and bridge["isGateway"] is True and bridge["isDefaultGateway"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.89.3.0/24", "gateway": "10.89.3.1"}]]
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path / "w"))
