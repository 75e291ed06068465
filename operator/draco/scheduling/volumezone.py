"""VolumeZone: a pod's bound PersistentVolumes must be in the node's zone and region.

For each ``persistentVolumeClaim`` volume (generic ephemeral volumes are not looked at,
as upstream), the claim's bound volume is read; its zone and region labels
(``topology.kubernetes.io/zone|region`` and the deprecated
``failure-domain.beta.kubernetes.io/zone|region``; a value may list several zones joined
by ``__``) must each find the same label on the node, or its GA spelling for a beta key,
with one of the listed values ("node(s) had no available volume zone"). A node without
any of the four labels is not checked. An unbound claim of a ``WaitForFirstConsumer`` class
is left to VolumeBinding; any other unbound claim, a missing claim, class or volume
refuses the pod with upstream's words. A pod whose volumes carry none of these labels costs
nothing (None at PreFilter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from draco.api.bodies import ObjView
from draco.scheduling import framework
from draco.scheduling.cluster import ClusterState
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.storage import claim_class, not_found

__all__ = ["NAME", "REASON", "TOPOLOGY_LABELS", "volume_zone_filter"]


NAME: Final = "VolumeZone"
REASON: Final = "node(s) had no available volume zone"

_BETA_ZONE: Final = "failure-domain.beta.kubernetes.io/zone"
_BETA_REGION: Final = "failure-domain.beta.kubernetes.io/region"
_ZONE: Final = "topology.kubernetes.io/zone"
_REGION: Final = "topology.kubernetes.io/region"
#: The labels VolumeZone compares, in upstream's order.
TOPOLOGY_LABELS: Final = (_BETA_ZONE, _BETA_REGION, _ZONE, _REGION)
_GA: Final = {_BETA_ZONE: _ZONE, _BETA_REGION: _REGION}
#: How a volume's label lists several zones.
_ZONE_DELIMITER: Final = "__"


@dataclass(frozen=True, slots=True)
class _Topology:
    key: str
    values: frozenset[str]


def _zones(value: str) -> frozenset[str] | None:
    """A label's zones; None when one of them is empty (upstream then ignores the label)."""
    zones = [zone.strip() for zone in value.split(_ZONE_DELIMITER)]
    return None if any(not zone for zone in zones) else frozenset(zones)


def _topologies(volume: ObjView) -> list[_Topology]:
    labels = (volume.get("metadata") or {}).get("labels") or {}
    found = []
    for key in TOPOLOGY_LABELS:
        if key in labels and (zones := _zones(str(labels[key]))) is not None:
            found.append(_Topology(key, zones))
    return found


def _pod_topologies(pod: PodInfo, cluster: ClusterState) -> list[_Topology] | framework.Refusal:
    """upstream's ``getPVbyPod``: the topologies of the pod's bound volumes, or a refusal."""
    topologies: list[_Topology] = []
    for volume in pod.volumes:
        source = volume.get("persistentVolumeClaim")
        if source is None:
            continue
        name = str(source.get("claimName") or "")
        if not name:
            return framework.Refusal("PersistentVolumeClaim had no name")
        claim = cluster.persistent_volume_claim(pod.namespace, name)
        if claim is None:
            return framework.Refusal(not_found("persistentvolumeclaim", name))
        volume_name = str((claim.get("spec") or {}).get("volumeName") or "")
        if not volume_name:
            class_name = claim_class(claim)
            if not class_name:
                return framework.Refusal("PersistentVolumeClaim had no pv name and storageClass name")
            storage_class = cluster.storage_class(class_name)
            if storage_class is None:
                return framework.Refusal(not_found("storageclass.storage.k8s.io", class_name))
            mode = storage_class.get("volumeBindingMode")
            if mode is None:
                return framework.Refusal(f'VolumeBindingMode not set for StorageClass "{class_name}"')
            if mode == "WaitForFirstConsumer":
                continue
            return framework.Refusal("PersistentVolume had no name")
        bound = cluster.persistent_volume(volume_name)
        if bound is None:
            return framework.Refusal(not_found("persistentvolume", volume_name))
        topologies.extend(_topologies(bound))
    return topologies


class _Zones:
    __slots__ = ("_topologies",)

    def __init__(self, topologies: tuple[_Topology, ...]) -> None:
        self._topologies = topologies

    def unfit(self, node: NodeInfo) -> str | None:
        labels = node.labels
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return None
        for topology in self._topologies:
            value = labels.get(topology.key)
            if value is None:
                value = labels.get(_GA.get(topology.key, topology.key))
            if value is None or value not in topology.values:
                return REASON
        return None


def volume_zone_filter(
    pod: PodInfo, cluster: ClusterState
) -> framework.NodeFilter | framework.Refusal | None:
    if not pod.volumes:
        return None
    topologies = _pod_topologies(pod, cluster)
    if isinstance(topologies, framework.Refusal):
        return topologies
    return _Zones(tuple(topologies)) if topologies else None
