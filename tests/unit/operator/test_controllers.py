"""The controllers end to end in-process, as upstream tests its controllers: each one's Kopf
handlers fed by real informers over an in-memory API server (`tests.unit.fakekube`), its
workers syncing against it, on virtual time (`tests.unit.virtualtime`: a timed eviction's
minutes pass at once, and exactly).

What tests/e2e shows against a real kube-apiserver is shown here for the sync functions
themselves: a pod's claim made from its template and released with the pod, a pod
allocated and pinned, a NoExecute taint's eviction at its time, a DeviceClass's counts,
device quota's usage, and a slice and a node deleted while the watches were broken
(a 410 after a restarted API server) no longer offered.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import kopf

from draco.api.bodies import key_of
from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    SCHEDULING_GATE,
)
from draco.api.meta import format_time
from draco.kube import client as k
from draco.kube.answers import error_from_status
from draco.kube.client import Obj
from draco.operator.deviceclassstatus.controller import ClassStatusController
from draco.operator.devicetainteviction.controller import EvictionController
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.operator.resourceclaim.controller import LifecycleController
from draco.operator.resourcequota.controller import QuotaController
from draco.operator.root import ControllerKind, build_controllers
from draco.operator.scheduler.controller import AllocationController
from draco.runtime.health import Health
from draco.runtime.offload import Offloader

from ..fakekube import FakeAPI, FakeKube
from ..virtualtime import run_virtual

V = "resource.draco.dev/v1"
DRIVER = "gpu.example.com"


def device_class(name: str = "gpu") -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def node(name: str) -> Obj:
    capacity = {"cpu": "8", "memory": "16Gi", "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def node_slice(node_name: str, devices: int = 2, *, taints: list[Obj] | None = None) -> Obj:
    return {
        "metadata": {"name": f"{node_name}-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", **({"taints": taints} if taints else {})} for i in range(devices)
            ],
        },
    }


def template(name: str = "one-gpu") -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "metadata": {"labels": {"from": "template"}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        },
    }


def pod(name: str, *, gated: bool = False, template_name: str = "one-gpu", **spec: Any) -> Obj:
    body: Obj = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {
                CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": template_name}])
            },
        },
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
        "status": {"phase": "Pending"},
    }
    if gated:
        body["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return body


async def until(check: Callable[[], Any], *, within: float = 120.0, what: str = "") -> Any:
    """Poll `check` on virtual time (each poll moves the clock 0.1 s) until it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {within} s of virtual time: {what or check}")


@asynccontextmanager
async def running(
    api: FakeAPI, *controllers: ControllerKind, options: OperatorOptions | None = None
) -> AsyncIterator[tuple[FakeKube, Informers, list[Any]]]:
    """The controllers over informers of `api`, started in order as the operator starts
    them; their CEL work evaluated in-process (no worker process in a unit test)."""
    kube = FakeKube(api)
    informers = Informers.over(kube)
    await informers.start()
    options = options or OperatorOptions(extended_resources=False)
    built = build_controllers(controllers, kube=kube, informers=informers, options=options, health=Health())
    inline = Offloader(processes=0)
    loop = asyncio.get_running_loop()
    epoch = datetime.datetime.now(datetime.UTC)
    for controller in built:
        # CEL in-process; and every clock the controllers read is the loop's (virtual) one.
        if isinstance(controller, AllocationController):
            service = controller.service
            service.offload = service.placer.offload = inline
            service.waiters.clock = loop.time
            controller.refusals.clock = loop.time
        elif isinstance(controller, ClassStatusController):
            controller.service.offload = inline
        elif isinstance(controller, EvictionController):
            controller.service.clock = lambda: epoch + datetime.timedelta(seconds=loop.time())
    started: list[Any] = []
    try:
        for controller in built:
            started.append(controller)
            await controller.start()
        yield kube, informers, built
    finally:
        for controller in reversed(started):
            await controller.stop()
        await informers.stop()


def claims_of(api: FakeAPI, pod_name: str) -> list[Obj]:
    return [
        c
        for c in api.all(k.RESOURCE_CLAIMS)
        if any(o.get("name") == pod_name for o in c["metadata"].get("ownerReferences") or ())
    ]


def test_a_pods_claim_is_made_from_its_template_and_released_with_the_pod() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        created = api.put(k.PODS, pod("p"))
        # (The allocation records the claim of a pod it does not place: the annotation's one writer.)
        async with running(api, LifecycleController, AllocationController):
            (claim,) = await until(lambda: claims_of(api, "p"), what="the pod's claim")
            meta = claim["metadata"]
            assert meta["ownerReferences"] == [kopf.build_owner_reference(created)]
            assert meta["annotations"][POD_CLAIM_NAME_ANNOTATION] == "gpu"
            assert meta["labels"] == {"from": "template"} and meta["finalizers"] == [FINALIZER]
            assert claim["spec"] == template()["spec"]["spec"]
            # A pod that is not gated gets its claim recorded by the lifecycle itself.
            await until(
                lambda: (
                    json.loads(
                        (api.get(k.PODS, "p", "ns") or {})["metadata"]["annotations"].get(
                            CLAIM_STATUSES_ANNOTATION, "{}"
                        )
                    ).get("gpu")
                    == meta["name"]
                ),
                what="the claim recorded on the pod",
            )
            done = api.get(k.PODS, "p", "ns")
            assert done is not None
            done["status"]["phase"] = "Succeeded"
            api.update(k.PODS, ("pods", "ns", "p"), done, subresource="status")
            await until(lambda: not api.all(k.RESOURCE_CLAIMS), what="the done pod's claim deleted")

    run_virtual(main())


def test_a_missing_template_is_a_warning_on_the_pod_until_it_appears() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.PODS, pod("p", template_name="later"))
        # Created a minute ago (a pod just created gets a moment's grace, below).
        api.objects[("pods", "ns", "p")]["metadata"]["creationTimestamp"] = format_time(
            datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)
        )
        async with running(api, LifecycleController):
            (event,) = await until(lambda: api.events("FailedResourceClaimCreation"), what="the Event")
            assert event["regarding"]["name"] == "p" and "later" in event["note"]
            api.put(k.RESOURCE_CLAIM_TEMPLATES, template("later"))
            await until(lambda: claims_of(api, "p"), within=5, what="the claim, once the template exists")

    run_virtual(main())


def test_a_new_pod_waits_a_moment_for_its_template_without_a_warning() -> None:
    """A pod and its template applied together, the pod first: the template is missing
    for a moment, which is no Warning; the pod gets its claim once it comes."""

    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.PODS, pod("p", template_name="soon"))
        async with running(api, LifecycleController):
            await asyncio.sleep(1)  # virtual: the lifecycle has looked and found it missing
            api.put(k.RESOURCE_CLAIM_TEMPLATES, template("soon"))
            await until(lambda: claims_of(api, "p"), within=5, what="the claim, once the template exists")
            assert api.events("FailedResourceClaimCreation") == []

    run_virtual(main())


def test_a_gated_pod_is_allocated_pinned_and_ungated() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        for name in ("n1", "n2"):
            api.put(k.NODES, node(name))
            api.put(k.RESOURCE_SLICES, node_slice(name))
        api.put(k.PODS, pod("p", gated=True))
        async with running(api, LifecycleController, AllocationController):
            placed = await until(
                lambda: (p := api.get(k.PODS, "p", "ns")) and not p["spec"].get("schedulingGates") and p,
                what="the pod un-gated",
            )
            terms = placed["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            (pinned,) = {e["values"][0] for t in terms["nodeSelectorTerms"] for e in t["matchFields"]}
            (claim,) = claims_of(api, "p")
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["pool"] == pinned and result["driver"] == DRIVER
            assert [r["name"] for r in claim["status"]["reservedFor"]] == ["p"]
            recorded = json.loads(placed["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])
            assert recorded == {"gpu": claim["metadata"]["name"]}

    run_virtual(main())


def test_an_attempt_out_of_its_wall_clock_budget_says_it_timed_out_not_that_nothing_fits() -> None:
    """``--allocation-timeout`` spent before the selectors are evaluated: the pod is told
    the attempt timed out (and retried), never refused as if its claims did not fit."""

    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        api.put(k.NODES, node("n1"))
        api.put(k.RESOURCE_SLICES, node_slice("n1"))
        api.put(k.PODS, pod("p", gated=True))
        options = OperatorOptions(extended_resources=False, allocation_timeout_s=1e-9)
        async with running(api, LifecycleController, AllocationController, options=options):
            notes = await until(
                lambda: [e["note"] for e in api.events("FailedScheduling")], what="a FailedScheduling Event"
            )
            assert all("timed out after" in n and "--allocation-timeout" in n for n in notes), notes
            assert placed(api, "p") is None

    run_virtual(main())


def test_a_pin_the_api_server_refuses_is_a_failed_scheduling_event_on_the_pod() -> None:
    """A write refused for good (403: a policy or a webhook denies it) is said on the pod,
    not only in the log, and the pod stays gated while the work queue retries it."""

    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        api.put(k.NODES, node("n1"))
        api.put(k.RESOURCE_SLICES, node_slice("n1"))
        api.put(k.PODS, pod("p", gated=True))
        patch = api.patch

        def refusing(resource: Any, key: Any, body: Any, *, kind: str, subresource: str | None) -> Obj:
            if resource.plural == "pods" and subresource is None and "spec" in body:
                denied = {
                    "code": 403,
                    "reason": "Forbidden",
                    "message": 'pods "p" is forbidden: denied by policy no-pins',
                }
                raise error_from_status(denied, what="the pin", code=403)
            return patch(resource, key, body, kind=kind, subresource=subresource)

        api.patch = refusing  # type: ignore[method-assign]
        async with running(api, LifecycleController, AllocationController):
            notes = await until(
                lambda: [e["note"] for e in api.events("FailedScheduling")], what="a FailedScheduling Event"
            )
            assert any("the API server refused a write" in n and "no-pins" in n for n in notes), notes
            assert placed(api, "p") is None

    run_virtual(main())


def placed(api: FakeAPI, name: str) -> Obj | None:
    """The pod once draco un-gated it, else None."""
    found = api.get(k.PODS, name, "ns")
    return found if found is not None and not found["spec"].get("schedulingGates") else None


def bind(api: FakeAPI, name: str) -> None:
    """What kube-scheduler does with a pod draco pinned and un-gated: bind it there."""
    found = api.get(k.PODS, name, "ns")
    assert found is not None
    terms = found["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    found["spec"]["nodeName"] = terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
    api.update(k.PODS, ("pods", "ns", name), found, subresource=None)


def rule(
    name: str, *, effect: str = "NoExecute", device: str = "gpu-0", added: str = "2026-01-01T00:00:00Z"
) -> Obj:
    """A DeviceTaintRule as the mutating webhook leaves it (its taint stamped `timeAdded`)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": "n1", "device": device},
            "taint": {"key": "example.com/broken", "effect": effect, "timeAdded": added},
        },
    }


def test_a_noexecute_taint_evicts_the_pods_using_the_device() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        api.put(k.NODES, node("n1"))
        api.put(k.RESOURCE_SLICES, node_slice("n1", devices=2))
        api.put(k.PODS, pod("p", gated=True))
        async with running(api, LifecycleController, AllocationController, EvictionController):
            await until(lambda: placed(api, "p"), what="the pod placed")
            bind(api, "p")
            (claim,) = claims_of(api, "p")
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            # A None-effect rule only says what NoExecute would evict.
            api.put(k.DEVICE_TAINT_RULES, rule("simulated", effect="None", device=result["device"]))

            def simulation() -> str:
                status = (api.get(k.DEVICE_TAINT_RULES, "simulated") or {}).get("status") or {}
                return str(((status.get("conditions") or [{}])[0]).get("message", ""))

            await until(lambda: "1 pod would be evicted" in simulation(), what="the None rule's simulation")
            assert api.get(k.PODS, "p", "ns") is not None
            api.put(k.DEVICE_TAINT_RULES, rule("broken", device=result["device"]))
            await until(lambda: api.get(k.PODS, "p", "ns") is None, what="the pod evicted")
            (marked,) = api.events("DeviceTaintManagerEviction")
            assert marked["note"] == "Marking for deletion" and marked["regarding"]["name"] == "p"
            statuses = [r for r in api.requests if r[:3] == ("PATCH", "pods", "status")]
            assert statuses, "the DisruptionTarget condition is set before the deletion"

    run_virtual(main())


def test_a_tolerated_taint_evicts_when_the_toleration_runs_out() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        tolerating = template()
        request = tolerating["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        request["tolerations"] = [{"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute",
                                   "tolerationSeconds": 300}]  # fmt: skip
        api.put(k.RESOURCE_CLAIM_TEMPLATES, tolerating)
        api.put(k.NODES, node("n1"))
        api.put(k.RESOURCE_SLICES, node_slice("n1", devices=1))
        api.put(k.PODS, pod("p", gated=True))
        async with running(api, LifecycleController, AllocationController, EvictionController) as (
            _,
            _,
            built,
        ):
            await until(lambda: placed(api, "p"), what="the pod placed")
            bind(api, "p")
            await asyncio.sleep(1)
            eviction = next(c for c in built if isinstance(c, EvictionController)).service
            added = eviction.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
            loop = asyncio.get_running_loop()
            tainted_at = loop.time()
            api.put(k.DEVICE_TAINT_RULES, rule("broken", added=added))
            await asyncio.sleep(295)
            assert api.get(k.PODS, "p", "ns") is not None, "tolerated for 300 s"
            await until(
                lambda: api.get(k.PODS, "p", "ns") is None, within=10, what="the pod evicted at 300 s"
            )
            assert 295 <= loop.time() - tainted_at <= 302

    run_virtual(main())


def test_a_device_classs_status_counts_what_it_selects_and_what_is_allocated() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        for name in ("n1", "n2"):
            api.put(k.NODES, node(name))
            api.put(k.RESOURCE_SLICES, node_slice(name, devices=3))
        async with running(api, ClassStatusController):
            status = await until(
                lambda: (c := api.get(k.DEVICE_CLASSES, "gpu")) and c.get("status", {}).get("selectedDevices") == 6
                and c["status"],
                what="6 devices selected",
            )  # fmt: skip
            assert status["allocatedDevices"] == 0
            valid = {c["type"]: c["status"] for c in status["conditions"]}
            assert valid["Valid"] == "True"
            api.delete(k.RESOURCE_SLICES, ("resourceslices", "", "n2-gpu"), {})
            await until(
                lambda: (
                    (api.get(k.DEVICE_CLASSES, "gpu") or {}).get("status", {}).get("selectedDevices") == 3
                ),
                what="3 devices once a slice went",
            )

    run_virtual(main())


def test_device_quota_counts_the_claims_of_its_namespace() -> None:
    async def main() -> None:
        api = FakeAPI()
        entry = "gpu.deviceclass.resource.draco.dev/devices"
        api.put(
            k.RESOURCE_QUOTAS, {"metadata": {"name": "q", "namespace": "ns"}, "spec": {"hard": {entry: "4"}}}
        )
        claim_spec = {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 3}}]}
        }
        api.put(k.RESOURCE_CLAIMS, {"metadata": {"name": "c", "namespace": "ns"}, "spec": claim_spec})
        async with running(api, QuotaController):
            used = await until(
                lambda: ((api.get(k.RESOURCE_QUOTAS, "q", "ns") or {}).get("status") or {}).get("used"),
                what="the quota counted",
            )
            assert used == {entry: "3"}
            api.delete(k.RESOURCE_CLAIMS, ("resourceclaims", "ns", "c"), {})
            await until(
                lambda: (api.get(k.RESOURCE_QUOTAS, "q", "ns") or {})["status"]["used"] == {entry: "0"},
                what="the usage given back",
            )

    run_virtual(main())


def test_device_quota_adds_claims_to_kube_controller_managers_pod_count_of_an_extended_resource() -> None:
    """Kubernetes 1.35's extended-resource quota (kubernetes/kubernetes PR #134210): a claim
    of class gpu (extendedResourceName example.com/gpu) counts under requests.example.com/gpu
    beside the pods' requests; kube-controller-manager writes the pods alone there (here by
    hand), and the operator writes pods plus claims again."""

    async def main() -> None:
        api = FakeAPI()
        api.put(
            k.DEVICE_CLASSES,
            {**device_class(), "spec": {**device_class()["spec"], "extendedResourceName": "example.com/gpu"}},
        )
        entry = "requests.example.com/gpu"
        implicit = "requests.deviceclass.resource.draco.dev/gpu"
        api.put(
            k.RESOURCE_QUOTAS,
            {"metadata": {"name": "q", "namespace": "ns"}, "spec": {"hard": {entry: "8", implicit: "8"}}},
        )
        api.put(
            k.PODS,
            {
                **pod("asker"),
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}}}]},
            },
        )
        claim_spec = {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}}]}
        }
        api.put(k.RESOURCE_CLAIMS, {"metadata": {"name": "c", "namespace": "ns"}, "spec": claim_spec})

        def used() -> dict[str, str]:
            return ((api.get(k.RESOURCE_QUOTAS, "q", "ns") or {}).get("status") or {}).get("used") or {}

        async with running(api, QuotaController):
            await until(lambda: used() == {entry: "3", implicit: "2"}, what="pods plus claims counted")
            key = ("resourcequotas", "ns", "q")
            # kube-controller-manager's write: the pods alone.
            status: Any = {"status": {"used": {entry: "1", implicit: "0"}}}
            api.patch(k.RESOURCE_QUOTAS, key, status, kind="merge", subresource="status")
            await until(lambda: used() == {entry: "3", implicit: "2"}, what="the claims added again")
            status = {"status": {"used": {entry: "5", implicit: "4"}}}
            api.patch(k.RESOURCE_QUOTAS, key, status, kind="merge", subresource="status")
            await asyncio.sleep(30)  # a charge (above the count) is left as it is until a claim comes
            assert used() == {entry: "5", implicit: "4"}

    run_virtual(main())


def test_a_slice_and_a_node_deleted_while_the_watches_were_broken_are_no_longer_offered() -> None:
    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        for name in ("n1", "n2", "n3"):
            api.put(k.NODES, node(name))
            api.put(k.RESOURCE_SLICES, node_slice(name, devices=1))
        async with running(api, LifecycleController, AllocationController):
            # Deleted, and the API server restarted before any watch saw it: every watch
            # resumes with a 410 and lists again.
            api.delete(k.RESOURCE_SLICES, ("resourceslices", "", "n1-gpu"), {})
            api.delete(k.NODES, ("nodes", "", "n2"), {})
            api.compact()
            api.put(k.PODS, pod("p", gated=True))
            placed = await until(
                lambda: (p := api.get(k.PODS, "p", "ns")) and not p["spec"].get("schedulingGates") and p,
                what="the pod placed",
            )
            terms = placed["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            assert {e["values"][0] for t in terms["nodeSelectorTerms"] for e in t["matchFields"]} == {"n3"}

    run_virtual(main())


def test_a_pod_that_fits_nowhere_is_reported_to_the_demand_seam_with_its_claims() -> None:
    """The executor's refusal of a pod that fits nowhere tells the autoscaling seam (its
    demand pods speak for it), with the pod's pending claims."""

    class Recorded:
        unschedulable_reason = "WaitingForCapacity"

        def __init__(self) -> None:
            self.reports: list[Any] = []

        def unplaced(self, report: Any) -> None:
            self.reports.append(report)

    async def main() -> None:
        api = FakeAPI()
        api.put(k.DEVICE_CLASSES, device_class())
        api.put(k.RESOURCE_CLAIM_TEMPLATES, template())
        api.put(k.NODES, node("n1"))  # no devices anywhere
        api.put(k.PODS, pod("p", gated=True))
        demand = Recorded()
        kube = FakeKube(api)
        informers = Informers.over(kube)
        await informers.start()
        options = OperatorOptions(extended_resources=False)
        lifecycle = LifecycleController(kube=kube, informers=informers, options=options, health=Health())
        allocation = AllocationController(
            kube=kube, informers=informers, options=options, health=Health(), demand=demand
        )
        allocation.service.offload = allocation.service.placer.offload = Offloader(processes=0)
        try:
            for controller in (lifecycle, allocation):
                await controller.start()
            (report, *_) = await until(lambda: demand.reports, what="the pod reported to the seam")
            assert report.key == "ns/p" and [key_of(p) for p in report.pods] == ["ns/p"]
            (pending,) = report.pending["ns/p"]
            assert pending["metadata"]["annotations"][POD_CLAIM_NAME_ANNOTATION] == "gpu"
            assert report.message == api.events("FailedScheduling")[-1]["note"]
        finally:
            for controller in (allocation, lifecycle):
                await controller.stop()
            await informers.stop()

    run_virtual(main())
