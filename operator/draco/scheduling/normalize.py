"""Score normalisation shared by the score rules (upstream's ``helper.DefaultNormalizeScore``).

A rule that scores by counting (matching preferred terms, intolerable taints) scales its
raw scores to 0..:data:`~draco.scheduling.framework.MAX_NODE_SCORE` by the highest one;
``reverse`` turns "more is worse" into "more is better". All zero stays all zero, or all
the maximum when reversed.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["default_normalize"]


def default_normalize(scores: Sequence[int], *, maximum: int, reverse: bool) -> list[int]:
    """``scores`` (non-negative) scaled to 0..``maximum`` by their highest value."""
    highest = max(scores, default=0)
    if highest == 0:
        return [maximum if reverse else 0 for _ in scores]
    scaled = [maximum * score // highest for score in scores]
    return [maximum - score for score in scaled] if reverse else scaled
