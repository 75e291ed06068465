"""Pure pieces of the allocation service: how a pod is pinned, the status summary it
writes, and the metrics it exports on the operator's registry."""

from __future__ import annotations

from typing import Any

from draco.api import summarize_claim_status
from draco.operator.scheduler.writes import pin_affinity
from draco.runtime.metrics import REGISTRY

PIN = {"key": "metadata.name", "operator": "In", "values": ["n1"]}


def required_terms(affinity: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return terms


def test_a_pod_without_affinity_gets_one_term_naming_the_node() -> None:
    assert required_terms(pin_affinity(None, "n1")) == [{"matchFields": [PIN]}]


def test_existing_terms_are_narrowed_not_replaced() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    other = {"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}
    affinity = {
        "podAntiAffinity": {"x": 1},
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchFields": [other]}]
            },
        },
    }
    pinned = pin_affinity(affinity, "n1")
    assert required_terms(pinned) == [
        {"matchExpressions": [zone], "matchFields": [PIN]},
        {"matchFields": [other, PIN]},
    ]
    assert pinned["podAntiAffinity"] == {"x": 1}
    assert pinned["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1}]
    # The input is left alone (it is the watched pod body).
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][
        0
    ] == {"matchExpressions": [zone]}


def allocation(*devices: str) -> dict[str, Any]:
    return {
        "devices": {
            "results": [{"request": "r", "driver": "d", "pool": "p", "device": name} for name in devices]
        }
    }


def test_status_summary_matches_upstreams_state_column() -> None:
    reserved = [{"resource": "pods", "name": "x", "uid": "u"}]
    assert summarize_claim_status(
        {"allocation": allocation("a", "b"), "reservedFor": reserved}, deleting=False
    ) == {
        "allocation": allocation("a", "b"),
        "reservedFor": reserved,
        "state": "allocated,reserved",
        "allocatedDevices": "p/a,p/b",
    }
    assert (
        summarize_claim_status({"allocation": allocation("a")}, deleting=True)["state"] == "deleted,allocated"
    )
    cleared = summarize_claim_status({"allocatedDevices": "p/a"}, deleting=False)
    assert cleared == {"state": "pending"}
    assert summarize_claim_status({}, deleting=True)["state"] == "deleted"


def test_allocation_metrics_are_on_the_operators_registry() -> None:
    names = {metric.name for metric in REGISTRY.collect()}
    assert {"draco_allocation_attempts", "draco_allocation_duration_seconds"} <= names
