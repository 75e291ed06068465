"""The DynamicResources plugin's score: nodes where earlier alternatives of a
prioritized list (``firstAvailable``) fit are preferred.

For each request of a claim being allocated that uses ``firstAvailable``, a node scores
``8 - i`` where ``i`` is the index of the subrequest the allocation chose there (8: the
most subrequests a request may have), summed over the pod's pending claims; claims already
allocated are not scored. The scores are normalised across the nodes compared (the best
gets 100) and weigh DynamicResources' weight (`profile.PROFILE`). Only pods with such a request are scored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from draco.api.bodies import key_of

__all__ = ["MAX_SUBREQUESTS", "has_prioritized_lists", "normalized", "prioritized_list_score"]

#: The most subrequests a request may have (upstream's FirstAvailableDeviceRequestMaxSize).
MAX_SUBREQUESTS: Final = 8


def _requests(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(((claim.get("spec") or {}).get("devices") or {}).get("requests") or [])


def has_prioritized_lists(claims: Iterable[Mapping[str, Any]]) -> bool:
    """Whether some request of ``claims`` offers more than one alternative."""
    return any(len(r.get("firstAvailable") or []) > 1 for claim in claims for r in _requests(claim))


def prioritized_list_score(
    claims: Sequence[Mapping[str, Any]], allocations: Mapping[str, Mapping[str, Any]]
) -> int:
    """The raw score of one node: ``allocations`` maps each claim's key
    (``namespace/name``) to the ``status.allocation`` chosen there."""
    total = 0
    for claim in claims:
        allocation = allocations.get(key_of(claim)) or {}
        chosen = {
            str(result.get("request", ""))
            for result in (allocation.get("devices") or {}).get("results") or []
        }
        for request in _requests(claim):
            subrequests = request.get("firstAvailable") or []
            if not subrequests:
                continue
            name = request.get("name", "")
            for index, sub in enumerate(subrequests):
                if f"{name}/{sub.get('name', '')}" in chosen:
                    total += MAX_SUBREQUESTS - index
                    break
    return total


def normalized(raw: Sequence[int]) -> list[int]:
    """upstream's default normalisation: the highest becomes 100, the rest in proportion."""
    highest = max(raw, default=0)
    if highest <= 0:
        return [0] * len(raw)
    return [value * 100 // highest for value in raw]
