"""Node-affinity matching for ResourceSlice and device node selectors.

Slices say where their devices are reachable with a core ``NodeSelector``; the allocator
must decide, for a node name and its labels, whether a selector admits the node, with
the scheduler's semantics: terms are ORed, the requirements of a term are ANDed, a term
without requirements matches nothing, ``matchFields`` only knows ``metadata.name``.
Selectors arrive as plain dicts in the Kubernetes JSON shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["node_selector_matches"]


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _requirement_matches(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        mine, theirs = _int_or_none(value), _int_or_none(str(values[0]))
        if mine is None or theirs is None:
            return False
        return mine > theirs if operator == "Gt" else mine < theirs
    return False


def _term_matches(term: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    for requirement in expressions:
        if not _requirement_matches(requirement, labels.get(requirement.get("key", ""))):
            return False
    for requirement in fields:
        if requirement.get("key") != "metadata.name":
            return False
        if not _requirement_matches(requirement, name):
            return False
    return True


def node_selector_matches(
    selector: Mapping[str, Any] | None, *, name: str, labels: Mapping[str, str]
) -> bool:
    """Whether the node named ``name`` with ``labels`` satisfies ``selector``."""
    if not selector:
        return False
    return any(_term_matches(term, name, labels) for term in selector.get("nodeSelectorTerms") or [])
