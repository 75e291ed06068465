"""Label selectors (``metav1.LabelSelector``) as kube-scheduler evaluates them on pods.

Pod affinity terms, topology spread constraints and namespace selectors all select by
labels. A selector is compiled once, when its pod is read, into requirements that match
a label map in a few comparisons. The semantics are apimachinery's
``LabelSelectorAsSelector``: ``matchLabels`` are ``key In [value]``; ``In``/``NotIn``/
``Exists``/``DoesNotExist`` as for node selectors; an empty selector (``{}``) matches
everything; a missing selector (``None``) matches nothing; an operator the API would not
have accepted matches nothing (the API server validated the pod, so this is a guard).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["EVERYTHING", "NOTHING", "LabelSelector", "Requirement", "label_selector"]

_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Compiled selector; ``matches_nothing`` for a missing (``null``) selector."""

    requirements: tuple[Requirement, ...] = ()
    matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.matches_nothing:
            return False
        return all(requirement.matches(labels) for requirement in self.requirements)

    @property
    def is_everything(self) -> bool:
        return not self.matches_nothing and not self.requirements

    def with_requirements(self, extra: Sequence[Requirement]) -> LabelSelector:
        """This selector ANDed with ``extra`` (how ``matchLabelKeys`` are merged in);
        a selector that matches nothing stays so."""
        if self.matches_nothing or not extra:
            return self
        return LabelSelector(requirements=self.requirements + tuple(extra))


#: ``{}``: every label map.
EVERYTHING: Final = LabelSelector()
#: ``null``: no label map.
NOTHING: Final = LabelSelector(matches_nothing=True)


def label_selector(body: Mapping[str, Any] | None) -> LabelSelector:
    """Compile a ``LabelSelector`` in its JSON form (``None``: matches nothing)."""
    if body is None:
        return NOTHING
    requirements: list[Requirement] = [
        Requirement(str(key), "In", frozenset({str(value)}))
        for key, value in sorted((body.get("matchLabels") or {}).items())
    ]
    for expression in body.get("matchExpressions") or []:
        operator = str(expression.get("operator") or "")
        if operator not in _OPERATORS:
            return NOTHING
        values = frozenset(str(v) for v in expression.get("values") or [])
        requirements.append(Requirement(str(expression.get("key") or ""), operator, values))
    return LabelSelector(requirements=tuple(requirements))
