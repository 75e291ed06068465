"""What a test node leaves on the machine, and how it all goes: at stop, or at the next
start after its owner was killed with SIGKILL.

A node (`draco.tools.dev.node`) keeps everything it makes in three places the host can
name: its folder `/tmp/draco-node-<id>` (sockets, containerd's root and state, the
kubelet's root, mounts under them, its pods' network-namespace pins, an `owner.pid`), its
network namespace `draco-node-<id>` (the same name: containerd, the kubelet,
kube-scheduler, the shims and every host-network container run there; the pods' bridge and
addresses are there), and the cgroups runc made for its containers (`/k8s.io/<id>` in each
hierarchy). Plus the kernel tunables the kubelet set, recorded before in `tunables.json`.

`remove_node_leftovers` takes all of it away, in an order that works whatever is still
running: SIGKILL every process in the node's namespace or in one of its pods' (found by
namespace identity, so a reused pid is never hit) and every recorded child naming the
folder, unmount what is under the folder, delete the namespace, remove the containers'
empty cgroups, put the tunables back, remove the folder. `sweep_abandoned_nodes` does it
for every folder whose owner is dead and for every `draco-node-*` namespace whose folder
is gone.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Final

from draco.logs import get_logger
from draco.tools.dev.controlplane import abandoned, stop_recorded_children
from draco.tools.dev.netns import NETNS_ROOT, NetworkNamespace, kill_in_namespaces, namespace_inode

__all__ = [
    "NODE_PREFIX",
    "NODE_ROOT",
    "TUNABLES_FILE",
    "read_sysctl",
    "remove_node_leftovers",
    "sweep_abandoned_nodes",
    "unmount_under",
]

log = get_logger(__name__)

#: A node's folder is `NODE_ROOT/NODE_PREFIX<id>` (short: unix socket paths must fit in
#: 108 bytes) and its network namespace `NODE_PREFIX<id>`.
NODE_ROOT: Final = Path("/tmp")
NODE_PREFIX: Final = "draco-node-"
#: The kernel tunables the kubelet found, before it set its own (`setupKernelTunables`).
TUNABLES_FILE: Final = "tunables.json"
#: The cgroup under which runc makes a container's, with the kubelet's `cgroupsPerQOS: false`.
CRI_CGROUP: Final = "k8s.io"


def read_sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name).read_text().strip()
    except OSError:
        return None


def _mounts_under(root: Path) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount at or below `root`."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            fstype = fields[fields.index("-") + 1] if "-" in fields else ""
            if point.startswith(prefix) or point == str(root):
                found.append((point, fstype))
    return found


def unmount_under(root: Path) -> None:
    """Detach every mount below `root`, deepest first (rootfs, shm, the kubelet's rshared
    bind, the pods' network-namespace pins)."""
    for point in sorted({p for p, _ in _mounts_under(root)}, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _pod_namespaces(workdir: Path) -> set[int]:
    """The network namespaces of the node's pods: containerd pins them under its state
    folder (`netns_mounts_under_state_dir`)."""
    inodes = set()
    for point, fstype in _mounts_under(workdir):
        if fstype == "nsfs" and (inode := namespace_inode(point)) is not None:
            inodes.add(inode)
    return inodes


def _container_ids(workdir: Path) -> set[str]:
    """Every container and sandbox runc knows of in this node's folder."""
    ids = {p.name for p in (workdir / "runc").glob("*") if p.is_dir()}
    tasks = workdir / "containerd" / "state" / "io.containerd.runtime.v2.task" / CRI_CGROUP
    ids |= {p.name for p in tasks.glob("*") if p.is_dir()}
    return ids


def _remove_cgroups(ids: set[str]) -> None:
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        parent = hierarchy / CRI_CGROUP
        for container in ids:
            with contextlib.suppress(OSError):
                (parent / container).rmdir()
        # The parent once empty (another node's containers may still use it).
        with contextlib.suppress(OSError):
            parent.rmdir()


def _restore_tunables(workdir: Path) -> None:
    try:
        found = json.loads((workdir / TUNABLES_FILE).read_text())
    except (OSError, ValueError):
        return
    for name, value in found.items():
        if read_sysctl(name) != value:
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / name).write_text(value)


def remove_node_leftovers(workdir: Path | None, netns: NetworkNamespace | None) -> int:
    """Everything of one node: its processes, mounts, namespace, cgroups, tunables and
    folder (see the module's docstring); how many processes had to be killed."""
    inodes = _pod_namespaces(workdir) if workdir is not None else set()
    if netns is not None and (inode := netns.inode()) is not None:
        inodes.add(inode)
    killed = kill_in_namespaces(inodes) if inodes else 0
    if workdir is not None:
        stop_recorded_children(workdir, needle=workdir.name)
        unmount_under(workdir)
    if netns is not None:
        netns.delete()
    if workdir is not None:
        _remove_cgroups(_container_ids(workdir))
        _restore_tunables(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    return killed


def sweep_abandoned_nodes(root: Path = NODE_ROOT) -> list[str]:
    """Remove what nodes whose owner died left (their folders under `root` and namespaces);
    the names of those removed. A live node's folder (owner alive) and namespace stay."""
    removed = []
    for workdir in sorted(root.glob(f"{NODE_PREFIX}*")):
        if abandoned(workdir):
            killed = remove_node_leftovers(workdir, NetworkNamespace(workdir.name))
            removed.append(workdir.name)
            log.warning("Removed an abandoned test node", node=workdir.name, killed=killed)
    # A namespace whose folder is gone: its owner died while removing it (a node makes its
    # folder before its namespace and removes it after).
    for pin in sorted(NETNS_ROOT.glob(f"{NODE_PREFIX}*")):
        if not (root / pin.name).exists() and not (NODE_ROOT / pin.name).exists():
            killed = remove_node_leftovers(None, NetworkNamespace(pin.name))
            removed.append(pin.name)
            log.warning("Removed an abandoned test node's network namespace", netns=pin.name, killed=killed)
    return removed
