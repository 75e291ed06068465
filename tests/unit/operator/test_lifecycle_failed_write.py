"""A claim sync whose write fails leaves the lifecycle's claim store as the API has it.

Found by the fault-injection soak: a generated claim being deleted, read live after a
conflict, had its finalizer removal refused (the webhook was down); the removal had been
made on the stored object itself, so the retry found no finalizer and the claim stayed
Terminating for good. Now the claims come from the claim informer: a live read is never
stored, and a cached claim is synced on a copy, so a refused write leaves the informer as
the API has it. The client here stands in for the API answering that one refusal.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

import pytest

from draco.api.constants import FINALIZER
from draco.errors import KubeError
from draco.kube.client import Kube
from draco.operator.informers import Informers
from draco.operator.resourceclaim.lifecycle import Lifecycle
from draco.runtime.workqueue import WorkQueue
from tests.unit.operator.test_lifecycle_intake import Nothing


def deleting_claim() -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "gen",
            "namespace": "ns",
            "uid": "claim-gen",
            "resourceVersion": "7",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": [FINALIZER],
        },
        "spec": {},
        "status": {},
    }


class RefusingKube:
    """Answers the GET with the claim; refuses every write as kube-apiserver does when a
    webhook with failurePolicy Fail cannot be reached."""

    def __init__(self) -> None:
        self.writes = 0

    async def get_or_none(self, *_: object, **__: object) -> dict[str, Any]:
        return deleting_claim()

    async def replace(self, *_: object, **__: object) -> dict[str, Any]:
        self.writes += 1
        raise KubeError("failed calling webhook", status=500, reason="InternalError")


def test_a_refused_finalizer_removal_is_retried_not_forgotten() -> None:
    kube = RefusingKube()
    informers = Informers.over(Nothing())
    lc = Lifecycle(cast(Kube, kube), informers=informers, queue=WorkQueue("t-failed-write"))
    for _ in range(2):  # the first try and the retry (a live read: nothing cached)
        with pytest.raises(KubeError):
            asyncio.run(lc.sync_claim("ns", "gen"))
    assert kube.writes == 2  # the retry tried again


def test_the_cached_path_keeps_the_store_too() -> None:
    kube = RefusingKube()
    informers = Informers.over(Nothing())
    lc = Lifecycle(cast(Kube, kube), informers=informers, queue=WorkQueue("t-failed-write-cached"))
    informers.claims.apply("ADDED", copy.deepcopy(deleting_claim()))
    for _ in range(2):
        with pytest.raises(KubeError):
            asyncio.run(lc.sync_claim("ns", "gen"))
        stored = informers.claims.get("ns/gen")
        assert stored is not None and stored["metadata"]["finalizers"] == [FINALIZER]
    assert kube.writes == 2
