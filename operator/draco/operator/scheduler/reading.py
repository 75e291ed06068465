"""What an allocation attempt reads of a pod before it is planned: its claims resolved, their
bodies, and the pod as a `draco.scheduling.podplan.PodRequest`; or why it waits.

Everything comes from the caches (`pendingclaims.py` over the claim informer, the view, the
PodGroup informer) but two things: a claim whose cached body lost a race (a conflict) is
read from the API, and a pod that asks for extended resources a DeviceClass serves gets its
special claim made and recorded first (`extended.py`), the one write before a plan.

Resolving follows the lifecycle: a template entry resolves to the claim generated for it
(recorded in the claim-statuses annotation, or found through the claims' owners before the
pin records it: the pin writes the names, one pod write fewer per pod); an entry that is
its draco PodGroup's claim resolves to the group's claim. Until every generated claim
exists the pod waits (``ClaimNotCreatedError``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from draco.api.bodies import Obj, ReferenceBody, ResourceClaimBody, key_of, meta_of, object_key
from draco.api.corebodies import PodBody
from draco.kube.client import RESOURCE_CLAIMS, Kube
from draco.kube.informer import Informer
from draco.operator.scheduler.extended import special_claim_for
from draco.operator.scheduler.messages import claim_problem
from draco.operator.scheduler.pendingclaims import PendingClaims
from draco.scheduling.groups import group_of, policy_of
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaim,
    PodClaimsError,
    ResolvedClaim,
    bound_by_draco,
    claim_statuses,
    group_reference,
    is_claim_for_entry,
    parse_pod_claims,
    resolve_claim,
)
from draco.scheduling.podplan import PodRequest, Unplaced
from draco.scheduling.requests import pod_requests
from draco.scheduling.view import ClusterView
from draco.scheduling.wakeups import CLAIMS_ONLY

__all__ = ["PodRead", "PodReader", "no_nodes_avoided"]


def no_nodes_avoided(pod: PodBody) -> frozenset[str]:
    """No node is avoided (a service without the safety net's memory of refusals)."""
    del pod
    return frozenset()


@dataclass(frozen=True, slots=True)
class PodRead:
    """The pod as last written (the special claim's record may have changed it), the keys
    of its claims (which wake it while it waits), and either the pod to plan or why one of
    its claims cannot be used yet."""

    pod: PodBody
    waits_on: frozenset[str]
    found: PodRequest | Unplaced


@dataclass
class PodReader:
    kube: Kube
    view: ClusterView
    claims: PendingClaims
    #: draco's PodGroups, by ``namespace/name``.
    pod_groups: Informer[Obj]
    #: Make the special claim of pods that ask for extended resources a class serves.
    extended_resources: bool = True
    #: Nodes kube-scheduler refused the pod's line on before (`refusals.Refusals`).
    avoided: Callable[[PodBody], frozenset[str]] = field(default=no_nodes_avoided)

    def resolve(self, pod: PodBody) -> tuple[list[ResolvedClaim], dict[str, str | None] | None]:
        """The pod's claims, and the claim-statuses annotation to write when the pod does
        not record every generated claim yet (None when it does). Raises
        ``ClaimNotCreatedError`` while one is missing, ``PodClaimsError`` for a broken
        annotation (the lifecycle reports it)."""
        entries = parse_pod_claims(pod)  # (parses are cached by the annotation's text)
        statuses = claim_statuses(pod)
        uid = str(meta_of(pod).get("uid", ""))
        group_claims = self._group_claims(pod, entries)
        found: dict[str, str | None] = {}
        for entry in entries:
            if entry.resource_claim_template_name is None:
                continue
            if group_claims is not None and entry.name in group_claims:
                if entry.name in statuses:
                    continue
                name = group_claims[entry.name]
            elif entry.name in statuses and not self._stale_record(pod, entry.name, statuses[entry.name]):
                continue
            else:
                name = self.claims.generated(uid, entry.name)
            if name is None:
                raise ClaimNotCreatedError(f"pod {key_of(pod)}: claim {entry.name!r} not created yet")
            found[entry.name] = name
        complete = {**statuses, **found}
        resolved = [
            resolve_claim(pod, entry, statuses=complete, group_claims=group_claims) for entry in entries
        ]
        return resolved, (complete if found else None)

    def _stale_record(self, pod: PodBody, entry_name: str, recorded: str | None) -> bool:
        """The claim-statuses annotation names a claim that is not the entry's any more: one
        that is not the pod's (a pod of the same name deleted before, a user's, another
        entry's: a restored backup, an exported pod applied again), or one that is gone
        while the lifecycle has made the entry a new one (an operator killed between the
        two writes). The lifecycle then makes a new claim (upstream's handleClaim), found
        through the generated-claims index and recorded in the pod's next write."""
        if recorded is None:
            return False  # recorded as not needed
        claim = self.claims.informer.get(object_key(meta_of(pod).get("namespace", ""), recorded))
        if claim is not None:
            return not is_claim_for_entry(claim, pod, entry_name)
        # Unknown to the informer (a claim the lifecycle made is known at once): gone, or
        # not seen yet. Stale once the entry has a generated claim of its own.
        generated = self.claims.generated(str(meta_of(pod).get("uid", "")), entry_name)
        return generated is not None and generated != recorded

    def _group_claims(self, pod: PodBody, entries: Sequence[PodClaim]) -> dict[str, str | None] | None:
        """The pod's entries that are its draco PodGroup's claims -> the group's claim
        (None: not made yet); None when the pod has no such entry."""
        ref = group_of(pod)
        if ref is None or ref.convention != "draco":
            return None
        policy = policy_of(ref, self.pod_groups.get(ref.key))
        matching = policy.claims_of(entries)
        if not matching:
            return None
        names: dict[str, str | None] = {}
        for entry_name, claim in matching.items():
            if claim.resource_claim_name is not None:
                names[entry_name] = claim.resource_claim_name
            else:
                recorded = policy.claim_statuses.get(entry_name)
                names[entry_name] = recorded or self.claims.generated(policy.uid, entry_name)
        return names

    def group_reference(self, pod: PodBody) -> ReferenceBody | None:
        """The reservation of the pod's draco PodGroup (for its group's claims)."""
        ref = group_of(pod)
        if ref is None or ref.convention != "draco":
            return None
        obj = self.pod_groups.get(ref.key)
        uid = str(meta_of(obj).get("uid") or "") if obj is not None else ""
        return group_reference(ref.name, uid) if uid else None

    def claim_keys(self, pod: PodBody) -> frozenset[str]:
        """Keys of the pod's claims that resolve now (for dropping cached bodies)."""
        namespace = meta_of(pod).get("namespace", "")
        try:
            resolved, _ = self.resolve(pod)
        except (ClaimNotCreatedError, PodClaimsError):
            return frozenset()
        return frozenset(object_key(namespace, r.claim_name) for r in resolved if r.claim_name is not None)

    async def read(
        self, pod: PodBody, resolved: Sequence[ResolvedClaim], unrecorded: dict[str, str | None] | None
    ) -> PodRead:
        """The pod's claims, from the caches (the API for one whose cached body lost a
        race), its special claim made if it needs one, the pod as a request to plan; or
        why one of its claims cannot be used yet (the pod waits for it)."""
        namespace = str(meta_of(pod).get("namespace", ""))
        # Read once per attempt: the pod's record and the special claim both use them.
        requests = pod_requests(pod.get("spec") or {})
        claims: list[ResourceClaimBody] = []
        keys: list[str] = []
        for entry in resolved:
            if entry.claim_name is None:
                continue
            key = object_key(namespace, entry.claim_name)
            keys.append(key)
            claim = self.claims.known(key)
            if claim is None:
                claim = cast(
                    ResourceClaimBody | None,
                    await self.kube.get_or_none(RESOURCE_CLAIMS, entry.claim_name, namespace=namespace),
                )
            problem = claim_problem(
                key, claim, pod, entry=entry.pod_claim.name if entry.check_owner else None
            )
            if problem is not None:
                return PodRead(pod, frozenset(keys), _waits(pod, problem))
            assert claim is not None
            claims.append(claim)
        if self.extended_resources:
            special = await special_claim_for(
                kube=self.kube,
                pod=pod,
                classes=self.view.classes.values(),
                cached=self.claims.known,
                unallocated=self.claims.unallocated_of(str(meta_of(pod).get("uid", ""))),
                requests=requests,
            )
            if special is not None:
                pod, claim = special
                keys.append(key_of(claim))
                if meta_of(claim).get("deletionTimestamp"):
                    problem = f"ResourceClaim {key_of(claim)} (extended resources) is being deleted; the pod waits for a new one"
                    return PodRead(pod, frozenset(keys), _waits(pod, problem))
                claims.append(claim)
        group_keys = frozenset(
            object_key(namespace, r.claim_name) for r in resolved if r.for_group and r.claim_name
        )
        request = PodRequest(
            key=key_of(pod),
            info=self.view.pod_info(pod, avoid=self.avoided(pod)),
            claims=claims,
            pod=pod,
            group_claims=group_keys,
            group=self.group_reference(pod) if group_keys else None,
            statuses=unrecorded,
            needs_node=bound_by_draco(pod),
        )
        return PodRead(pod, frozenset(keys), request)


def _waits(pod: PodBody, problem: str) -> Unplaced:
    return Unplaced(key_of(pod), problem, result="waiting", interest=CLAIMS_ONLY)
