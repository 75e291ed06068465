"""ImageLocality's score: prefer nodes that already hold the pod's container images.

For each image of the pod (init containers, containers, and ``image`` volumes' references;
a name without a tag is looked up as ``:latest``, no other normalisation, as upstream), a
node holding it (``status.images``, :attr:`NodeInfo.images`) earns the image's size scaled
by the share of all nodes holding it (so an image everywhere counts fully, a rare one
little: spreading it is no reason to pick a node). The sum is clamped between 23 MB and
1000 MB per image and mapped linearly onto 0..100; weight 1 in the default profile.

The rule needs the nodes' images: when the node records are kept without them, or no node
holds any of the pod's images, every node scores 0 and the rule answers None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from draco.scheduling.cluster import ClusterState
from draco.scheduling.framework import MAX_NODE_SCORE
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import PodInfo

__all__ = [
    "MAX_CONTAINER_THRESHOLD",
    "MIN_THRESHOLD",
    "NAME",
    "image_locality_score",
    "normalized_image_name",
]

NAME: Final = "ImageLocality"
_MB: Final = 1024 * 1024
#: Below this sum a node scores 0 (upstream's ``minThreshold``).
MIN_THRESHOLD: Final = 23 * _MB
#: Per image: above this many bytes a node scores 100 (``maxContainerThreshold``).
MAX_CONTAINER_THRESHOLD: Final = 1000 * _MB


def normalized_image_name(name: str) -> str:
    """``name:latest`` when ``name`` has no tag (its last ``:`` is not after its last ``/``)."""
    return f"{name}:latest" if name.rfind(":") <= name.rfind("/") else name


def _pod_images(pod: PodInfo) -> tuple[list[str], int]:
    """The pod's image names to look up, and how many images the pod has."""
    names = [normalized_image_name(image) for image in pod.images]
    count = len(pod.images)
    for volume in pod.volumes:
        image = volume.get("image")
        if image is None:
            continue
        count += 1
        if image.get("reference"):
            names.append(normalized_image_name(str(image["reference"])))
    return names, count


def _priority(total: int, images: int) -> int:
    maximum = MAX_CONTAINER_THRESHOLD * images
    clamped = min(max(total, MIN_THRESHOLD), maximum)
    return MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (maximum - MIN_THRESHOLD)


def image_locality_score(pod: PodInfo, cluster: ClusterState, nodes: Sequence[NodeInfo]) -> list[int] | None:
    names, count = _pod_images(pod)
    total_nodes = len(cluster.node_names())
    held = [(name, state) for name in names if (state := cluster.image_state(name)) is not None]
    if not held or not total_nodes:
        return None
    scaled = {
        name: int(float(state.size) * (float(state.nodes) / float(total_nodes))) for name, state in held
    }
    values = [
        _priority(sum(scaled[name] for name, _ in held if name in node.images), count) for node in nodes
    ]
    return values
