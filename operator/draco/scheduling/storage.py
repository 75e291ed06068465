"""What the volume rules read alike from pods, claims, volumes and classes.

VolumeRestrictions, NodeVolumeLimits, VolumeBinding and VolumeZone each look up a pod's
PersistentVolumeClaims (a ``persistentVolumeClaim`` volume names its claim; a generic
``ephemeral`` volume's claim is ``<pod>-<volume>``, and must be owned by the pod), the
claims' and volumes' storage classes (the beta annotation first, as upstream's helpers),
a volume's node affinity (as the scheduler checks it: on the node's labels alone), and
quantities; and they word a missing object as the API's NotFound error does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from draco.allocator.nodeselect import node_selector_matches
from draco.api.bodies import ObjView
from draco.quantity import Quantity
from draco.scheduling.podinfo import PodInfo

__all__ = [
    "BETA_STORAGE_CLASS_ANNOTATION",
    "PodClaim",
    "claim_class",
    "not_found",
    "owned_by",
    "pod_claims",
    "storage_quantity",
    "volume_class",
    "volume_node_affinity_matches",
]


BETA_STORAGE_CLASS_ANNOTATION: Final = "volume.beta.kubernetes.io/storage-class"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A volume of the pod backed by a PersistentVolumeClaim."""

    volume: ObjView
    claim: str
    ephemeral: bool


def pod_claims(pod: PodInfo) -> Iterator[PodClaim]:
    """The pod's ``persistentVolumeClaim`` and generic ``ephemeral`` volumes, in order."""
    for volume in pod.volumes:
        source = volume.get("persistentVolumeClaim")
        if source is not None:
            yield PodClaim(volume, str(source.get("claimName") or ""), ephemeral=False)
        elif volume.get("ephemeral") is not None:
            yield PodClaim(volume, f"{pod.name}-{volume.get('name', '')}", ephemeral=True)


def not_found(resource: str, name: str) -> str:
    """The API's NotFound message, as the scheduler passes it on (``persistentvolumeclaim
    "data" not found``)."""
    return f'{resource} "{name}" not found'


def owned_by(claim: ObjView, pod: PodInfo) -> str | None:
    """None when the pod controls the claim (a generic ephemeral volume's); else why not."""
    metadata = claim.get("metadata") or {}
    namespace, name = metadata.get("namespace") or "", metadata.get("name") or ""
    controller = next(
        (ref for ref in metadata.get("ownerReferences") or () if ref.get("controller")),
        None,
    )
    if namespace == pod.namespace and controller is not None and controller.get("uid") == pod.uid:
        return None
    return f"PVC {namespace}/{name} was not created for pod {pod.namespace}/{pod.name} (pod is not owner)"


def _annotated_class(obj: ObjView) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return (
        str(annotations[BETA_STORAGE_CLASS_ANNOTATION])
        if BETA_STORAGE_CLASS_ANNOTATION in annotations
        else None
    )


def claim_class(claim: ObjView) -> str:
    """The claim's storage class (``""``: none)."""
    annotated = _annotated_class(claim)
    return (
        annotated if annotated is not None else str((claim.get("spec") or {}).get("storageClassName") or "")
    )


def volume_class(volume: ObjView) -> str:
    """The PersistentVolume's storage class (``""``: none)."""
    annotated = _annotated_class(volume)
    return (
        annotated if annotated is not None else str((volume.get("spec") or {}).get("storageClassName") or "")
    )


def storage_quantity(amounts: Mapping[str, Any] | None) -> int | None:
    """``storage`` of a requests or capacity map, in bytes; None when absent."""
    if not amounts or amounts.get("storage") is None:
        return None
    try:
        return Quantity.parse(str(amounts["storage"])).value()
    except ValueError:
        return None


def volume_node_affinity_matches(volume: ObjView, labels: Mapping[str, str]) -> bool:
    """upstream's ``CheckNodeAffinity``: the PersistentVolume's required node affinity on
    the node's labels. The scheduler hands it a node with labels only, so ``matchFields``
    never excludes a node; a term without any requirement matches nothing."""
    required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    if required is None:
        return True
    terms: Sequence[ObjView] = required.get("nodeSelectorTerms") or ()
    for term in terms:
        expressions = term.get("matchExpressions") or []
        if not expressions and not term.get("matchFields"):
            continue
        if not expressions:
            return True
        if node_selector_matches(
            {"nodeSelectorTerms": [{"matchExpressions": expressions}]}, name="", labels=labels
        ):
            return True
    return False
