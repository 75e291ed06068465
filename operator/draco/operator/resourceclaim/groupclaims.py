"""Claims of a PodGroup (KEP-5729), for the lifecycle's ``podgroup:<ns>/<name>`` keys.

A draco PodGroup's ``spec.resourceClaims`` entry that names a template gets one claim
for the whole group, made like a pod's (``<group>-<claim>-`` plus a suffix, the
template's labels, annotations and spec, draco's finalizer) but owned by the PodGroup,
and recorded in its ``status.resourceClaimStatuses``. A member pod whose entry is the
same (name and reference) uses that claim instead of one of its own (the allocation
resolves it, `draco.scheduling.podclaims.resolve_claim`); the claim is reserved for the
PodGroup, once, however many pods use it. When the PodGroup is gone, its reservation is
dropped (the claim deallocated) and the claims it owned are deleted (`claimsync.py`).

One worker per group key (the work queue's), so a group's claim is made once however
many of its pods ask for it at the same moment.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from draco.api.bodies import ResourceClaimBody, ResourceClaimTemplateBody, meta_of
from draco.errors import ClaimCreationError
from draco.kube import client as k
from draco.kube.client import Kube, KubeError, Obj, key_of
from draco.logs import get_logger
from draco.operator.informers import CLAIM_GENERATED, POD_GROUPS, Informers, generated_for
from draco.operator.metrics import CLAIM_CREATES, claim_uses_admin_access
from draco.scheduling.generatedclaims import generated_group_claim
from draco.scheduling.groups import GroupRef, policy_of
from draco.scheduling.podclaims import controller_group_uid

__all__ = ["FAILED_CLAIM_CREATION", "GroupClaims"]

log = get_logger(__name__)

#: Upstream's Event reason when a claim cannot be made (on the PodGroup here).
FAILED_CLAIM_CREATION = "FailedResourceClaimCreation"

Template = Callable[[str, str], Awaitable[ResourceClaimTemplateBody]]
Classes = Callable[[str, Any], Awaitable[None]]


class GroupClaims:
    """Makes the claims of PodGroups (see the module docstring)."""

    def __init__(
        self, kube: Kube, *, informers: Informers, template: Template, check_classes: Classes
    ) -> None:
        self.kube = kube
        self.informers = informers
        #: The lifecycle's template lookup and class check (a missing one raises ClaimCreationError).
        self.template = template
        self.check_classes = check_classes

    async def sync(self, namespace: str, name: str) -> None:
        group = self.informers.pod_groups.get(f"{namespace}/{name}")
        if group is None or meta_of(group).get("deletionTimestamp"):
            return
        policy = policy_of(GroupRef(namespace, name), group)
        statuses = dict(policy.claim_statuses)
        changed = False
        for entry in policy.claims:
            template_name = entry.resource_claim_template_name
            if template_name is None:
                continue
            recorded = statuses.get(entry.name)
            if recorded and self._ours(f"{namespace}/{recorded}", policy.uid):
                continue
            found = self.informers.claims.by_index(CLAIM_GENERATED, generated_for(policy.uid, entry.name))
            if found:
                claim_name = str(meta_of(found[0]).get("name", ""))
            else:
                try:
                    claim_name = await self._create(group, entry.name, namespace, template_name)
                except ClaimCreationError as exc:
                    await self._event(group, f"PodGroupResourceClaim {entry.name}: {exc}")
                    raise
            if statuses.get(entry.name) != claim_name:
                statuses[entry.name] = claim_name
                changed = True
        if changed:
            await self._record(group, statuses)

    def _ours(self, key: str, uid: str) -> bool:
        claim = self.informers.claims.get(key)
        return claim is not None and controller_group_uid(claim) == uid

    async def _create(self, group: Obj, entry: str, namespace: str, template_name: str) -> str:
        template = await self.template(namespace, template_name)
        body = generated_group_claim(group, entry, template)
        await self.check_classes(template_name, body["spec"])
        admin = "true" if claim_uses_admin_access(body) else "false"
        try:
            created = await self.kube.create(k.RESOURCE_CLAIMS, body, namespace=namespace)
        except KubeError as exc:
            CLAIM_CREATES.labels(status="failure", admin_access=admin).inc()
            raise ClaimCreationError(f"create ResourceClaim: {exc}") from exc
        CLAIM_CREATES.labels(status="success", admin_access=admin).inc()
        claim: ResourceClaimBody = created
        self.informers.claims.assume(claim)
        log.info("Created claim for PodGroup", group=key_of(group), claim=key_of(claim), group_claim=entry)
        return str(meta_of(claim).get("name", ""))

    async def _record(self, group: Obj, statuses: dict[str, str | None]) -> None:
        meta = meta_of(group)
        entries = [
            {"name": name, **({"resourceClaimName": claim} if claim else {})}
            for name, claim in sorted(statuses.items())
        ]
        written = await self.kube.patch(
            POD_GROUPS,
            str(meta.get("name", "")),
            {"status": {"resourceClaimStatuses": entries}},
            namespace=str(meta.get("namespace", "")),
            subresource="status",
        )
        self.informers.pod_groups.assume(written)

    async def _event(self, group: Obj, message: str) -> None:
        try:
            await self.kube.emit_event(
                group, reason=FAILED_CLAIM_CREATION, message=message, component="resource_claim"
            )
        except KubeError as exc:
            log.warning("Could not record event", group=key_of(group), error=str(exc))
