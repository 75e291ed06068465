"""VolumeRestrictions: volumes that only one pod, or one node, may use at a time.

Two checks, as kube-scheduler makes them:

- a PersistentVolumeClaim with the ``ReadWriteOncePod`` access mode that a placed pod
  (any node) already uses refuses every node; every ``persistentVolumeClaim`` volume's
  claim must exist (else the pod is refused with the API's NotFound message), whatever
  its access modes;
- the inline disks that cannot be shared conflict with the same disk used by another
  pod on the node ("node(s) had no available disk"): a GCE persistent disk (same
  ``pdName``) or an iSCSI target (same ``iqn``) unless both mounts are read-only; an AWS
  EBS volume (same ``volumeID``) always; an RBD image (a shared monitor, same pool and
  image) unless both are read-only.

A pod with neither kind of volume costs nothing (None at PreFilter).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from draco.api.bodies import ObjView
from draco.scheduling import framework
from draco.scheduling.cluster import ClusterState
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.storage import not_found

__all__ = [
    "NAME",
    "REASON_DISK_CONFLICT",
    "REASON_READ_WRITE_ONCE_POD",
    "volume_conflict",
    "volume_restrictions_filter",
]


NAME: Final = "VolumeRestrictions"
REASON_DISK_CONFLICT: Final = "node(s) had no available disk"
REASON_READ_WRITE_ONCE_POD: Final = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
_EXCLUSIVE_SOURCES: Final = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi")


def _conflict(mine: ObjView, theirs: ObjView) -> bool:
    both_read_only = bool(mine.get("readOnly")) and bool(theirs.get("readOnly"))
    return not both_read_only


def volume_conflict(volume: ObjView, existing: ObjView) -> bool:
    """upstream's ``isVolumeConflict`` for one volume of each pod."""
    for kind in _EXCLUSIVE_SOURCES:
        mine, theirs = volume.get(kind), existing.get(kind)
        if mine is None or theirs is None:
            continue
        if kind == "gcePersistentDisk" and mine.get("pdName") == theirs.get("pdName"):
            return _conflict(mine, theirs)
        if kind == "awsElasticBlockStore" and mine.get("volumeID") == theirs.get("volumeID"):
            return True
        if kind == "iscsi" and mine.get("iqn") == theirs.get("iqn"):
            return _conflict(mine, theirs)
        if (
            kind == "rbd"
            and set(mine.get("monitors") or ()) & set(theirs.get("monitors") or ())
            and mine.get("pool") == theirs.get("pool")
            and mine.get("image") == theirs.get("image")
        ):
            return _conflict(mine, theirs)
    return False


class _Restrictions:
    __slots__ = ("_cluster", "_exclusive", "_in_use")

    def __init__(self, exclusive: tuple[ObjView, ...], in_use: bool, cluster: ClusterState) -> None:
        self._exclusive = exclusive
        self._in_use = in_use
        self._cluster = cluster

    def unfit(self, node: NodeInfo) -> str | None:
        if self._exclusive:
            for pod in self._cluster.pods_on(node.name):
                if any(volume_conflict(v, e) for v in self._exclusive for e in pod.volumes):
                    return REASON_DISK_CONFLICT
        return REASON_READ_WRITE_ONCE_POD if self._in_use else None


def _used_by_placed_pod(pod: PodInfo, claims: Collection[str], cluster: ClusterState) -> bool:
    for other in cluster.pods_in(pod.namespace):
        if other.uid == pod.uid:
            continue
        for volume in other.volumes:
            source = volume.get("persistentVolumeClaim")
            if source is not None and source.get("claimName") in claims:
                return True
    return False


def volume_restrictions_filter(
    pod: PodInfo, cluster: ClusterState
) -> framework.NodeFilter | framework.Refusal | None:
    exclusive = tuple(v for v in pod.volumes if any(v.get(kind) is not None for kind in _EXCLUSIVE_SOURCES))
    read_write_once_pod: set[str] = set()
    for volume in pod.volumes:
        source = volume.get("persistentVolumeClaim")
        if source is None:
            continue
        name = str(source.get("claimName") or "")
        claim = cluster.persistent_volume_claim(pod.namespace, name)
        if claim is None:
            return framework.Refusal(not_found("persistentvolumeclaim", name))
        if "ReadWriteOncePod" in ((claim.get("spec") or {}).get("accessModes") or ()):
            read_write_once_pod.add(name)
    in_use = bool(read_write_once_pod) and _used_by_placed_pod(pod, read_write_once_pod, cluster)
    if not exclusive and not in_use:
        return None
    return _Restrictions(exclusive, in_use, cluster)
