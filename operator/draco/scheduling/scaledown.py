"""Scale-down: whether the pods holding a node's devices could get them elsewhere.

Autoscalers remove a node when its pods fit on other nodes, as far as their cpu and memory
go; the devices those pods hold through claims are invisible to them. A pod whose claims
hold devices on a node keeps that node (draco protects it, `demand.protection`) unless
every such pod of the node could have its claims allocated again on some *other existing*
node, from devices free there now, all of them together (each pod's choice counting for
the next). A new node is never counted on: the autoscaler would replace a GPU node with
whatever its own simulation finds cheapest.

Pure: the caller hands the inventory (every allocated claim counted) and the nodes; the
inventory is left as it was found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from draco.allocator import Allocated, Inventory, allocate
from draco.allocator.outcome import Node
from draco.errors import AllocationError, CELError

__all__ = ["movable", "node_of_claim"]


def node_of_claim(claim: Mapping[str, Any]) -> str | None:
    """The node a claim's allocation ties it to (its node selector names one), else None."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if (
                field.get("key") == "metadata.name"
                and field.get("operator") == "In"
                and len(field.get("values") or []) == 1
            ):
                return str(field["values"][0])
    return None


def _unallocated(claim: Mapping[str, Any]) -> dict[str, Any]:
    return {**claim, "status": {}}


def movable(
    inventory: Inventory, *, node: str, held: Sequence[Sequence[Mapping[str, Any]]], nodes: Sequence[Node]
) -> bool:
    """Whether the claims of each pod of ``held`` (the pods on ``node`` holding devices
    there) could all be allocated on the other ``nodes`` at once."""
    claims = [claim for pod in held for claim in pod]
    for claim in claims:
        inventory.release(claim)
    trial: list[dict[str, Any]] = []
    try:
        others = [n for n in nodes if n.name != node]
        for pod_claims in held:
            wanted = [_unallocated(c) for c in pod_claims]
            placed = False
            for other in others:
                try:
                    outcome = allocate(inventory=inventory, node=other, claims=wanted)
                except (AllocationError, CELError):
                    return False
                if not isinstance(outcome, Allocated):
                    continue
                for claim in wanted:
                    meta = claim.get("metadata") or {}
                    allocation = outcome.results.json().get(
                        f"{meta.get('namespace', '')}/{meta.get('name', '')}"
                    )
                    if allocation is not None:
                        marked = {**claim, "status": {"allocation": allocation}}
                        inventory.mark_allocated(marked)
                        trial.append(marked)
                placed = True
                break
            if not placed:
                return False
        return True
    finally:
        for claim in trial:
            inventory.release(claim)
        for claim in claims:
            inventory.mark_allocated(claim)
