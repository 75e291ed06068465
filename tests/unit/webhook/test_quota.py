"""The webhook's device quota charge: the entries of a claim's class's extended resources,
and a pod's special claim checked against its pod (kubernetes/kubernetes PR #134210)."""

from __future__ import annotations

from typing import Any

from draco.kube import client as k
from draco.webhook.podadmission import ClassCache
from draco.webhook.quota import QuotaCharger
from tests.unit.fakekube import FakeAPI, FakeKube

EXPLICIT = "requests.example.com/gpu"
IMPLICIT = "requests.deviceclass.resource.draco.dev/gpu"


def _world(used: str) -> tuple[FakeAPI, QuotaCharger]:
    api = FakeAPI()
    api.put(
        k.DEVICE_CLASSES, {"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": "example.com/gpu"}}
    )
    api.put(
        k.RESOURCE_QUOTAS,
        {
            "metadata": {"name": "gpus", "namespace": "ns"},
            "spec": {"hard": {EXPLICIT: "2", IMPLICIT: "2"}},
            "status": {"hard": {EXPLICIT: "2", IMPLICIT: "2"}, "used": {EXPLICIT: used, IMPLICIT: "0"}},
        },
    )
    kube = FakeKube(api)
    return api, QuotaCharger(kube, classes=ClassCache(kube))


def _claim(*, special: bool, name: str = "c", pod_uid: str = "u1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if special:
        meta["annotations"] = {"resource.draco.dev/extended-resource-claim": "true"}
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod_uid, "controller": True}
        ]
    return {
        "metadata": meta,
        "spec": {
            "devices": {
                "requests": [
                    {"name": "container-0-request-0", "exactly": {"deviceClassName": "gpu", "count": 1}}
                ]
            }
        },
    }


async def test_a_claim_is_charged_under_its_classs_extended_resource() -> None:
    _, charger = _world(used="2")  # two pods hold the explicit entry's limit
    refusal = await charger.refusal(_claim(special=False))
    assert refusal is not None and f"exceeded quota: gpus, requested: {EXPLICIT}=1" in refusal


async def test_a_pods_special_claim_is_not_charged_again_for_what_the_pod_asked() -> None:
    api, charger = _world(used="2")
    pod = api.put(
        k.PODS,
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}}}]},
        },
    )
    # The pod counted itself already under the explicit name.
    assert await charger.refusal(_claim(special=True, pod_uid=pod["metadata"]["uid"])) is None
    stored = api.get(k.RESOURCE_QUOTAS, "gpus", "ns") or {}
    assert stored["status"]["used"] == {EXPLICIT: "2", IMPLICIT: "1"}


async def test_a_special_claim_whose_pod_is_not_there_is_charged_in_full() -> None:
    _, charger = _world(used="2")
    refusal = await charger.refusal(_claim(special=True))
    assert refusal is not None and "exceeded quota: gpus" in refusal
