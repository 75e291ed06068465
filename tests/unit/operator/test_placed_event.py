"""The one Event a placed pod gets: kube-scheduler's `Scheduled` where draco bound the pod
itself, draco's `Allocated` where it pinned the pod and kube-scheduler binds it."""

from __future__ import annotations

from typing import Any

from draco.api.constants import SCHEDULER_NAME
from draco.operator.scheduler.messages import REASON_ALLOCATED, REASON_SCHEDULED, placed_event


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


CLAIM: dict[str, Any] = {
    "metadata": {"name": "p-gpu", "namespace": "ns"},
    "status": {"allocation": {"devices": {"results": [{"device": "gpu-1"}, {"device": "gpu-0"}]}}},
}


def test_a_pod_draco_binds_gets_kube_schedulers_words_with_its_devices() -> None:
    reason, message = placed_event(_pod(schedulerName=SCHEDULER_NAME), "n1", [CLAIM])
    assert reason == REASON_SCHEDULED == "Scheduled"
    assert message == "Successfully assigned ns/p to n1; allocated claim ns/p-gpu (gpu-0, gpu-1)"
    assert placed_event(_pod(schedulerName=SCHEDULER_NAME), "n1", []) == (
        "Scheduled",
        "Successfully assigned ns/p to n1",
    )


def test_a_pinned_pod_gets_dracos_allocated() -> None:
    reason, message = placed_event(_pod(), "n1", [CLAIM])
    assert reason == REASON_ALLOCATED == "Allocated"
    assert message == (
        "Allocated claim ns/p-gpu (gpu-0, gpu-1) on node n1; "
        "the pod is pinned there and its scheduling gate is removed"
    )
