"""What the allocation knows of unallocated claims between attempts: their newest
watched bodies (read instead of a GET: every write that depends on one carries its
resourceVersion, so a stale body only costs a conflict and a re-read), and which claims
were generated for which pod entry (how a gated pod finds the claim the lifecycle made for
it before the claim-statuses annotation records it: the pin writes the annotation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draco.api.constants import POD_CLAIM_NAME_ANNOTATION
from draco.kube.client import Obj
from draco.scheduling.podclaims import controller_pod_name, controller_pod_uid
from draco.scheduling.view import ClusterView, resource_version

__all__ = ["PendingClaims"]


@dataclass
class PendingClaims:
    view: ClusterView
    #: The newest watched body of each unallocated claim.
    bodies: dict[str, Obj] = field(default_factory=dict)
    #: Generated claims by (pod UID, pod claim name), and the reverse.
    _generated: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    _generated_for: dict[str, tuple[str, str]] = field(default_factory=dict)

    def note(self, claim: Obj) -> str | None:
        """Keep the newest body of an unallocated claim (read instead of a GET, like
        the service's ``gated_pods``); allocated or deleted claims are forgotten. Returns
        the key of the pod a claim was just seen generated for (it may wait for it)."""
        key = _key(claim)
        if (claim.get("status") or {}).get("allocation") or (claim.get("metadata") or {}).get(
            "deletionTimestamp"
        ):
            self.bodies.pop(key, None)
        else:
            self.bodies[key] = claim
        if key not in self._generated_for:
            owner = controller_pod_uid(claim)
            pod_claim = ((claim.get("metadata") or {}).get("annotations") or {}).get(
                POD_CLAIM_NAME_ANNOTATION
            )
            if owner and pod_claim:
                self._generated_for[key] = (owner, str(pod_claim))
                self._generated.setdefault((owner, str(pod_claim)), set()).add(key)
                # The pod waited for the lifecycle to create this claim: look again now.
                pod_name = controller_pod_name(claim)
                if pod_name:
                    return f"{(claim.get('metadata') or {}).get('namespace', '')}/{pod_name}"
        return None

    def forget(self, claim_key: str) -> None:
        self.bodies.pop(claim_key, None)
        generated = self._generated_for.pop(claim_key, None)
        if generated is not None:
            keys = self._generated.get(generated)
            if keys is not None:
                keys.discard(claim_key)
                if not keys:
                    del self._generated[generated]

    def generated(self, pod_uid: str, pod_claim: str) -> str | None:
        """The name of the claim generated for the pod's entry ``pod_claim`` (the first by
        name when a crash left two: the one the lifecycle adopts), or None."""
        keys = self._generated.get((pod_uid, pod_claim))
        return min(keys).partition("/")[2] if keys else None

    def known(self, key: str) -> Obj | None:
        """The watched body of a pending claim, unless the view knows a newer state of it
        (an allocation this operator wrote since)."""
        claim = self.bodies.get(key)
        if claim is None:
            return None
        record = self.view.claims.get(key)
        if record is not None and record.resource_version >= resource_version(claim):
            return None
        return claim


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
