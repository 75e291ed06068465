"""`allocated_node`: which node a claim's allocation is bound to (the operator labels the
claim with it, the node agent selects on the label)."""

from __future__ import annotations

from typing import Any

from draco.api import allocated_node


def status(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"allocation": {"nodeSelector": {"nodeSelectorTerms": list(terms)}}}


def by_name(*names: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}


def test_a_node_local_allocation_names_its_node() -> None:
    assert allocated_node(status(by_name("worker-1"))) == "worker-1"
    # Node labels next to the name do not change which node it is.
    term = {**by_name("worker-1"), "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    assert allocated_node(status(term)) == "worker-1"


def test_no_single_node_means_no_node() -> None:
    assert allocated_node({}) is None
    assert allocated_node({"allocation": {"devices": {"results": []}}}) is None
    assert allocated_node(status(by_name("a", "b"))) is None
    assert allocated_node(status(by_name("a"), by_name("b"))) is None
    labels_only = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    assert allocated_node(status(labels_only)) is None
    not_in = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}
    assert allocated_node(status(not_in)) is None
