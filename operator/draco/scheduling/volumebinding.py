"""VolumeBinding: the pod's PersistentVolumeClaims must be bound, or bindable, on the node.

kube-scheduler's VolumeBinding, read-only (draco chooses the node; kube-scheduler binds
the claims when it binds the pod there). For a pod with claims (``persistentVolumeClaim``
volumes and generic ephemeral volumes, whose claim ``<pod>-<volume>`` the pod must own):

- PreFilter refuses the pod when a claim is missing (an ephemeral one: "waiting for
  ephemeral volume controller to create the persistentvolumeclaim ..."), lost, being
  deleted, or not owned by the pod; when its class has no ``volumeBindingMode``; and
  when a claim is unbound but not ``WaitForFirstConsumer`` (or pre-bound to a volume
  without being bound yet): "pod has unbound immediate PersistentVolumeClaims".
- Filter, per node: a bound claim's volume must exist ("... bound to non-existent pv(s)")
  and its node affinity admit the node ("node(s) didn't match PersistentVolume's node
  affinity"); an unbound ``WaitForFirstConsumer`` claim needs either an available volume of
  its class (the smallest that fits: not claimed by another claim, large enough, same
  volume mode, volume attributes class, selector, access modes, node affinity; a volume
  pre-bound to the claim wins, or fails the node if its affinity does not admit it), or
  dynamic provisioning on the node: a provisioner, the class's ``allowedTopologies``
  admitting the node's labels ("node(s) didn't find available persistent volumes to
  bind"), and, for a CSI driver with ``storageCapacity: true``, a CSIStorageCapacity of
  the class whose topology selects the node and whose ``maximumVolumeSize`` (else
  ``capacity``) holds the request ("node(s) did not have enough free storage"). A claim
  already given a node by the scheduler (``volume.kubernetes.io/selected-node``) fits
  that node only.
- Score (StorageCapacityScoring, on by default since 1.37; weight 1): for the volumes
  the pod would bind on the node, per storage class, how much of the capacity the
  requests use, scored ``100 - utilisation`` and averaged over the classes: static
  bindings (the chosen volumes' capacity) when there are any, else the dynamic
  provisions' CSIStorageCapacity. A pod with bound claims only scores every node alike.

Not done: the CSI translation of in-tree volumes (``awsElasticBlockStore``, ``gcePersistentDisk``,
...) before their node affinity is checked, which upstream does when the node's CSINode
says the plugin is migrated: draco checks the affinity as the volume states it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.api.bodies import ObjView
from draco.scheduling import framework
from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import MAX_NODE_SCORE
from draco.scheduling.labels import label_selector
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.storage import (
    claim_class,
    not_found,
    owned_by,
    pod_claims,
    storage_quantity,
    volume_class,
    volume_node_affinity_matches,
)

__all__ = [
    "NAME",
    "REASON_BIND_CONFLICT",
    "REASON_NODE_CONFLICT",
    "REASON_NOT_ENOUGH_SPACE",
    "REASON_PV_NOT_EXIST",
    "REASON_UNBOUND_IMMEDIATE",
    "PodVolumeClaims",
    "PodVolumes",
    "find_pod_volumes",
    "pod_volume_claims",
    "volume_binding_filter",
    "volume_binding_score",
]


NAME: Final = "VolumeBinding"
REASON_BIND_CONFLICT: Final = "node(s) didn't find available persistent volumes to bind"
REASON_NODE_CONFLICT: Final = "node(s) didn't match PersistentVolume's node affinity"
REASON_NOT_ENOUGH_SPACE: Final = "node(s) did not have enough free storage"
REASON_PV_NOT_EXIST: Final = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
REASON_UNBOUND_IMMEDIATE: Final = "pod has unbound immediate PersistentVolumeClaims"

BIND_COMPLETED_ANNOTATION: Final = "pv.kubernetes.io/bind-completed"
SELECTED_NODE_ANNOTATION: Final = "volume.kubernetes.io/selected-node"
NO_PROVISIONER: Final = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"


def _meta(obj: ObjView) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _spec(obj: ObjView) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _request(claim: ObjView) -> int:
    return storage_quantity((_spec(claim).get("resources") or {}).get("requests")) or 0


def _capacity(volume: ObjView) -> int:
    return storage_quantity(_spec(volume).get("capacity")) or 0


@dataclass(frozen=True, slots=True)
class PodVolumeClaims:
    """PreFilter's sorting of the pod's claims (upstream's ``PodVolumeClaims``)."""

    bound: tuple[ObjView, ...] = ()
    #: Unbound claims of a ``WaitForFirstConsumer`` class.
    delayed: tuple[ObjView, ...] = ()
    #: The PersistentVolumes of each delayed claim's class.
    volumes_by_class: Mapping[str, tuple[ObjView, ...]] = field(default_factory=dict)


def _claim_problem(pod: PodInfo, name: str, ephemeral: bool, claim: ObjView | None) -> str | None:
    """upstream's ``podHasPVCs`` checks of one claim."""
    if claim is None:
        if ephemeral:
            return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
        return not_found("persistentvolumeclaim", name)
    if (claim.get("status") or {}).get("phase") == "Lost":
        volume = _spec(claim).get("volumeName") or ""
        return f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume "{volume}"'
    if _meta(claim).get("deletionTimestamp") is not None:
        return f'persistentvolumeclaim "{name}" is being deleted'
    return owned_by(claim, pod) if ephemeral else None


def _delayed_binding(claim: ObjView, cluster: ClusterState) -> bool | str:
    """upstream's ``IsDelayBindingMode``: True for a ``WaitForFirstConsumer`` class; a
    class without a binding mode is an error (its message)."""
    name = claim_class(claim)
    if not name:
        return False
    storage_class = cluster.storage_class(name)
    if storage_class is None:
        return False
    mode = storage_class.get("volumeBindingMode")
    if mode is None:
        return f'VolumeBindingMode not set for StorageClass "{name}"'
    return bool(mode == WAIT_FOR_FIRST_CONSUMER)


def pod_volume_claims(pod: PodInfo, cluster: ClusterState) -> PodVolumeClaims | framework.Refusal | None:
    """PreFilter: None for a pod without claims; a refusal; else the claims, sorted."""
    claims: list[ObjView] = []
    for entry in pod_claims(pod):
        claim = cluster.persistent_volume_claim(pod.namespace, entry.claim)
        problem = _claim_problem(pod, entry.claim, entry.ephemeral, claim)
        if problem is not None:
            return framework.Refusal(problem)
        assert claim is not None
        claims.append(claim)
    if not claims:
        return None
    bound: list[ObjView] = []
    delayed: list[ObjView] = []
    immediate = False
    for claim in claims:
        volume = _spec(claim).get("volumeName") or ""
        if volume and BIND_COMPLETED_ANNOTATION in (_meta(claim).get("annotations") or {}):
            bound.append(claim)
            continue
        mode = _delayed_binding(claim, cluster)
        if isinstance(mode, str):
            return framework.Refusal(mode)
        if mode and not volume:
            delayed.append(claim)
        else:
            immediate = True
    if immediate:
        return framework.Refusal(REASON_UNBOUND_IMMEDIATE)
    classes = {claim_class(claim) for claim in delayed}
    by_class: dict[str, list[ObjView]] = {name: [] for name in classes}
    if classes:
        for volume in cluster.persistent_volumes():
            listed = by_class.get(volume_class(volume))
            if listed is not None:
                listed.append(volume)
    return PodVolumeClaims(
        bound=tuple(bound),
        delayed=tuple(delayed),
        volumes_by_class={name: tuple(volumes) for name, volumes in by_class.items()},
    )


@dataclass(slots=True)
class PodVolumes:
    """What binding the pod's claims on one node takes (upstream's ``PodVolumes``), or why
    it cannot (``reasons``, in upstream's order)."""

    reasons: list[str] = field(default_factory=list)
    #: (claim, volume) pairs of the volumes chosen for delayed claims.
    static: list[tuple[ObjView, ObjView]] = field(default_factory=list)
    #: (claim, CSIStorageCapacity or None) of the claims to provision.
    dynamic: list[tuple[ObjView, ObjView | None]] = field(default_factory=list)


def _bound_to(volume: ObjView, claim: ObjView) -> bool:
    """upstream's ``IsVolumeBoundToClaim``: the volume's ``claimRef`` names the claim."""
    ref = _spec(volume).get("claimRef")
    if ref is None:
        return False
    metadata = _meta(claim)
    if ref.get("name") != metadata.get("name") or ref.get("namespace") != metadata.get("namespace"):
        return False
    return not ref.get("uid") or ref.get("uid") == metadata.get("uid")


def _volume_fits(volume: ObjView, claim: ObjView) -> bool:
    """The checks of ``FindMatchingVolume`` before node affinity and availability."""
    volume_spec, claim_spec = _spec(volume), _spec(claim)
    if volume_spec.get("claimRef") is not None and not _bound_to(volume, claim):
        return False
    if _capacity(volume) < _request(claim):
        return False
    if (volume_spec.get("volumeMode") or "Filesystem") != (claim_spec.get("volumeMode") or "Filesystem"):
        return False
    if (volume_spec.get("volumeAttributesClassName") or "") != (
        claim_spec.get("volumeAttributesClassName") or ""
    ):
        return False
    return _meta(volume).get("deletionTimestamp") is None


def _available_for(volume: ObjView, claim: ObjView) -> bool:
    """An unclaimed volume's further checks: Available, selected, same class, access modes."""
    if (volume.get("status") or {}).get("phase") != "Available":
        return False
    selector = _spec(claim).get("selector")
    if selector is not None and not label_selector(selector).matches(_meta(volume).get("labels") or {}):
        return False
    if volume_class(volume) != claim_class(claim):
        return False
    offered = set(_spec(volume).get("accessModes") or ())
    return all(mode in offered for mode in _spec(claim).get("accessModes") or ())


def find_matching_volume(
    claim: ObjView, volumes: Sequence[ObjView], node: NodeInfo, excluded: set[str]
) -> ObjView | None:
    """upstream's ``FindMatchingVolume`` on the scheduler's path: the volume pre-bound to
    the claim, else the smallest available one that fits and admits the node."""
    smallest: ObjView | None = None
    for volume in volumes:
        if _meta(volume).get("name") in excluded or not _volume_fits(volume, claim):
            continue
        affinity = volume_node_affinity_matches(volume, node.labels)
        if _bound_to(volume, claim):
            return volume if affinity else None
        if not affinity or not _available_for(volume, claim):
            continue
        if smallest is None or _capacity(smallest) > _capacity(volume):
            smallest = volume
    return smallest


def _topology_admits(storage_class: ObjView, labels: Mapping[str, str]) -> bool:
    """upstream's ``MatchTopologySelectorTerms`` over ``allowedTopologies``."""
    terms = storage_class.get("allowedTopologies") or []
    if not terms:
        return True
    for term in terms:
        expressions = term.get("matchLabelExpressions") or []
        if expressions and all(
            e.get("values") and labels.get(str(e.get("key"))) in e.get("values") for e in expressions
        ):
            return True
    return False


def _capacity_for(
    claim: ObjView, class_name: str, provisioner: str, node: NodeInfo, cluster: ClusterState
) -> tuple[bool, ObjView | None]:
    """upstream's ``hasEnoughCapacity``: (enough, the CSIStorageCapacity that says so)."""
    size = storage_quantity((_spec(claim).get("resources") or {}).get("requests"))
    if size is None:
        return True, None
    driver = cluster.csi_driver(provisioner)
    if driver is None or not _spec(driver).get("storageCapacity"):
        return True, None
    for capacity in cluster.csi_storage_capacities():
        if capacity.get("storageClassName") != class_name:
            continue
        limit = storage_quantity({"storage": capacity.get("maximumVolumeSize") or capacity.get("capacity")})
        topology = capacity.get("nodeTopology")
        if (
            limit is not None
            and limit >= size
            and topology is not None
            and label_selector(topology).matches(node.labels)
        ):
            return True, capacity
    return False, None


def _provisions(
    claims: Sequence[ObjView], node: NodeInfo, cluster: ClusterState, found: PodVolumes
) -> tuple[bool, bool]:
    """upstream's ``checkVolumeProvisions``: (provisionable, enough storage); fills
    ``found.dynamic``, or an error as a reason."""
    dynamic: list[tuple[ObjView, ObjView | None]] = []
    for claim in claims:
        class_name = claim_class(claim)
        if not class_name:
            metadata = _meta(claim)
            found.reasons.append(f'no class for claim "{metadata.get("namespace")}/{metadata.get("name")}"')
            return False, True
        storage_class = cluster.storage_class(class_name)
        if storage_class is None:
            found.reasons.append(f'failed to find storage class "{class_name}"')
            return False, True
        provisioner = str(storage_class.get("provisioner") or "")
        if provisioner in ("", NO_PROVISIONER) or not _topology_admits(storage_class, node.labels):
            return False, True
        enough, capacity = _capacity_for(claim, class_name, provisioner, node, cluster)
        if not enough:
            return True, False
        dynamic.append((claim, capacity))
    found.dynamic = dynamic
    return True, True


def _bound_claims(claims: Sequence[ObjView], node: NodeInfo, cluster: ClusterState) -> tuple[bool, bool]:
    """upstream's ``checkBoundClaims``: (node affinity satisfied, every volume found)."""
    for claim in claims:
        volume = cluster.persistent_volume(str(_spec(claim).get("volumeName") or ""))
        if volume is None:
            return True, False
        if not volume_node_affinity_matches(volume, node.labels):
            return False, True
    return True, True


def _unbound_claims(
    claims: PodVolumeClaims, node: NodeInfo, cluster: ClusterState, found: PodVolumes
) -> tuple[bool, bool]:
    """The delayed claims on ``node``: (bindable, enough storage)."""
    to_match: list[ObjView] = []
    to_provision: list[ObjView] = []
    for claim in claims.delayed:
        annotations = _meta(claim).get("annotations") or {}
        if SELECTED_NODE_ANNOTATION in annotations:
            if annotations[SELECTED_NODE_ANNOTATION] != node.name:
                return False, True
            to_provision.append(claim)
        else:
            to_match.append(claim)
    bindable = True
    chosen: set[str] = set()
    for claim in sorted(to_match, key=_request):
        volume = find_matching_volume(
            claim, claims.volumes_by_class.get(claim_class(claim), ()), node, chosen
        )
        if volume is None:
            to_provision.append(claim)
            bindable = False
            continue
        chosen.add(str(_meta(volume).get("name")))
        found.static.append((claim, volume))
    if to_provision:
        return _provisions(to_provision, node, cluster, found)
    return bindable, True


def find_pod_volumes(claims: PodVolumeClaims, node: NodeInfo, cluster: ClusterState) -> PodVolumes:
    """upstream's ``FindPodVolumes``: the pod's claims on ``node``."""
    found = PodVolumes()
    affinity_ok, volumes_found = _bound_claims(claims.bound, node, cluster) if claims.bound else (True, True)
    bindable, enough = _unbound_claims(claims, node, cluster, found) if claims.delayed else (True, True)
    for failed, reason in (
        (not affinity_ok, REASON_NODE_CONFLICT),
        (not bindable, REASON_BIND_CONFLICT),
        (not enough, REASON_NOT_ENOUGH_SPACE),
        (not volumes_found, REASON_PV_NOT_EXIST),
    ):
        if failed:
            found.reasons.append(reason)
    return found


class _Binding:
    __slots__ = ("_claims", "_cluster")

    def __init__(self, claims: PodVolumeClaims, cluster: ClusterState) -> None:
        self._claims = claims
        self._cluster = cluster

    def unfit(self, node: NodeInfo) -> str | None:
        reasons = find_pod_volumes(self._claims, node, self._cluster).reasons
        return reasons[0] if reasons else None


def volume_binding_filter(
    pod: PodInfo, cluster: ClusterState
) -> framework.NodeFilter | framework.Refusal | None:
    claims = pod_volume_claims(pod, cluster)
    if claims is None or isinstance(claims, framework.Refusal):
        return claims
    return _Binding(claims, cluster)


# --- score -------------------------------------------------------------------------------


def _utilisation_score(requested: int, capacity: int) -> int:
    """The default shape of 1.37 (utilisation 0 scores 100, 100 scores 0, linear)."""
    utilisation = 100 if capacity == 0 or requested > capacity else requested * 100 // capacity
    return MAX_NODE_SCORE - utilisation


def node_volume_score(found: PodVolumes) -> int:
    """The score of one node's bindings: static ones if any, else provisions with capacity."""
    classes: dict[str, list[int]] = {}
    if found.static:
        for claim, volume in found.static:
            entry = classes.setdefault(str(_spec(volume).get("storageClassName") or ""), [0, 0])
            entry[0] += _request(claim)
            entry[1] += _capacity(volume)
    else:
        for claim, capacity in found.dynamic:
            if capacity is None:
                continue
            entry = classes.setdefault(claim_class(claim), [0, 0])
            entry[0] += _request(claim)
            entry[1] = storage_quantity({"storage": capacity.get("capacity")}) or 0
    if not classes:
        return 0
    total = sum(_utilisation_score(requested, capacity) for requested, capacity in classes.values())
    return math.floor(total / len(classes) + 0.5)


def volume_binding_score(pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]) -> list[int] | None:
    """None unless the pod has claims to bind (bound claims score 0 on every node)."""
    claims = pod_volume_claims(pod, cluster)
    if not isinstance(claims, PodVolumeClaims) or not claims.delayed:
        return None
    values = []
    for node in nodes:
        found = find_pod_volumes(claims, node, cluster)
        values.append(0 if found.reasons else node_volume_score(found))
    return values
