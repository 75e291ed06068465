"""kube-scheduler's binding-condition metrics (KEP-5007, GA in Kubernetes 1.38) as the
operator's binding check records them, as 1.38's DynamicResources plugin does at the end of
PreBind's wait: per allocated device result the wait, and per device with binding
conditions a count, by profile, driver and outcome."""

from __future__ import annotations

import datetime
from typing import Any, cast

from draco.operator.scheduler.writes import ClaimWrites
from draco.runtime.metrics import REGISTRY
from draco.scheduling.view import ClusterView
from tests.unit.fakekube import FakeKube

POD: Any = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"schedulerName": "my-profile"}}


def _claim(*, conditions: bool, prepared: bool = False) -> Any:
    result: dict[str, Any] = {"request": "r", "driver": "metrics.example.com", "pool": "n", "device": "d"}
    allocation: dict[str, Any] = {"devices": {"results": [result]}}
    status: dict[str, Any] = {"allocation": allocation}
    if conditions:
        result["bindingConditions"] = ["Prepared"]
        stamp = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=3)
        allocation["allocationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    if prepared:
        entry = {"driver": "metrics.example.com", "pool": "n", "device": "d"}
        status["devices"] = [{**entry, "conditions": [{"type": "Prepared", "status": "True"}]}]
    return {"metadata": {"name": "c", "namespace": "ns"}, "status": status}


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_wait_is_counted_when_it_ends_per_device() -> None:
    writes = ClaimWrites(kube=FakeKube(), view=cast(ClusterView, None), binding_timeout_s=600)
    counter = "scheduler_dra_bindingconditions_allocations_total"
    labels = {"profile": "my-profile", "driver": "metrics.example.com", "status": "success"}
    timed = "scheduler_dra_bindingconditions_wait_duration_seconds"
    before = _sample(counter, **labels), _sample(f"{timed}_count", **labels)

    assert (await writes.check_binding(POD, [_claim(conditions=True)]))[0] == "waiting"  # type: ignore[index]
    assert _sample(counter, **labels) == before[0], "a wait still going is not counted"

    assert await writes.check_binding(POD, [_claim(conditions=True, prepared=True)]) is None
    assert _sample(counter, **labels) == before[0] + 1
    assert _sample(f"{timed}_count", **labels) == before[1] + 1
    assert _sample(f"{timed}_sum", **labels) >= 3  # since the allocation was written

    # A pod that waits for nothing: no count, no wait (upstream returns before waiting).
    assert await writes.check_binding(POD, [_claim(conditions=False)]) is None
    assert (_sample(counter, **labels), _sample(f"{timed}_count", **labels)) == (before[0] + 1, before[1] + 1)
