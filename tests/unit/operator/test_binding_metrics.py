"""kube-scheduler's binding-condition metrics (KEP-5007, GA in Kubernetes 1.38) as the
operator's executor records them (`Executor.binding`), as 1.38's DynamicResources plugin does at the end of
PreBind's wait: per allocated device result the wait, and per device with binding
conditions a count, by profile, driver and outcome. The outcomes are upstream's PreBind
cases bound-claim-with-succeeded-binding-conditions (success) and
prebind-fail-with-binding-timeout (timeout: one count, one wait), and a binding failure
condition (failure)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from draco.kube.client import RESOURCE_CLAIMS
from draco.operator.informers import Informers
from draco.operator.scheduler.executor import Executor, Holds
from draco.operator.scheduler.waiting import WaitingPods
from draco.operator.scheduler.writes import ClaimWrites
from draco.runtime.metrics import REGISTRY
from draco.scheduling.view import ClusterView
from tests.unit.fakekube import FakeKube
from tests.unit.operator.test_lifecycle_intake import Nothing

POD: Any = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"schedulerName": "my-profile"}}


def _claim(*, conditions: bool, prepared: bool = False, failed: bool = False, age_s: int = 3) -> Any:
    result: dict[str, Any] = {"request": "r", "driver": "metrics.example.com", "pool": "n", "device": "d"}
    allocation: dict[str, Any] = {"devices": {"results": [result]}}
    status: dict[str, Any] = {"allocation": allocation}
    if conditions:
        result["bindingConditions"] = ["Prepared"]
        result["bindingFailureConditions"] = ["Failed"]
        stamp = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=age_s)
        allocation["allocationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    if prepared or failed:
        entry = {"driver": "metrics.example.com", "pool": "n", "device": "d"}
        kind = "Failed" if failed else "Prepared"
        status["devices"] = [{**entry, "conditions": [{"type": kind, "status": "True"}]}]
    return {"metadata": {"name": "c", "namespace": "ns"}, "status": status}


def _executor(kube: FakeKube) -> Executor:
    """The allocation's executor over ``kube``, binding timeout 600 s."""
    informers = Informers.over(Nothing())
    view = ClusterView(claim_cache=informers.claims)
    return Executor(
        writes=ClaimWrites(kube=kube, view=view, claims=informers.claims),
        holds=Holds(view),
        gated_pods={},
        waiters=WaitingPods(lambda _key, _delay: None),
        pods=informers.pods,
        binding_timeout_s=600,
    )


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_wait_is_counted_when_it_ends_per_device() -> None:
    executor = _executor(FakeKube())
    counter = "scheduler_dra_bindingconditions_allocations_total"
    labels = {"profile": "my-profile", "driver": "metrics.example.com", "status": "success"}
    timed = "scheduler_dra_bindingconditions_wait_duration_seconds"
    before = _sample(counter, **labels), _sample(f"{timed}_count", **labels)

    assert (await executor.binding(POD, [_claim(conditions=True)]))[0] == "waiting"  # type: ignore[index]
    assert _sample(counter, **labels) == before[0], "a wait still going is not counted"

    assert await executor.binding(POD, [_claim(conditions=True, prepared=True)]) is None
    assert _sample(counter, **labels) == before[0] + 1
    assert _sample(f"{timed}_count", **labels) == before[1] + 1
    assert _sample(f"{timed}_sum", **labels) >= 3  # since the allocation was written

    # A pod that waits for nothing: no count, no wait (upstream returns before waiting).
    assert await executor.binding(POD, [_claim(conditions=False)]) is None
    assert (_sample(counter, **labels), _sample(f"{timed}_count", **labels)) == (before[0] + 1, before[1] + 1)


@pytest.mark.parametrize(
    ("claim", "status"),
    [
        (_claim(conditions=True, age_s=700), "timeout"),
        (_claim(conditions=True, failed=True), "failure"),
    ],
    ids=["prebind-fail-with-binding-timeout", "binding-failure-condition"],
)
async def test_a_wait_that_fails_is_counted_with_how_it_ended(claim: Any, status: str) -> None:
    kube = FakeKube()
    kube.fake.put(RESOURCE_CLAIMS, claim)
    executor = _executor(kube)
    counter = "scheduler_dra_bindingconditions_allocations_total"
    timed = "scheduler_dra_bindingconditions_wait_duration_seconds_count"
    labels = {"profile": "my-profile", "driver": "metrics.example.com", "status": status}
    before = _sample(counter, **labels), _sample(timed, **labels)

    outcome = await executor.binding(POD, [kube.fake.get(RESOURCE_CLAIMS, "c", "ns")])  # type: ignore[list-item]

    assert outcome is not None and outcome[0] == "binding_failed"
    assert (_sample(counter, **labels), _sample(timed, **labels)) == (before[0] + 1, before[1] + 1)
