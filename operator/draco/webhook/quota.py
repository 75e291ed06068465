"""Device quota at claim creation: the webhook charges a new claim to its namespace's quotas.

kube-apiserver's own quota admission knows nothing of draco's claims, so the validating
webhook does its part for them: a ResourceClaim being created (one a user writes, or one
the operator generates from a template) is counted with `draco.api.quota` against every
ResourceQuota of its namespace that limits one of its classes; past a limit it is refused
as upstream refuses it (403 Forbidden, ``exceeded quota: ...``), else the quotas'
``status.used`` grow by what it counts before it is admitted. Each write carries the
resourceVersion it was decided on; when a quota changed meanwhile (another claim charged
it, the operator recounted it) everything is read and decided again.

The entries a claim counts besides the per-class ones (``requests.*`` of its classes'
extended resources) come from the DeviceClasses (the pod webhook's class cache). A pod's
special claim is checked against its pod (read, and the namespace's claims listed for
others it controls) so that what the pod counts itself is not counted twice; when either
cannot be read the claim counts in full (the operator's claims are charged through the
quota-only webhook, which fails open).

A claim charged here whose creation then fails (a later admission step refuses it) stays
counted until the operator recounts the namespace from the claims that exist, which it
does on every claim added or removed: upstream's admission and quota controller behave
the same. A dry run is checked, never charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import aiohttp

from draco.api.bodies import meta_of
from draco.api.constants import GROUP, PLURAL_RESOURCE_CLAIMS
from draco.api.quota import (
    NO_CLASSES,
    QuotaNames,
    QuotaRefusal,
    charge,
    claim_usage,
    controlling_pod,
    owner_usage,
)
from draco.errors import ConflictError, KubeError
from draco.kube.client import PODS, RESOURCE_CLAIMS, RESOURCE_QUOTAS, Kube
from draco.logs import get_logger
from draco.webhook.podadmission import ClassCache

__all__ = ["QuotaCharger"]

log = get_logger(__name__)

#: How often a charge is decided again after its quotas changed under it.
_ATTEMPTS: Final = 8


class QuotaCharger:
    """Charges claims being created to their namespace's quotas (see the module docstring)."""

    def __init__(self, kube: Kube, *, classes: ClassCache | None = None) -> None:
        self.kube = kube
        self.classes = classes

    async def _names(self) -> QuotaNames:
        if self.classes is None:
            return NO_CLASSES
        await self.classes()
        return self.classes.quota_names

    async def _owner_usage(self, claim: Mapping[str, Any], namespace: str) -> dict[str, int] | None:
        """What the pod controlling a special claim counts itself (None: not a special
        claim, or its owner does not check out or cannot be read)."""
        owner = controlling_pod(claim)
        if owner is None:
            return None
        try:
            pod = await self.kube.get_or_none(PODS, str(owner.get("name") or ""), namespace=namespace)
            claims = await self.kube.list(RESOURCE_CLAIMS, namespace=namespace)
        except (KubeError, aiohttp.ClientError, TimeoutError) as err:
            log.warning("Could not check the pod of a special claim; it counts in full", error=str(err))
            return None
        name = meta_of(claim).get("name")
        siblings = [other for other in claims if meta_of(other).get("name") != name]
        return owner_usage(claim, pod=pod, siblings=siblings)

    async def refusal(self, claim: Mapping[str, Any], *, dry_run: bool = False) -> str | None:
        """None once `claim` is charged (or counts nothing); else why it is refused."""
        meta = claim.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        names = await self._names()
        counts_itself = await self._owner_usage(claim, namespace) if namespace else None
        usage = claim_usage(claim.get("spec") or {}, names=names, pod_usage=counts_itself)
        if not namespace or not any(usage.values()):
            return None
        forbidden = f'{PLURAL_RESOURCE_CLAIMS}.{GROUP} "{name}" is forbidden'
        for _ in range(_ATTEMPTS):
            quotas = await self.kube.list(RESOURCE_QUOTAS, namespace=namespace)
            outcome = charge(quotas, usage, names)
            if isinstance(outcome, QuotaRefusal):
                return f"{forbidden}: {outcome.message}"
            if dry_run:
                return None
            try:
                for quota, used in outcome.updates:
                    quota_meta = quota["metadata"]
                    await self.kube.patch(
                        RESOURCE_QUOTAS,
                        str(quota_meta["name"]),
                        {
                            "metadata": {"resourceVersion": quota_meta["resourceVersion"]},
                            "status": {"used": used},
                        },
                        namespace=namespace,
                        subresource="status",
                    )
                    log.debug(
                        "Charged quota", claim=f"{namespace}/{name}", quota=quota_meta["name"], used=used
                    )
            except ConflictError:
                continue
            return None
        return f"{forbidden}: the namespace's quotas kept changing; try again"
