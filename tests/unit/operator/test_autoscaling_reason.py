"""While autoscaling is on, a pod draco binds and cannot place is not ``Unschedulable``:
Karpenter and cluster-autoscaler act on that reason alone, and would take the pod for one
asking cpu and memory only (a node launched that does not help, part of a group its limits
cannot hold). Its demand pod speaks for it; the pod says ``WaitingForCapacity``."""

from __future__ import annotations

from typing import Any, cast

import pytest

from draco.kube.client import PODS
from draco.operator.autoscaling.service import DemandService
from draco.operator.scheduler.allocation import AllocationService
from draco.operator.scheduler.writes import ClaimWrites
from draco.scheduling.demand import NO_DEMAND, WAITING_FOR_CAPACITY_REASON
from draco.scheduling.view import ClusterView
from tests.unit.fakekube import FakeKube

POD: Any = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
    "spec": {"schedulerName": "draco", "containers": [{"name": "main", "image": "x"}]},
}


def _scheduled(kube: FakeKube) -> dict[str, Any]:
    pod = kube.fake.get(PODS, "p", "ns")
    assert pod is not None
    found = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert len(found) == 1
    return cast(dict[str, Any], found[0])


@pytest.mark.parametrize("reason", ["Unschedulable", WAITING_FOR_CAPACITY_REASON])
async def test_the_pod_is_marked_with_the_reason_it_was_given(reason: str) -> None:
    kube = FakeKube()
    stored = kube.fake.put(PODS, POD)
    writes = ClaimWrites(kube=kube, view=ClusterView(), claims=cast(Any, None), unschedulable_reason=reason)
    await writes.mark_unschedulable(cast(Any, stored), "0/3 nodes are available")
    condition = _scheduled(kube)
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        reason,
        "0/3 nodes are available",
    )


def _service(demand: Any) -> AllocationService:
    view = ClusterView()
    return AllocationService(
        kube=cast(Any, None),
        view=view,
        claim_informer=cast(Any, None),
        pods=cast(Any, None),
        pod_groups=cast(Any, None),
        enqueue=lambda _k: None,
        demand=demand,
    )


def test_the_allocation_takes_its_reason_from_the_seam() -> None:
    assert _service(NO_DEMAND).writes.unschedulable_reason == "Unschedulable"
    demand = DemandService(
        kube=cast(Any, None),
        informers=cast(Any, None),
        namespace="draco",
        queue=cast(Any, None),
        templates=cast(Any, None),
    )
    assert _service(demand).writes.unschedulable_reason == WAITING_FOR_CAPACITY_REASON
