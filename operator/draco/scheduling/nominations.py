"""Which nodes are nominated for pods that preempted, and what that keeps from others; pure.

A pod that preempted (`draco.scheduling.preemption`) carries ``status.nominatedNodeName``
until it is placed. Meanwhile what its victims free there is its own: kube-scheduler
counts a nominated pod on its node when it places a pod of lower or equal priority
(``addNominatedPods``). draco cannot know before the victims are gone which devices the
nominated pod will take, so it keeps the whole node from pods of lower or equal priority
until the nomination ends (the pod is placed, gone, or nominated elsewhere). The
nominations are the pods' own status, fed from the pod informer: after a restart they are
what the API says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draco.api.bodies import key_of, meta_of
from draco.api.corebodies import PodBody
from draco.scheduling.podinfo import PodInfo

__all__ = ["Nominations", "nominated_node"]


def nominated_node(pod: PodBody) -> str | None:
    """``status.nominatedNodeName`` of a pod not placed and not being deleted, or None."""
    if meta_of(pod).get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
        return None
    return (pod.get("status") or {}).get("nominatedNodeName") or None


@dataclass
class Nominations:
    """Pod key -> (nominated node, priority)."""

    _by_pod: dict[str, tuple[str, int]] = field(default_factory=dict)

    def note(self, pod: PodBody, *, placed: bool = False) -> None:
        """A pod as last seen (``placed``: it is bound or pinned, so its nomination ended)."""
        key = key_of(pod)
        node = None if placed else nominated_node(pod)
        if node is None:
            self._by_pod.pop(key, None)
        else:
            self._by_pod[key] = (node, int((pod.get("spec") or {}).get("priority") or 0))

    def forget(self, key: str) -> None:
        self._by_pod.pop(key, None)

    def of(self, key: str) -> str | None:
        found = self._by_pod.get(key)
        return found[0] if found is not None else None

    def kept_from(self, pod: PodInfo) -> frozenset[str]:
        """The nodes nominated for another pod of ``pod``'s priority or higher."""
        return frozenset(
            node
            for key, (node, priority) in self._by_pod.items()
            if key != pod.key and priority >= pod.priority
        )
