"""NodePorts: a pod's host ports must be free on its node.

A host port is taken on a node by every pod placed there (bound or pinned) whose
containers or sidecars (restartable init containers, which run for the pod's life; other
init containers are not counted) declare it (:attr:`PodInfo.host_ports`). The pod being
placed conflicts with a taken (ip, protocol, port) as kube-scheduler's ``HostPortInfo``
decides: the same protocol and port, and either address is the wildcard ``0.0.0.0`` or
both are the same address. A pod without host ports is never checked (None at PreFilter).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from draco.scheduling import framework
from draco.scheduling.cluster import ClusterState
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import HostPort, PodInfo

__all__ = ["NAME", "REASON", "WILDCARD", "conflicts", "host_ports_filter"]

NAME: Final = "NodePorts"
REASON: Final = "node(s) didn't have free ports for the requested pod ports"
#: upstream's ``DefaultBindAllHostIP``: a port bound on every address of the node.
WILDCARD: Final = "0.0.0.0"


def conflicts(wanted: HostPort, taken: Iterable[HostPort]) -> bool:
    """Whether ``wanted`` collides with one of ``taken`` (upstream's ``CheckConflict``)."""
    for port in taken:
        if port.port != wanted.port or port.protocol != wanted.protocol:
            continue
        if WILDCARD in (wanted.ip, port.ip) or port.ip == wanted.ip:
            return True
    return False


class _NodePorts:
    __slots__ = ("_cluster", "_wanted")

    def __init__(self, wanted: tuple[HostPort, ...], cluster: ClusterState) -> None:
        self._wanted = wanted
        self._cluster = cluster

    def unfit(self, node: NodeInfo) -> str | None:
        taken = [port for pod in self._cluster.pods_on(node.name) for port in pod.host_ports]
        if taken and any(conflicts(wanted, taken) for wanted in self._wanted):
            return REASON
        return None


def host_ports_filter(pod: PodInfo, cluster: ClusterState) -> framework.NodeFilter | None:
    if not pod.host_ports:
        return None
    return _NodePorts(pod.host_ports, cluster)
