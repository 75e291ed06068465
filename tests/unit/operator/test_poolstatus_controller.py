"""ResourcePoolStatusRequests answered once by the operator (KEP-5677's controller),
in-process over the in-memory API server, on virtual time."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from draco.kube import client as k
from draco.kube.client import Obj
from draco.operator.informers import RESOURCE_POOL_STATUS_REQUESTS, Informers
from draco.operator.options import OperatorOptions
from draco.operator.resourcepoolstatus.controller import PoolStatusController
from draco.operator.resourcepoolstatus.service import PoolStatusService
from draco.operator.root import build_controllers
from draco.operator.scheduler.controller import AllocationController
from draco.runtime.health import Health

from ..fakekube import FakeAPI, FakeKube
from ..virtualtime import run_virtual
from .test_controllers import DRIVER, device_class, node, node_slice, running, until


def request(name: str, **spec: Any) -> Obj:
    return {"metadata": {"name": name}, "spec": {"driver": DRIVER, "limit": 100, **spec}}


def allocated_claim(device: str, pool: str) -> Obj:
    return {
        "metadata": {"name": f"held-{device}", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}]}
            }
        },
    }


def answer(api: FakeAPI, name: str) -> Obj | None:
    found = api.get(RESOURCE_POOL_STATUS_REQUESTS, name)
    return (found or {}).get("status")


def test_a_request_is_answered_once_with_every_pool_of_its_driver() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        for name in ("n1", "n2"):
            api.put(k.NODES, node(name))
            api.put(k.RESOURCE_SLICES, node_slice(name, devices=4))
        api.put(k.RESOURCE_CLAIMS, allocated_claim("gpu-0", "n1"))
        api.put(RESOURCE_POOL_STATUS_REQUESTS, request("all"))
        api.put(RESOURCE_POOL_STATUS_REQUESTS, request("one", poolName="n2"))
        async with running(api, AllocationController, PoolStatusController):
            status = await until(lambda: answer(api, "all"), what="the request answered")
            assert status["poolCount"] == 2
            assert [(p["poolName"], p["totalDevices"], p["allocatedDevices"]) for p in status["pools"]] == [
                ("n1", 4, 1),
                ("n2", 4, 0),
            ]
            assert (status["totalDevices"], status["availableDevices"], status["allocatedDevices"]) == (
                8,
                7,
                1,
            )
            (condition,) = status["conditions"]
            assert (condition["type"], condition["reason"]) == ("Complete", "CalculationComplete")
            one = await until(lambda: answer(api, "one"), what="the pool's request answered")
            assert [p["poolName"] for p in one["pools"]] == ["n2"] and one["poolCount"] == 1
            # Answered once: a later allocation changes nothing written.
            writes = [r for r in api.requests if r[1] == "resourcepoolstatusrequests" and r[0] == "PUT"]
            api.put(k.RESOURCE_CLAIMS, allocated_claim("gpu-1", "n1"))
            await asyncio.sleep(5)
            assert answer(api, "all") == status
            assert [
                r for r in api.requests if r[1] == "resourcepoolstatusrequests" and r[0] == "PUT"
            ] == writes

    run_virtual(main())


def test_an_incomplete_pool_is_waited_for_then_reported() -> None:
    async def main() -> None:
        api = FakeAPI()
        half = node_slice("n1")
        half["spec"]["pool"]["resourceSliceCount"] = 2
        api.put(k.RESOURCE_SLICES, half)
        api.put(RESOURCE_POOL_STATUS_REQUESTS, request("early"))
        async with running(api, AllocationController, PoolStatusController):
            loop_time = asyncio.get_running_loop().time
            began = loop_time()
            status = await until(lambda: answer(api, "early"), within=60, what="the request answered at last")
            # Tried 5 times, 1 s doubling, before it is answered with what it saw.
            assert loop_time() - began >= 15
            (pool,) = status["pools"]
            assert pool["validationError"].startswith("PoolIncomplete:") and "totalDevices" not in pool
            assert status["invalidPools"] == 1
            assert status["conditions"][0]["message"] == "Calculated status for 1 pools (1 incomplete)"

    run_virtual(main())


def test_old_requests_are_swept() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(RESOURCE_POOL_STATUS_REQUESTS, request("answered"))
        async with running(api, AllocationController, PoolStatusController) as (_kube, _informers, built):
            service: PoolStatusService = built[1].service
            await until(lambda: answer(api, "answered"), what="the request answered")
            assert await service.sweep() == 0
            later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)
            service.clock = lambda: later
            assert await service.sweep() == 1
            assert api.get(RESOURCE_POOL_STATUS_REQUESTS, "answered") is None
            await asyncio.sleep(1)

    run_virtual(main())


def test_the_controller_is_built_with_the_allocations_inventory_never_without_it() -> None:
    """The composition root hands the pool status controller the inventory of the
    allocation controller built before it (no lookup at run time); without one, it says so."""

    async def main() -> None:
        kube = FakeKube(FakeAPI())
        informers = Informers.over(kube)
        allocation, pool_status = build_controllers(
            [AllocationController, PoolStatusController],
            kube=kube,
            informers=informers,
            options=OperatorOptions(extended_resources=False),
            health=Health(),
        )
        assert isinstance(allocation, AllocationController) and isinstance(pool_status, PoolStatusController)
        assert pool_status.service.inventory == allocation.service.current_inventory
        with pytest.raises(ValueError, match="build the allocation controller before it"):
            build_controllers(
                [PoolStatusController],
                kube=kube,
                informers=informers,
                options=OperatorOptions(),
                health=Health(),
            )

    run_virtual(main())
