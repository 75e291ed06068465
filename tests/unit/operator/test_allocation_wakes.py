"""The allocation controller's Kopf handlers over the informers (`scheduler/handlers.py`),
on virtual time: gated pods go onto the queue, a burst of inventory changes wakes the
waiting pods once after the coalescing window, and a claim's change wakes the pod that
waits on it at once. No API: the informers are fed as their watches would feed them."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from draco.api.constants import SCHEDULING_GATE
from draco.kube.client import Kube, Obj
from draco.operator.informers import Informers
from draco.operator.scheduler.allocation import AllocationService
from draco.operator.scheduler.handlers import WAKE_COALESCE_S, AllocationHandlers
from draco.operator.scheduler.refusals import Refusals
from draco.operator.scheduler.untranslated import UntranslatedPods
from draco.scheduling.view import ClusterView

from ..virtualtime import run_virtual
from .test_lifecycle_intake import Nothing, feed, make_claim


def slice_(name: str, devices: int) -> Obj:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-1",
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def gated_pod(name: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}], "containers": []},
    }


def handlers_of(service: AllocationService, informers: Informers) -> AllocationHandlers:
    """The allocation's handlers over ``service``, with the safety net's watcher."""
    refusals = Refusals(
        kube=service.kube,
        view=service.view,
        pods=informers.pods,
        claims=informers.claims,
        enqueue_after=lambda _key, _delay: None,
    )
    return AllocationHandlers(service, refusals=refusals, untranslated=UntranslatedPods(service.kube))


def wired() -> tuple[Informers, AllocationHandlers, list[str]]:
    informers = Informers.over(Nothing())
    woken: list[str] = []
    view = ClusterView(claim_cache=informers.claims)
    kube = cast(Kube, None)  # these paths write nothing
    service = AllocationService(
        kube=kube,
        view=view,
        claim_informer=informers.claims,
        pods=informers.pods,
        pod_groups=informers.pod_groups,
        enqueue=woken.append,
    )
    return informers, handlers_of(service, informers), woken


def test_gated_pods_in_the_cache_and_later_ones_go_onto_the_queue() -> None:
    async def main() -> None:
        informers, handlers, woken = wired()
        feed(informers.pods, gated_pod("early"))
        handlers.follow(informers)
        feed(informers.pods, gated_pod("late"))
        feed(informers.pods, {**gated_pod("plain"), "spec": {"containers": []}})
        # Through the service's backoff (none yet for a new pod: at once).
        assert woken == ["ns/early", "ns/late"]
        assert set(handlers.service.gated_pods) == {
            "ns/early",
            "ns/late",
        }

    run_virtual(main())


def test_a_burst_of_slice_changes_wakes_waiting_pods_once_after_the_window() -> None:
    async def main() -> None:
        informers, handlers, woken = wired()
        handlers.follow(informers)
        handlers.service.waiters.wait("ns/a", frozenset({"ns/c"}))
        handlers.service.waiters.wait("ns/b", frozenset())
        loop = asyncio.get_running_loop()
        started = loop.time()
        for devices in (1, 2, 3):
            feed(informers.slices, slice_("pool-1", devices))
            await asyncio.sleep(WAKE_COALESCE_S / 4)
        assert woken == [], "nothing before the window ends"
        await asyncio.sleep(WAKE_COALESCE_S)
        assert sorted(woken) == ["ns/a", "ns/b"], "each waiting pod once for the whole burst"
        assert loop.time() - started < 2 * WAKE_COALESCE_S
        feed(informers.slices, slice_("pool-1", 3), "DELETED")
        await asyncio.sleep(WAKE_COALESCE_S * 1.5)
        assert sorted(woken) == ["ns/a", "ns/a", "ns/b", "ns/b"], "a deletion frees capacity too"

    run_virtual(main())


def test_a_claim_change_wakes_the_pod_waiting_on_it_at_once() -> None:
    async def main() -> None:
        informers, handlers, woken = wired()
        handlers.follow(informers)
        handlers.service.waiters.wait("ns/a", frozenset({"ns/c"}))
        handlers.service.waiters.wait("ns/b", frozenset({"ns/other"}))
        claim: dict[str, Any] = make_claim("c")
        feed(informers.claims, claim)
        assert woken == ["ns/a"]

    run_virtual(main())
