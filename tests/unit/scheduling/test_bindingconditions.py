"""Where written claims' devices stand with their binding conditions
(`draco.scheduling.bindingconditions`): ready, waited for (until when), failed."""

from __future__ import annotations

import datetime
from typing import Any

from draco.scheduling.bindingconditions import (
    BindingFailure,
    BindingMet,
    BindingWait,
    binding_state,
    needs_timestamp,
)

NOW = datetime.datetime(2026, 1, 1, 0, 1, 0, tzinfo=datetime.UTC)


def claim(conditions: list[dict[str, Any]], *, stamp: str = "2026-01-01T00:00:30Z") -> dict[str, Any]:
    result = {
        "driver": "d",
        "pool": "p",
        "device": "a",
        "bindingConditions": ["Ready"],
        "bindingFailureConditions": ["Failed"],
    }
    return {
        "metadata": {"namespace": "ns", "name": "c"},
        "status": {
            "allocation": {"devices": {"results": [result]}, "allocationTimestamp": stamp},
            "devices": [{"driver": "d", "pool": "p", "device": "a", "conditions": conditions}],
        },
    }


def test_ready_once_every_condition_is_true() -> None:
    met = binding_state([claim([{"type": "Ready", "status": "True"}])], timeout_s=600, now=NOW)
    assert met == BindingMet(waited=30.0), "met, after the wait since the allocation"
    assert binding_state([{"metadata": {"name": "plain"}, "status": {}}], timeout_s=600, now=NOW) is None


def test_waits_until_the_conditions_or_the_deadline() -> None:
    state = binding_state([claim([{"type": "Ready", "status": "False"}])], timeout_s=600, now=NOW)
    assert isinstance(state, BindingWait)
    assert state.message == "waiting for binding conditions: ns/c device d/p/a waits for Ready"
    assert abs(state.again - (600 - 30 + 0.1)) < 1e-6


def test_a_failure_condition_or_the_timeout_fails_with_the_nodes_reason() -> None:
    failed = claim([{"type": "Failed", "status": "True", "reason": "NoDriver", "message": "gone"}])
    state = binding_state([failed], timeout_s=600, now=NOW)
    assert isinstance(state, BindingFailure) and state.claim is failed
    assert (state.status, state.waited) == ("failure", 30.0)
    assert "binding failure condition Failed is True (NoDriver: gone)" in state.message
    late = binding_state([claim([])], timeout_s=10, now=NOW)
    assert isinstance(late, BindingFailure) and late.status == "timeout"
    assert "binding conditions were not met within 10s" in late.message


def test_only_allocations_with_binding_conditions_are_stamped() -> None:
    with_conditions = claim([])["status"]["allocation"]
    assert needs_timestamp([with_conditions])
    assert not needs_timestamp([{"devices": {"results": [{"device": "a"}]}}])
