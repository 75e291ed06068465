"""Groups of pods in the allocation service (`scheduler/gangs.py`), over informers fed by
hand: a gang member is not placed alone (its group's key goes onto the queue), a group
missing members or its PodGroup says so and holds nothing, and a basic group or a gang
that runs already leaves its pods to be placed one by one."""

from __future__ import annotations

from typing import Any, cast

from draco.api.constants import POD_GROUP_LABEL, SCHEDULING_GATE
from draco.kube.client import Kube, Obj
from draco.operator.informers import Informers
from draco.operator.scheduler.allocation import AllocationService
from draco.operator.scheduler.gangs import GROUP_PREFIX, MEMBERS_GRACE_S
from draco.scheduling.view import ClusterView

from ..virtualtime import run_virtual
from .test_allocation_wakes import handlers_of
from .test_lifecycle_intake import Nothing, feed


def member(name: str, group: str, *, gated: bool = True) -> Obj:
    spec: dict[str, Any] = {"containers": []}
    if gated:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    else:
        spec["nodeName"] = "node-1"
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {POD_GROUP_LABEL: group},
        },
        "spec": spec,
    }


def pod_group(name: str, policy: Obj) -> Obj:
    return {
        "apiVersion": "scheduling.draco.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"schedulingPolicy": policy},
    }


def wired() -> tuple[Informers, AllocationService, list[str]]:
    informers = Informers.over(Nothing())
    queued: list[str] = []
    view = ClusterView(claim_cache=informers.claims)
    kube = cast(Kube, None)  # nothing here writes; an Event that cannot be posted is logged
    service = AllocationService(
        kube=kube,
        view=view,
        claim_informer=informers.claims,
        pods=informers.pods,
        pod_groups=informers.pod_groups,
        enqueue=queued.append,
    )
    handlers_of(service, informers).follow(informers)
    return informers, service, queued


def test_a_gang_member_is_placed_with_its_group_not_alone() -> None:
    async def main() -> None:
        informers, service, queued = wired()
        feed(informers.pod_groups, pod_group("train", {"gang": {"minCount": 2}}))
        feed(informers.pods, member("train-0", "train"))
        queued.clear()
        assert await service.sync_pod("ns/train-0") is None
        assert queued == [f"{GROUP_PREFIX}ns/train"]
        assert "ns/train-0" in service.waiters, "it waits for its claims, which bring its group back"

    run_virtual(main())


def test_a_group_missing_members_says_so_and_holds_nothing() -> None:
    async def main() -> None:
        informers, service, _ = wired()
        feed(informers.pod_groups, pod_group("train", {"gang": {"minCount": 3}}))
        feed(informers.pods, member("train-0", "train"))
        feed(informers.pods, member("train-1", "train"))
        await service.sync_pod("ns/train-0")
        now = [100.0]
        service.gangs.clock = lambda: now[0]
        # Its members may be on their way: not told at once (a burst would change the message per pod).
        assert await service.sync_pod(f"{GROUP_PREFIX}ns/train") == MEMBERS_GRACE_S
        assert "ns/train" not in service.gangs.status.told
        now[0] += MEMBERS_GRACE_S
        again = await service.sync_pod(f"{GROUP_PREFIX}ns/train")
        assert again is None, "woken by its members, not polled"
        told = service.gangs.status.told["ns/train"]
        assert "2 of 3 pod(s) exist" in told
        assert not service.view.in_flight()
        # The third member comes: its group counts again.
        feed(informers.pods, member("train-2", "train"))
        assert f"{GROUP_PREFIX}ns/train" in service.waiters

    run_virtual(main())


def test_a_missing_pod_group_is_waited_for() -> None:
    async def main() -> None:
        informers, service, _ = wired()
        feed(informers.pods, member("lost-0", "lost"))
        await service.sync_pod("ns/lost-0")
        assert await service.sync_pod(f"{GROUP_PREFIX}ns/lost") == 10.0
        assert "PodGroup ns/lost does not exist" in service.gangs.status.told["ns/lost"]

    run_virtual(main())


def test_a_basic_group_and_a_running_gang_place_their_pods_one_by_one() -> None:
    async def main() -> None:
        informers, service, _ = wired()
        feed(informers.pod_groups, pod_group("loose", {"basic": {}}))
        assert not await service.gangs.route(cast(Any, member("loose-0", "loose")))
        feed(informers.pod_groups, pod_group("running", {"gang": {"minCount": 2}}))
        feed(informers.pods, member("running-0", "running", gated=False))
        feed(informers.pods, member("running-1", "running", gated=False))
        late = member("running-2", "running")
        feed(informers.pods, late)
        assert not await service.gangs.route(cast(Any, late)), "the gang runs: a later member comes alone"

    run_virtual(main())
