"""Label selectors as apimachinery's LabelSelectorAsSelector evaluates them."""

from __future__ import annotations

from typing import Any

import pytest

from draco.scheduling.labels import EVERYTHING, NOTHING, Requirement, label_selector

LABELS = {"app": "web", "tier": "fe", "empty": ""}


@pytest.mark.parametrize(
    ("body", "matches"),
    [
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "db"}}, False),
        ({"matchLabels": {"empty": ""}}, True),
        ({"matchLabels": {"app": "web", "tier": "be"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "web"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
        # matchLabels and matchExpressions are ANDed.
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["be"]}],
            },
            False,
        ),
        # An operator the API would have refused (Gt is for node selectors) matches nothing.
        ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, False),
        ({}, True),
        (None, False),
    ],
)
def test_selector_semantics(body: dict[str, Any] | None, matches: bool) -> None:
    assert label_selector(body).matches(LABELS) is matches


def test_empty_and_missing_selectors() -> None:
    assert label_selector({}) == EVERYTHING and EVERYTHING.is_everything and EVERYTHING.matches({})
    assert label_selector(None) == NOTHING and not NOTHING.is_everything and not NOTHING.matches({})
    assert not label_selector({"matchLabels": {"a": "b"}}).is_everything


def test_with_requirements_ands_and_keeps_nothing() -> None:
    extra = [Requirement("tier", "In", frozenset({"fe"}))]
    narrowed = EVERYTHING.with_requirements(extra)
    assert not narrowed.is_everything
    assert narrowed.matches(LABELS) and not narrowed.matches({"tier": "be"})
    assert NOTHING.with_requirements(extra) == NOTHING
    selector = label_selector({"matchLabels": {"app": "web"}})
    assert selector.with_requirements([]) is selector
    assert not selector.with_requirements([Requirement("tier", "NotIn", frozenset({"fe"}))]).matches(LABELS)
