"""NodeVolumeLimits: a node attaches at most as many volumes per CSI driver as its CSINode says.

Each driver of a node's CSINode may state ``allocatable.count``, the volumes it can attach
there. The pod's volumes that would be new on the node (not already attached for a pod
placed there, nor by a VolumeAttachment to the node) must fit beside those attached, per
driver ("node(s) exceed max volume count"). A volume is counted under its driver with
a unique name: a claim bound to a CSI PersistentVolume by the volume's driver and handle;
an unbound claim (or one whose volume is missing) by its class's provisioner, as one new
volume per claim. The in-tree plugins that kube-scheduler counts as migrated to CSI when
the node has a CSINode (AWS EBS, GCE PD, Azure Disk, Cinder, Portworx), inline or as
PersistentVolumes, count under their CSI driver, named by the disk's id. Since 1.37
(VolumeLimitScaling) a driver whose CSIDriver sets ``preventPodSchedulingIfMissing`` must
also be installed on the node ("<driver> CSI driver is not installed on the node").

A pod without claims or such in-tree volumes costs nothing (None at PreFilter). The
in-tree EBS/GCE PD/Azure Disk/Cinder limit plugins of older profiles are gone from 1.37
and are not ported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Final

from draco.api.bodies import ObjView
from draco.scheduling import framework
from draco.scheduling.cluster import ClusterState
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.storage import claim_class, not_found, owned_by, pod_claims

__all__ = ["MIGRATED_DRIVERS", "NAME", "REASON", "attachable_volumes", "volume_limits_filter"]


NAME: Final = "NodeVolumeLimits"
REASON: Final = "node(s) exceed max volume count"

#: In-tree plugin -> the CSI driver its volumes count under (upstream's ``isCSIMigrationOn``).
MIGRATED_DRIVERS: Final = {
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}
#: In-tree volume source -> (its plugin, the field naming the disk).
_IN_TREE: Final = {
    "awsElasticBlockStore": ("kubernetes.io/aws-ebs", "volumeID"),
    "gcePersistentDisk": ("kubernetes.io/gce-pd", "pdName"),
    "azureDisk": ("kubernetes.io/azure-disk", "diskURI"),
    "cinder": ("kubernetes.io/cinder", "volumeID"),
    "portworxVolume": ("kubernetes.io/portworx-volume", "volumeID"),
}
#: Prefix of the names given to volumes not provisioned yet (upstream: a random one).
_UNBOUND: Final = "draco-unbound"
_BETA_ZONE: Final = "failure-domain.beta.kubernetes.io/zone"
_ZONE: Final = "topology.kubernetes.io/zone"
_ZONE_DELIMITER: Final = "__"


def _gce_handle(pd_name: str, labels: Mapping[str, str]) -> str:
    """The CSI handle of a GCE PD (zonal, regional when its PV lists several zones)."""
    zones = (labels.get(_BETA_ZONE) or labels.get(_ZONE) or "").split(_ZONE_DELIMITER)
    if len(zones) > 1:
        return f"projects/UNSPECIFIED/regions/{zones[0].rsplit('-', 1)[0]}/disks/{pd_name}"
    return f"projects/UNSPECIFIED/zones/{zones[0] or 'UNSPECIFIED'}/disks/{pd_name}"


def _in_tree(source: ObjView, csi_node: ObjView | None, labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(driver, handle) of an in-tree volume source the node counts under CSI, else None;
    the handle as the CSI translation names the disk (``labels``: its PV's, for a GCE PD's
    zone), so that one disk used inline and as a volume counts once."""
    if csi_node is None:
        return None
    for kind, (plugin, id_field) in _IN_TREE.items():
        disk = source.get(kind)
        if disk is None or not disk.get(id_field):
            continue
        handle = str(disk[id_field])
        if kind == "awsElasticBlockStore" and handle.startswith("aws://"):
            handle = handle.rstrip("/").rsplit("/", 1)[-1]
        elif kind == "gcePersistentDisk":
            handle = _gce_handle(handle, labels)
        return MIGRATED_DRIVERS[plugin], handle
    return None


def _from_class(claim: ObjView, csi_node: ObjView | None, cluster: ClusterState) -> tuple[str, str] | None:
    """upstream's ``getCSIDriverInfoFromSC``: the driver a claim will be provisioned by."""
    name = claim_class(claim)
    storage_class = cluster.storage_class(name) if name else None
    if storage_class is None:
        return None
    metadata = claim.get("metadata") or {}
    handle = f"{_UNBOUND}-{metadata.get('namespace')}/{metadata.get('name')}"
    provisioner = str(storage_class.get("provisioner") or "")
    if provisioner in MIGRATED_DRIVERS:
        return None if csi_node is None else (MIGRATED_DRIVERS[provisioner], handle)
    return provisioner, handle


def _claim_driver(claim: ObjView, csi_node: ObjView | None, cluster: ClusterState) -> tuple[str, str] | None:
    """upstream's ``getCSIDriverInfo``: (driver, handle) of a claim's volume."""
    volume_name = str((claim.get("spec") or {}).get("volumeName") or "")
    volume = cluster.persistent_volume(volume_name) if volume_name else None
    if volume is None:
        return _from_class(claim, csi_node, cluster)
    spec = volume.get("spec") or {}
    csi = spec.get("csi")
    if csi is None:
        return _in_tree(spec, csi_node, (volume.get("metadata") or {}).get("labels") or {})
    return str(csi.get("driver") or ""), str(csi.get("volumeHandle") or "")


def attachable_volumes(
    pod: PodInfo, csi_node: ObjView | None, cluster: ClusterState, *, new: bool
) -> dict[str, str] | str:
    """upstream's ``filterAttachableVolumes``: unique volume name -> driver of the pod's
    attachable volumes; or why they cannot be read (a missing claim matters for the pod
    being placed only)."""
    found: dict[str, str] = {}
    claims = {id(entry.volume): entry for entry in pod_claims(pod)}
    for volume in pod.volumes:
        entry = claims.get(id(volume))
        if entry is None:
            counted = _in_tree(volume, csi_node, {})
        else:
            claim = cluster.persistent_volume_claim(pod.namespace, entry.claim)
            if claim is None:
                if new:
                    return f"looking up PVC {pod.namespace}/{entry.claim}: " + not_found(
                        "persistentvolumeclaim", entry.claim
                    )
                continue
            if entry.ephemeral and (problem := owned_by(claim, pod)) is not None:
                return problem
            counted = _claim_driver(claim, csi_node, cluster)
        if counted is not None and counted[0] and counted[1]:
            found[f"{counted[0]}/{counted[1]}"] = counted[0]
    return found


def _limits(csi_node: ObjView | None) -> dict[str, int]:
    drivers = ((csi_node or {}).get("spec") or {}).get("drivers") or ()
    return {
        str(d.get("name")): int(d["allocatable"]["count"])
        for d in drivers
        if (d.get("allocatable") or {}).get("count") is not None
    }


def _missing_driver(drivers: Iterable[str], csi_node: ObjView | None, cluster: ClusterState) -> str | None:
    """The first driver that must be installed on the node and is not (VolumeLimitScaling)."""
    installed = {str(d.get("name")) for d in ((csi_node or {}).get("spec") or {}).get("drivers") or ()}
    for name in drivers:
        driver = cluster.csi_driver(name)
        if driver is None or not (driver.get("spec") or {}).get("preventPodSchedulingIfMissing"):
            continue
        if csi_node is None or name not in installed:
            return name
    return None


def _attachments(node: str, cluster: ClusterState) -> dict[str, str]:
    """Unique name -> driver of the CSI volumes VolumeAttachments attach to ``node``."""
    attached: dict[str, str] = {}
    for attachment in cluster.volume_attachments(node):
        spec = attachment.get("spec") or {}
        attacher = str(spec.get("attacher") or "")
        volume_name = (spec.get("source") or {}).get("persistentVolumeName")
        if not attacher or not volume_name:
            continue
        volume = cluster.persistent_volume(str(volume_name))
        csi = ((volume or {}).get("spec") or {}).get("csi")
        if csi is not None:
            attached[f"{attacher}/{csi.get('volumeHandle', '')}"] = attacher
    return attached


class _VolumeLimits:
    __slots__ = ("_cluster", "_pod")

    def __init__(self, pod: PodInfo, cluster: ClusterState) -> None:
        self._pod = pod
        self._cluster = cluster

    def unfit(self, node: NodeInfo) -> str | None:
        csi_node = self._cluster.csi_node(node.name)
        wanted = attachable_volumes(self._pod, csi_node, self._cluster, new=True)
        if isinstance(wanted, str):
            return wanted
        if not wanted:
            return None
        missing = _missing_driver(dict.fromkeys(wanted.values()), csi_node, self._cluster)
        if missing is not None:
            return f"{missing} CSI driver is not installed on the node"
        limits = _limits(csi_node)
        if not limits:
            return None
        attached: dict[str, str] = {}
        for pod in self._cluster.pods_on(node.name):
            volumes = attachable_volumes(pod, csi_node, self._cluster, new=False)
            if isinstance(volumes, str):
                return volumes
            attached.update(volumes)
        in_use = Counter(attached.values())
        for name, driver in _attachments(node.name, self._cluster).items():
            if name not in attached:
                in_use[driver] += 1
        new = Counter(driver for name, driver in wanted.items() if name not in attached)
        for driver, count in new.items():
            if driver in limits and in_use[driver] + count > limits[driver]:
                return REASON
        return None


def volume_limits_filter(pod: PodInfo, cluster: ClusterState) -> framework.NodeFilter | None:
    """Skipped unless the pod has a claim or an in-tree volume that may count."""
    for volume in pod.volumes:
        if volume.get("persistentVolumeClaim") is not None or volume.get("ephemeral") is not None:
            return _VolumeLimits(pod, cluster)
        if any(volume.get(kind) is not None for kind in _IN_TREE):
            return _VolumeLimits(pod, cluster)
    return None
