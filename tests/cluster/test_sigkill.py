"""`draco dev cluster` killed with SIGKILL leaves nothing behind once the next one started.

Its children run in sessions of their own, so a SIGKILL of the `draco` process leaves
them running: etcd, kube-apiserver, the egress proxy, kube-controller-manager, and in the
node's network namespace containerd, the kubelet, kube-scheduler (and the relay beside
them). The next `draco dev cluster` sweeps all of it at its start: the processes, the
node's namespace and mounts, the cluster's and the node's folders. While either runs, the
host's network namespace has no address or route it did not have before.

Runs beside the session's cluster (the other tests'), which must stay untouched: its owner
is alive.
"""

from __future__ import annotations

import ipaddress
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from draco.tools.dev.cluster import SERVICE_CIDR, Cluster
from draco.tools.dev.netns import NetworkNamespace
from draco.tools.dev.node import BRIDGE
from tests.e2e.hostnet import host_network, host_network_leaks
from tests.e2e.support import scaled, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

READY = re.compile(
    r"^# node \S+, (?P<address>\S+), in network namespace (?P<netns>\S+) .*; folders (?P<cluster>\S+) (?P<node>\S+)$",
    re.M,
)


@dataclass
class DevCluster:
    """A running `draco dev cluster` and what it printed about itself."""

    popen: subprocess.Popen[bytes]
    netns: NetworkNamespace
    address: str
    folders: tuple[Path, Path]

    def pids(self) -> dict[str, int]:
        """Every child it recorded (control plane, controller manager, node), by pid file."""
        found = {}
        for folder in self.folders:
            for pid_file in [*folder.glob("*.pid"), *folder.glob("*/*.pid")]:
                if pid_file.name != "owner.pid":
                    found[pid_file.stem] = int(pid_file.read_text())
        return found


def start_dev_cluster(log: Path) -> DevCluster:
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "draco.cli", "dev", "cluster"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def ready() -> re.Match[str] | None:
        assert popen.poll() is None, log.read_text()
        return READY.search(log.read_text())

    match = wait_for(ready, timeout=600, interval=1, what=f"`draco dev cluster` to start ({log})")
    assert isinstance(match, re.Match)
    return DevCluster(
        popen,
        NetworkNamespace(match["netns"]),
        match["address"],
        (Path(match["cluster"]), Path(match["node"])),
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def mounts_under(folder: Path) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f"{folder}/" in line]


def test_a_sigkilled_dev_cluster_leaves_nothing_after_the_next_start(
    cluster: Cluster, tmp_path: Path
) -> None:
    before = host_network()
    first = start_dev_cluster(tmp_path / "first.log")
    ranges = [str(ipaddress.ip_interface(f"{first.address}/24").network), SERVICE_CIDR]
    assert not host_network_leaks(before, ranges=ranges, links=[BRIDGE])

    first.popen.send_signal(signal.SIGKILL)
    first.popen.wait(timeout=scaled(30))
    # What it left: every child still running, its namespace, its folders and mounts.
    children = first.pids()
    assert {
        "etcd",
        "kube-apiserver",
        "egress-proxy",
        "kube-controller-manager",
        "containerd",
        "kubelet",
    } <= set(children), children
    assert all(alive(pid) for pid in children.values()), children
    assert first.netns.exists() and all(f.exists() for f in first.folders)
    assert mounts_under(first.folders[1])

    second = start_dev_cluster(tmp_path / "second.log")
    try:
        left = {name: pid for name, pid in children.items() if alive(pid)}
        assert not left, left
        assert not first.netns.exists()
        assert not any(f.exists() for f in first.folders), first.folders
        assert not mounts_under(first.folders[1])
        assert not host_network_leaks(before, ranges=ranges, links=[BRIDGE])
        # The session's cluster (owner alive) is untouched.
        assert cluster.node is not None and cluster.node.netns is not None and cluster.node.netns.exists()
        assert (
            cluster.plane is not None and cluster.plane.kubectl("get", "nodes", check=False).returncode == 0
        )
    finally:
        second.popen.send_signal(signal.SIGTERM)
        assert second.popen.wait(timeout=scaled(300)) == 0, (tmp_path / "second.log").read_text()
    # Stopped the ordinary way: nothing of it is left either.
    assert not second.netns.exists() and not any(f.exists() for f in second.folders)
    assert not host_network_leaks(before, ranges=ranges, links=[BRIDGE])
