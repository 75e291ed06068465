"""Whether a toleration tolerates a taint: upstream's ``ToleratesTaint``, written once.

Node taints (core/v1) and device taints (resource.k8s.io) match tolerations the same way:
an effect, when set, must be the taint's; a key, when set, must be the taint's; then
``Exists`` matches any value, ``Equal`` (the default) the taint's value exactly, any other
operator nothing. ``tolerationSeconds`` never matters here (it bounds NoExecute only).

Two spellings of one rule: :func:`matches` over the fields, for callers that keep their
tolerations as records, and :func:`tolerates` over a toleration's JSON, for callers that
read objects as the API serves them (the allocator's hot path never builds a model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from draco.api.constants import TOLERATION_OP_EQUAL, TOLERATION_OP_EXISTS

__all__ = ["matches", "tolerates", "tolerates_any"]


def matches(
    *, key: str, operator: str, value: str, effect: str, taint_key: str, taint_value: str, taint_effect: str
) -> bool:
    """Whether the toleration (its fields; an empty operator is ``Equal``) tolerates the taint."""
    if effect and effect != taint_effect:
        return False
    if key and key != taint_key:
        return False
    if operator == TOLERATION_OP_EXISTS:
        return True
    return operator in ("", TOLERATION_OP_EQUAL) and value == taint_value


def tolerates(toleration: Mapping[str, Any], *, key: str, value: str, effect: str) -> bool:
    """:func:`matches` for a toleration in its JSON form."""
    return matches(
        key=toleration.get("key") or "",
        operator=toleration.get("operator") or "",
        value=toleration.get("value") or "",
        effect=toleration.get("effect") or "",
        taint_key=key,
        taint_value=value or "",
        taint_effect=effect,
    )


def tolerates_any(tolerations: Iterable[Mapping[str, Any]], *, key: str, value: str, effect: str) -> bool:
    """Whether some toleration (JSON form) tolerates the taint."""
    return any(tolerates(t, key=key, value=value, effect=effect) for t in tolerations)
