"""Which of the package's files one pod's allocation attempt runs, traced.

One gated pod whose claim the lifecycle made already (one template, two nodes with a
device each), on the in-memory API server of the unit tests (`tests/unit/fakekube.py`),
on virtual time; the lifecycle and allocation controllers as the operator runs them. The
attempt that places the pod (its ``sync_pod`` call) is traced with ``sys.settrace``: every
Python function it enters in its own task (work it hands to other tasks, such as the
Event it posts in the background, is not counted), and every call from the attempt's own
module (`operator/scheduler/allocation.py`) into another file of the package. Prints the
files by package and the counts.

    .venv/bin/python hack/attempt_trace.py
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kopf  # noqa: E402
from tests.unit.fakekube import FakeAPI, FakeKube  # noqa: E402
from tests.unit.virtualtime import run_virtual  # noqa: E402

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE  # noqa: E402
from draco.kube import client as k  # noqa: E402
from draco.operator.informers import Informers  # noqa: E402
from draco.operator.options import OperatorOptions  # noqa: E402
from draco.operator.resourceclaim.controller import LifecycleController  # noqa: E402
from draco.operator.scheduler import allocation  # noqa: E402
from draco.operator.scheduler.controller import AllocationController  # noqa: E402
from draco.runtime.health import Health  # noqa: E402
from draco.runtime.offload import Offloader  # noqa: E402

PACKAGE = str(ROOT / "operator" / "draco") + "/"
ATTEMPT_MODULE = str(Path(allocation.__file__).resolve())


def _objects(api: FakeAPI) -> None:
    driver = "gpu.example.com"
    api.put(
        k.DEVICE_CLASSES,
        {
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    api.put(
        k.RESOURCE_CLAIM_TEMPLATES,
        {
            "metadata": {"name": "one-gpu", "namespace": "ns"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}
            },
        },
    )
    for name in ("n1", "n2"):
        capacity = {"cpu": "8", "memory": "16Gi", "pods": "110"}
        api.put(
            k.NODES, {"metadata": {"name": name}, "status": {"allocatable": capacity, "capacity": capacity}}
        )
        api.put(
            k.RESOURCE_SLICES,
            {
                "metadata": {"name": f"{name}-gpu"},
                "spec": {
                    "driver": driver,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}],
                },
            },
        )


def _pod(*, gated: bool) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {
                CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
            },
        },
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            **({"schedulingGates": [{"name": SCHEDULING_GATE}]} if gated else {}),
        },
        "status": {"phase": "Pending"},
    }


class Tracer:
    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.files: Counter[str] = Counter()
        self.handoffs = 0
        self.handoff_targets: Counter[str] = Counter()
        self._seen: list[FrameType] = []
        self._seen_ids: set[int] = set()

    def trace(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return None
        try:
            if asyncio.current_task() is not self.task:
                return None
        except RuntimeError:
            return None
        filename = frame.f_code.co_filename
        if not filename.startswith(PACKAGE):
            return None
        if id(frame) in self._seen_ids:
            return None  # a coroutine resumed, not a new call
        self._seen.append(frame)
        self._seen_ids.add(id(frame))
        relative = filename[len(PACKAGE) :]
        self.files[relative] += 1
        caller = frame.f_back
        if caller is not None and caller.f_code.co_filename == ATTEMPT_MODULE and filename != ATTEMPT_MODULE:
            self.handoffs += 1
            self.handoff_targets[relative] += 1
        return None


async def main() -> None:
    api = FakeAPI()
    _objects(api)
    kube = FakeKube(api)
    informers = Informers.over(kube)
    await informers.start()
    options = OperatorOptions(extended_resources=False)
    built: list[Any] = []
    memo = kopf.Memo(namespaces=())
    for make in (LifecycleController, AllocationController):
        kwargs: dict[str, Any] = {
            "kube": kube,
            "informers": informers,
            "options": options,
            "health": Health(),
        }
        if "memo" in inspect.signature(make).parameters:
            kwargs["memo"] = memo
        built.append(make(**kwargs))
    allocation_controller = built[1]
    inline = Offloader(processes=0)
    _use_inline(allocation_controller, inline)
    service = _service(allocation_controller)
    traced: list[Tracer] = []
    original = service.sync_pod

    async def sync_pod(key: str) -> float | None:
        if key != "ns/p":
            return await original(key)
        tracer = Tracer(asyncio.current_task())  # type: ignore[arg-type]
        traced.append(tracer)
        sys.settrace(tracer.trace)
        try:
            return await original(key)
        finally:
            sys.settrace(None)

    service.sync_pod = sync_pod
    for controller in built:
        await controller.start()
    try:
        api.put(k.PODS, _pod(gated=True))
        for _ in range(2000):
            found = api.get(k.PODS, "p", "ns") or {}
            if traced and not (found.get("spec") or {}).get("schedulingGates"):
                break
            await asyncio.sleep(0.1)
        else:
            raise SystemExit("the pod was not placed")
    finally:
        for controller in reversed(built):
            await controller.stop()
        await informers.stop()
    tracer = traced[-1]  # the attempt that placed it (earlier ones waited for its claim)
    by_package: dict[str, list[str]] = {}
    for name in sorted(tracer.files):
        by_package.setdefault(str(Path(name).parent), []).append(Path(name).name)
    for package, names in sorted(by_package.items()):
        print(f"{package}: {', '.join(names)}")
    scheduling = [n for n in tracer.files if n.startswith(("operator/scheduler/", "scheduling/"))]
    print(f"files entered: {len(tracer.files)} (operator/scheduler and scheduling: {len(scheduling)})")
    print(f"calls from {Path(ATTEMPT_MODULE).name} into other files: {tracer.handoffs}")
    print("  by file: " + ", ".join(f"{n} {c}" for n, c in sorted(tracer.handoff_targets.items())))


def _service(controller: Any) -> Any:
    scheduling = getattr(controller, "scheduling", None)
    return scheduling.service if scheduling is not None else controller.service


def _use_inline(controller: Any, inline: Offloader) -> None:
    service = _service(controller)
    service.offload = inline
    placer = getattr(service, "placer", None)
    if placer is not None:
        placer.offload = inline


if __name__ == "__main__":
    run_virtual(main())
