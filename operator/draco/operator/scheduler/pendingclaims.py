"""What the allocation reads of unallocated claims between attempts, from the claim
informer (no copy of its own): their watched bodies (read instead of a GET: every write
that depends on one carries its resourceVersion, so a stale body only costs a conflict
and a re-read), which claims were generated for which pod entry (how a gated pod finds
the claim the lifecycle made for it before the claim-statuses annotation records it: the
pin writes the annotation), and the unallocated claims a pod controls (where an orphan
special claim of a crash is found), all through the informer's indexes
(`operator.informers`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draco.api.bodies import ResourceClaimBody, key_of, meta_of, object_key
from draco.kube.informer import Informer
from draco.operator.informers import CLAIM_GENERATED, CLAIM_PODS, claim_generated_for, generated_for
from draco.scheduling.podclaims import controller_pod_name
from draco.scheduling.view import ClusterView, resource_version

__all__ = ["PendingClaims"]


def _pending(claim: ResourceClaimBody) -> bool:
    return not (claim.get("status") or {}).get("allocation") and not meta_of(claim).get("deletionTimestamp")


@dataclass
class PendingClaims:
    view: ClusterView
    informer: Informer[ResourceClaimBody]
    #: Claims whose cached body lost a race (a conflict): read from the API until the
    #: informer reports them again.
    _stale: set[str] = field(default_factory=set)

    def note(self, type_: str, claim: ResourceClaimBody) -> str | None:
        """A change of ``claim`` reported by the informer: its body is current again.
        Returns the key of the pod a claim was just seen generated for (it may wait for it)."""
        meta = meta_of(claim)
        self._stale.discard(key_of(claim))
        if type_ == "ADDED" and claim_generated_for(claim) and (pod_name := controller_pod_name(claim)):
            # The pod waited for the lifecycle to create this claim: look again now.
            return object_key(meta.get("namespace"), pod_name)
        return None

    def stale(self, claim_key: str) -> None:
        """The body of ``claim_key`` lost a race: read it from the API next time."""
        self._stale.add(claim_key)

    def forget(self, claim_key: str) -> None:
        self._stale.discard(claim_key)

    def generated(self, pod_uid: str, pod_claim: str) -> str | None:
        """The name of the claim generated for the pod's entry ``pod_claim`` (the first by
        name when a crash left two: the one the lifecycle adopts), or None."""
        found = self.informer.by_index(CLAIM_GENERATED, generated_for(pod_uid, pod_claim))
        return meta_of(found[0]).get("name", "") if found else None

    def known(self, key: str) -> ResourceClaimBody | None:
        """The watched body of a pending claim, unless it lost a race or the view knows a
        newer state of it (an allocation this operator wrote since)."""
        if key in self._stale:
            return None
        claim = self.informer.get(key)
        if claim is None or not _pending(claim):
            return None
        record = self.view.claims.get(key)
        if record is not None and record.resource_version >= resource_version(claim):
            return None
        return claim

    def unallocated_of(self, pod_uid: str) -> list[ResourceClaimBody]:
        """The watched unallocated claims that pod ``pod_uid`` owns or is reserved in."""
        return [c for c in self.informer.by_index(CLAIM_PODS, pod_uid) if _pending(c)]
