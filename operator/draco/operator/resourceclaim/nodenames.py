"""Start-up repair: the node of allocated claims, where node agents select on it.

A draco from before the field labelled allocated claims with their node instead; node
agents select their claims on the field, so the lifecycle writes it once at start for every
allocated claim that lacks it (what the writes answer goes through the claim informer).
Where the API server does not serve the field as a selectable field (before 1.31), agents
select on the label again, so the lifecycle labels allocated claims that lack it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

from draco.api import allocated_node, summarize_claim_status
from draco.api.bodies import ResourceClaimBody, ResourceClaimStatusBody
from draco.api.constants import NODE_FIELD, NODE_LABEL
from draco.errors import KubeError
from draco.kube import client as k
from draco.kube.client import Kube, key_of
from draco.logs import get_logger

__all__ = ["label_allocated_nodes", "record_allocated_nodes"]

log = get_logger(__name__)


#: Writes of one start-up repair in flight at once.
_CONCURRENCY = 16


async def _write_each(
    claims: list[ResourceClaimBody],
    write: Callable[[ResourceClaimBody], tuple[str, Awaitable[ResourceClaimBody]] | None],
    *,
    failed: str,
    done: str,
    **done_fields: str,
) -> list[ResourceClaimBody]:
    """Each claim, or what the write `write` starts for it answered (`write` gives the
    claim's node and the write, or None: nothing to write), at most
    ``_CONCURRENCY`` writes at once; a write the API refuses is logged (`failed`) and the
    claim left as it was. Logs `done` once with how many claims changed."""
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def one(claim: ResourceClaimBody) -> ResourceClaimBody:
        started = write(claim)
        if started is None:
            return claim
        node, pending = started
        async with limit:
            try:
                return await pending
            except KubeError as exc:
                log.warning(failed, claim=key_of(claim), node=node, status=exc.status, reason=exc.reason)
                return claim

    written = list(await asyncio.gather(*(one(c) for c in claims)))
    changed = sum(1 for old, new in zip(claims, written, strict=True) if old is not new)
    if changed:
        log.info(done, claims=changed, **done_fields)
    return written


async def _as_claim(answer: Awaitable[k.Obj]) -> ResourceClaimBody:
    """The API's answer to a write of a claim: the claim."""
    return cast(ResourceClaimBody, await answer)


async def record_allocated_nodes(kube: Kube, claims: list[ResourceClaimBody]) -> list[ResourceClaimBody]:
    """Write ``status.nodeName`` on allocated claims that lack it (allocated by a draco
    from before the field, which labelled them instead): node agents select their
    claims on it. The node is the old label's, else the allocation's one-node selector.
    Idempotent; a claim that cannot be written now is logged and left (the agent keeps
    what it prepared for it, it only does not see changes until the claim is allocated
    again)."""

    def record(claim: ResourceClaimBody) -> tuple[str, Awaitable[ResourceClaimBody]] | None:
        meta = claim["metadata"]
        status: ResourceClaimStatusBody = {**(claim.get("status") or {})}
        if not status.get("allocation") or status.get("nodeName"):
            return None
        node = (meta.get("labels") or {}).get(NODE_LABEL) or allocated_node(status)
        if not node:
            return None
        status["nodeName"] = node
        body: ResourceClaimBody = {
            **claim,
            "status": summarize_claim_status(status, deleting=bool(meta.get("deletionTimestamp"))),
        }
        return node, kube.replace_status(k.RESOURCE_CLAIMS, body)

    return await _write_each(
        claims,
        record,
        failed="Could not record the node of an allocated claim",
        done="Recorded the node of allocated claims",
        field=NODE_FIELD,
    )


async def label_allocated_nodes(kube: Kube, claims: list[ResourceClaimBody]) -> list[ResourceClaimBody]:
    """Label allocated claims with their ``status.nodeName`` where the label is what node
    agents select on (claims allocated while the field was served, or by an operator that
    did not label). Idempotent; a claim that cannot be written now is logged and left."""

    def label(claim: ResourceClaimBody) -> tuple[str, Awaitable[ResourceClaimBody]] | None:
        meta = claim["metadata"]
        node = (claim.get("status") or {}).get("nodeName")
        if not node or (meta.get("labels") or {}).get(NODE_LABEL) == node:
            return None
        patch = {"metadata": {"labels": {NODE_LABEL: node}, "resourceVersion": meta["resourceVersion"]}}
        return node, _as_claim(
            kube.patch(k.RESOURCE_CLAIMS, meta["name"], patch, namespace=meta["namespace"])
        )

    return await _write_each(
        claims,
        label,
        failed="Could not label an allocated claim with its node",
        done="Labelled allocated claims with their node",
        label=NODE_LABEL,
    )
