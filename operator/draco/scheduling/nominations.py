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
from draco.scheduling.groups import group_of, group_of_labels
from draco.scheduling.podinfo import PodInfo

__all__ = ["Nominations", "nominated_node"]


def nominated_node(pod: PodBody) -> str | None:
    """``status.nominatedNodeName`` of a pod not placed and not being deleted, or None."""
    if meta_of(pod).get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
        return None
    return (pod.get("status") or {}).get("nominatedNodeName") or None


@dataclass
class Nominations:
    """Pod key -> (nominated node, priority, its group's key or "")."""

    _by_pod: dict[str, tuple[str, int, str]] = field(default_factory=dict)

    def note(self, pod: PodBody, *, placed: bool = False) -> None:
        """A pod as last seen (``placed``: it is bound or pinned, so its nomination ended)."""
        key = key_of(pod)
        node = None if placed else nominated_node(pod)
        if node is None:
            self._by_pod.pop(key, None)
        else:
            group = group_of(pod)
            priority = int((pod.get("spec") or {}).get("priority") or 0)
            self._by_pod[key] = (node, priority, group.key if group is not None else "")

    def forget(self, key: str) -> None:
        self._by_pod.pop(key, None)

    def of(self, key: str) -> str | None:
        found = self._by_pod.get(key)
        return found[0] if found is not None else None

    def kept_from(self, pod: PodInfo) -> frozenset[str]:
        """The nodes nominated for another pod of ``pod``'s priority or higher (not of
        its own group: a group's members preempted together, for each other)."""
        if not self._by_pod:
            return frozenset()
        ref = group_of_labels(pod.namespace, pod.labels, {})
        own = ref.key if ref is not None else None
        return frozenset(
            node
            for key, (node, priority, group) in self._by_pod.items()
            if key != pod.key and priority >= pod.priority and (not group or group != own)
        )

    def group_nominated(self, group: str) -> bool:
        """Whether a member of ``group`` (its key) is nominated: the group preempted."""
        return any(g == group for _, _, g in self._by_pod.values())
