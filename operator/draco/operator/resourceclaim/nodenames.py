"""Start-up repair: the node of allocated claims, where node agents select on it.

A draco from before the field labelled allocated claims with their node instead; node
agents select their claims on the field, so the lifecycle writes it once at start for every
allocated claim that lacks it (what the writes answer goes through the claim informer).
Where the API server does not serve the field as a selectable field (before 1.31), agents
select on the label again, so the lifecycle labels allocated claims that lack it.
"""

from __future__ import annotations

import asyncio

from draco.api import allocated_node, summarize_claim_status
from draco.api.constants import NODE_FIELD, NODE_LABEL
from draco.errors import KubeError
from draco.kube import client as k
from draco.kube.client import Kube, Obj, key_of
from draco.logs import get_logger

__all__ = ["label_allocated_nodes", "record_allocated_nodes"]

log = get_logger(__name__)


async def record_allocated_nodes(kube: Kube, claims: list[Obj]) -> list[Obj]:
    """Write ``status.nodeName`` on allocated claims that lack it (allocated by a draco
    from before the field, which labelled them instead): node agents select their
    claims on it. The node is the old label's, else the allocation's one-node selector.
    Idempotent; a claim that cannot be written now is logged and left (the agent keeps
    what it prepared for it, it only does not see changes until the claim is allocated
    again)."""
    limit = asyncio.Semaphore(16)

    async def record(claim: Obj) -> Obj:
        meta = claim["metadata"]
        status = dict(claim.get("status") or {})
        if not status.get("allocation") or status.get("nodeName"):
            return claim
        node = (meta.get("labels") or {}).get(NODE_LABEL) or allocated_node(status)
        if not node:
            return claim
        status["nodeName"] = node
        body = {
            **claim,
            "status": summarize_claim_status(status, deleting=bool(meta.get("deletionTimestamp"))),
        }
        async with limit:
            try:
                return await kube.replace_status(k.RESOURCE_CLAIMS, body)
            except KubeError as exc:
                log.warning(
                    "Could not record the node of an allocated claim",
                    claim=key_of(claim),
                    node=node,
                    status=exc.status,
                    reason=exc.reason,
                )
                return claim

    recorded = list(await asyncio.gather(*(record(c) for c in claims)))
    changed = sum(1 for old, new in zip(claims, recorded, strict=True) if old is not new)
    if changed:
        log.info("Recorded the node of allocated claims", claims=changed, field=NODE_FIELD)
    return recorded


async def label_allocated_nodes(kube: Kube, claims: list[Obj]) -> list[Obj]:
    """Label allocated claims with their ``status.nodeName`` where the label is what node
    agents select on (claims allocated while the field was served, or by an operator that
    did not label). Idempotent; a claim that cannot be written now is logged and left."""
    limit = asyncio.Semaphore(16)

    async def label(claim: Obj) -> Obj:
        meta = claim["metadata"]
        node = (claim.get("status") or {}).get("nodeName")
        if not node or (meta.get("labels") or {}).get(NODE_LABEL) == node:
            return claim
        patch = {"metadata": {"labels": {NODE_LABEL: node}, "resourceVersion": meta["resourceVersion"]}}
        async with limit:
            try:
                return await kube.patch(k.RESOURCE_CLAIMS, meta["name"], patch, namespace=meta["namespace"])
            except KubeError as exc:
                log.warning(
                    "Could not label an allocated claim with its node",
                    claim=key_of(claim),
                    node=node,
                    status=exc.status,
                    reason=exc.reason,
                )
                return claim

    labelled = list(await asyncio.gather(*(label(c) for c in claims)))
    changed = sum(1 for old, new in zip(claims, labelled, strict=True) if old is not new)
    if changed:
        log.info("Labelled allocated claims with their node", claims=changed, label=NODE_LABEL)
    return labelled
