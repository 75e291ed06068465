"""Device quota at claim creation: the webhook charges a new claim to its namespace's quotas.

kube-apiserver's own quota admission knows nothing of draco's claims, so the validating
webhook does its part for them: a ResourceClaim being created (one a user writes, or one
the operator generates from a template) is counted with `draco.api.quota` against every
ResourceQuota of its namespace that limits one of its classes; past a limit it is refused
as upstream refuses it (403 Forbidden, ``exceeded quota: ...``), else the quotas'
``status.used`` grow by what it counts before it is admitted. Each write carries the
resourceVersion it was decided on; when a quota changed meanwhile (another claim charged
it, the operator recounted it) everything is read and decided again.

A claim charged here whose creation then fails (a later admission step refuses it) stays
counted until the operator recounts the namespace from the claims that exist, which it
does on every claim added or removed: upstream's admission and quota controller behave
the same. A dry run is checked, never charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from draco.api.constants import GROUP, PLURAL_RESOURCE_CLAIMS
from draco.api.quota import QuotaRefusal, charge, claim_usage
from draco.errors import ConflictError
from draco.kube.client import RESOURCE_QUOTAS, Kube
from draco.logs import get_logger

__all__ = ["QuotaCharger"]

log = get_logger(__name__)

#: How often a charge is decided again after its quotas changed under it.
_ATTEMPTS: Final = 8


class QuotaCharger:
    """Charges claims being created to their namespace's quotas (see the module docstring)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def refusal(self, claim: Mapping[str, Any], *, dry_run: bool = False) -> str | None:
        """None once `claim` is charged (or counts nothing); else why it is refused."""
        meta = claim.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        usage = claim_usage(claim.get("spec") or {})
        if not namespace or not any(usage.values()):
            return None
        forbidden = f'{PLURAL_RESOURCE_CLAIMS}.{GROUP} "{name}" is forbidden'
        for _ in range(_ATTEMPTS):
            quotas = await self.kube.list(RESOURCE_QUOTAS, namespace=namespace)
            outcome = charge(quotas, usage)
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
