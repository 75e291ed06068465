"""What the lifecycle controller remembers between syncs: informer-like caches of pods and
claims, fed by watch events and rebuilt from a LIST at start.

Upstream's resourceclaim controller decides *whether* to sync from its informers' caches
and indexes (pods by referenced claim, claims by owning pod) and acts on the API with
optimistic concurrency. These stores are that, and nothing else: everything here can be
rebuilt from the API, and a stale entry only ever causes an extra sync or a live GET,
never a wrong write (writes go through resourceVersion preconditions).

- `PodStore`: trimmed pods by `ns/name`, plus which pods reference a claim by name or a
  template (to re-evaluate them when the claim or template appears).
- `ClaimStore`: claims by `ns/name`, indexed by the UIDs of the pods that own them or hold
  a reservation, with upstream's *mutation cache* for claims the controller just created
  (so a retry before the watch event arrives never creates a duplicate).
- `DeletedPods`: an LRU of deleted pod UIDs (upstream keeps 500) to prune reservations
  without asking the API.
"""

from __future__ import annotations

import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterator
from typing import Final

from draco.api.constants import POD_CLAIM_NAME_ANNOTATION
from draco.kube.client import Obj, key_of
from draco.scheduling.podclaims import PodClaimsError, claim_statuses, controller_pod_uid, parse_pod_claims

__all__ = ["ClaimStore", "DeletedPods", "PodStore", "without_managed_fields"]

#: How long a just-created claim is trusted without having been seen in a watch event.
MUTATION_CACHE_TTL: Final = 3600.0


def _trim_pod(pod: Obj) -> Obj:
    """The fields of a pod the lifecycle reads (a full pod spec can be large)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            key: meta[key]
            for key in (
                "name",
                "namespace",
                "uid",
                "annotations",
                "deletionTimestamp",
                "ownerReferences",
                "labels",
            )
            if key in meta
        },
        "spec": {key: spec[key] for key in ("nodeName", "schedulingGates", "affinity") if key in spec},
        "status": {key: status[key] for key in ("phase",) if key in status},
    }


class PodStore:
    """Pods by `ns/name`, with an index of the claim and template names they reference."""

    def __init__(self) -> None:
        self._pods: dict[str, Obj] = {}
        self._refs: dict[str, set[tuple[str, str]]] = {}
        self._by_ref: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        self._by_uid: dict[str, str] = {}

    def upsert(self, pod: Obj) -> Obj:
        trimmed = _trim_pod(pod)
        key = key_of(trimmed)
        self.remove(key)
        self._pods[key] = trimmed
        uid = trimmed["metadata"].get("uid")
        if uid:
            self._by_uid[uid] = key
        refs = self._references(trimmed)
        self._refs[key] = refs
        for ref in refs:
            self._by_ref[ref].add(key)
        return trimmed

    def remove(self, key: str) -> Obj | None:
        old = self._pods.pop(key, None)
        for ref in self._refs.pop(key, set()):
            keys = self._by_ref.get(ref)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_ref[ref]
        if old is not None:
            uid = old["metadata"].get("uid")
            if uid and self._by_uid.get(uid) == key:
                del self._by_uid[uid]
        return old

    def get(self, key: str) -> Obj | None:
        return self._pods.get(key)

    def key_for_uid(self, uid: str) -> str | None:
        return self._by_uid.get(uid)

    def referencing(self, kind: str, key: str) -> set[str]:
        """Pods whose claims annotation names `kind` ("claim" by name, "template") `ns/name`,
        or whose claim-statuses annotation records claim `ns/name` (kind "claim")."""
        return set(self._by_ref.get((kind, key), ()))

    def __len__(self) -> int:
        return len(self._pods)

    @staticmethod
    def _references(pod: Obj) -> set[tuple[str, str]]:
        namespace = pod["metadata"].get("namespace", "")
        refs: set[tuple[str, str]] = set()
        try:
            entries = parse_pod_claims(pod)
        except PodClaimsError:
            entries = []
        for entry in entries:
            if entry.resource_claim_name is not None:
                refs.add(("claim", f"{namespace}/{entry.resource_claim_name}"))
            if entry.resource_claim_template_name is not None:
                refs.add(("template", f"{namespace}/{entry.resource_claim_template_name}"))
        for claim_name in claim_statuses(pod).values():
            if claim_name:
                refs.add(("claim", f"{namespace}/{claim_name}"))
        return refs


class ClaimStore:
    """Claims by `ns/name`, indexed by the pods (UIDs) that own them or are reserved on them."""

    def __init__(self) -> None:
        self._claims: dict[str, Obj] = {}
        self._pod_uids: dict[str, set[str]] = {}
        self._by_pod_uid: defaultdict[str, set[str]] = defaultdict(set)
        self._created: OrderedDict[str, tuple[float, Obj]] = OrderedDict()

    def upsert(self, claim: Obj) -> None:
        # As the claim informer keeps it: this store holds every claim, for good.
        claim = without_managed_fields(claim)
        key = key_of(claim)
        self._created.pop(key, None)  # the watch has caught up with our own create
        self._unindex(key)
        self._claims[key] = claim
        uids = self._related_uids(claim)
        self._pod_uids[key] = uids
        for uid in uids:
            self._by_pod_uid[uid].add(key)

    def remove(self, key: str) -> None:
        self._created.pop(key, None)
        self._unindex(key)
        self._claims.pop(key, None)

    def created(self, claim: Obj) -> None:
        """Remember a claim this process just created, until the watch reports it."""
        self._created[key_of(claim)] = (time.monotonic(), claim)
        self._expire()

    def get(self, key: str) -> Obj | None:
        found = self._claims.get(key)
        if found is not None:
            return found
        entry = self._created.get(key)
        return entry[1] if entry is not None else None

    def for_pod_uid(self, uid: str) -> set[str]:
        """Keys of claims owned by the pod or reserved for it (the mutation cache included)."""
        keys = set(self._by_pod_uid.get(uid, ()))
        keys.update(key for key, (_, claim) in self._created.items() if controller_pod_uid(claim) == uid)
        return keys

    def owned_by(self, uid: str, *, pod_claim_name: str) -> Obj | None:
        """The first claim controlled by pod `uid` that was generated for `pod_claim_name`
        (upstream's orphan adoption), looking at just-created claims too."""
        for key in sorted(self.for_pod_uid(uid)):
            claim = self.get(key)
            if claim is None or controller_pod_uid(claim) != uid:
                continue
            annotations = (claim.get("metadata") or {}).get("annotations") or {}
            if annotations.get(POD_CLAIM_NAME_ANNOTATION) == pod_claim_name:
                return claim
        return None

    def values(self) -> Iterator[Obj]:
        """Every known claim (what the `resource_claims` gauge counts)."""
        self._expire()
        yield from list(self._claims.values())
        yield from [claim for key, (_, claim) in list(self._created.items()) if key not in self._claims]

    def __len__(self) -> int:
        return len(self._claims)

    def _unindex(self, key: str) -> None:
        for uid in self._pod_uids.pop(key, set()):
            keys = self._by_pod_uid.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_pod_uid[uid]

    def _expire(self) -> None:
        now = time.monotonic()
        while self._created:
            key, (at, _) = next(iter(self._created.items()))
            if now - at < MUTATION_CACHE_TTL:
                return
            del self._created[key]

    @staticmethod
    def _related_uids(claim: Obj) -> set[str]:
        uids: set[str] = set()
        owner = controller_pod_uid(claim)
        if owner:
            uids.add(owner)
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if ref.get("resource") == "pods" and not ref.get("apiGroup") and ref.get("uid"):
                uids.add(str(ref["uid"]))
        return uids


class DeletedPods:
    """UIDs of pods seen deleted, most recent last, at most `size` of them."""

    def __init__(self, size: int = 500) -> None:
        self._size = size
        self._uids: OrderedDict[str, None] = OrderedDict()

    def add(self, uid: str) -> None:
        self._uids[uid] = None
        self._uids.move_to_end(uid)
        while len(self._uids) > self._size:
            self._uids.popitem(last=False)

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids


def without_managed_fields(obj: Obj) -> Obj:
    """`obj` without `metadata.managedFields` (often most of a pod's size, read by nobody
    here): what the pod informer caches. Everything else stays, because a consumer that
    subscribes late is handed the cached pods as they are."""
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def trimmed(pod: Obj) -> Obj:
    """A pod trimmed to what the stores keep (for tests and callers comparing bodies)."""
    return _trim_pod(pod)


def claim_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"
