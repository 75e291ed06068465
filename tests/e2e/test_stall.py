"""Long work does not stall the operator: a costly selector against a small wall-clock budget.

A DeviceClass whose (legal) selector costs a tenth of a millisecond or more per device,
over thousands of devices, is most of a second of CEL or more. The operator runs with an
``--allocation-timeout`` of a sixth of that evaluation (measured on this machine first, so
that a faster machine does not finish inside the budget): the pod's first attempts run
out of wall-clock time and the pod gets a ``FailedScheduling`` Warning saying so (not
"does not fit"); meanwhile ``/healthz`` keeps answering, the DeviceClass status
controller finishes evaluating the class off the loop, and the pod is allocated on a
later attempt from the cached answers.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.request
from collections.abc import Callable

import pytest

from draco.api.constants import API_VERSION
from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, scaled, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]

SLICES = 24
PER_SLICE = 100
#: The whole evaluation must take at least this long on the quietest machine ...
MIN_EVALUATION_S = 0.6
#: ... and the budget is this fraction of it (at most 0.5 s).
BUDGET_FRACTION = 1 / 6
# Under CEL's parser recursion limit of 250 (kube-apiserver refuses longer chains too).
PIECES = 240


def slow_selector(driver: str) -> str:
    """PIECES chained concatenations: true on every device of ``driver``, and slow to evaluate.

    Guarded by the driver, as a class in a shared cluster must be: on another driver's
    device ``.model`` is a runtime error, which (as upstream) fails the pod's attempt.
    """
    literals = [chr(ord("a") + i % 26) * 5 for i in range(PIECES)]
    chain = " + ".join([f'device.attributes["{driver}"].model', *(f'"{text}"' for text in literals)])
    return f'device.driver == "{driver}" && {chain} == "A100{"".join(literals)}"'


def slices(namespace: str, node: str, count: int = SLICES) -> list[k.Obj]:
    driver = k.driver_of(namespace)
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{s}-{driver}"},
            "spec": {
                "driver": driver,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                "nodeName": node,
                "devices": [
                    {
                        "name": f"gpu-{s}-{i}",
                        # A distinct uuid per device: no two share a cached selector result.
                        "attributes": {"model": {"string": "A100"}, "uuid": {"string": f"GPU-{s}-{i}"}},
                    }
                    for i in range(PER_SLICE)
                ],
            },
        }
        for s in range(count)
    ]


def sized_for_this_machine(namespace: str, node: str) -> tuple[int, float]:
    """How many slices make the slow selector cost at least MIN_EVALUATION_S here, and the
    allocation budget that is a fraction of their evaluation: the selector is timed with
    draco's own CEL on a few of the devices (the quickest of three runs, so that a busy
    moment does not make the budget too generous)."""
    from draco.allocator import Inventory, SelectorCache

    sample = slices(namespace, node, count=1)
    runs = []
    for _ in range(3):
        cache = SelectorCache()  # a fresh one each time: no answer comes from a cache
        devices = Inventory.build(classes=[], slices=sample, cache=cache).devices
        evaluate = cache.evaluator(slow_selector(k.driver_of(namespace)))
        began = time.perf_counter()
        for device in devices:
            evaluate(device)
        runs.append((time.perf_counter() - began) / len(devices))
    per_device = min(runs)
    count = max(SLICES, math.ceil(MIN_EVALUATION_S / (per_device * PER_SLICE)))
    budget = min(0.5, count * PER_SLICE * per_device * BUDGET_FRACTION)
    return count, round(budget, 3)


class HealthProbe:
    """GETs /healthz every 0.2 s in a thread: (when, status or None, seconds)."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/healthz"
        self.samples: list[tuple[float, int | None, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            started = time.monotonic()
            status: int | None
            try:
                with urllib.request.urlopen(self.url, timeout=30) as response:
                    status = response.status
            except OSError:
                status = None
            self.samples.append((started, status, time.monotonic() - started))


@pytest.mark.timeout(900)  # its waits add up to more than the default 300 s on a busy machine
def test_a_timed_out_attempt_is_reported_and_healthz_answers_meanwhile(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    node = f"{namespace}-n1"
    class_name = f"{namespace}-slow"
    count, budget = sized_for_this_machine(namespace, node)
    k.add_nodes(kube, [k.node(node)])
    k.create(kube, slices(namespace, node, count))
    health_port = free_port()
    operator = start_operator(
        draco_process,
        health_port=health_port,
        lease=f"draco-{namespace}",
        extra=("--allocation-timeout", str(budget)),
    )
    wait_for(lambda: "Allocation started" in operator.logs(), timeout=120, what="the operator to start")

    with HealthProbe(health_port) as probe:
        started = time.monotonic()
        k.create(
            kube,
            [
                {
                    "apiVersion": API_VERSION,
                    "kind": "DeviceClass",
                    "metadata": {"name": class_name},
                    "spec": {"selectors": [{"cel": {"expression": slow_selector(k.driver_of(namespace))}}]},
                },
                {
                    "apiVersion": API_VERSION,
                    "kind": "ResourceClaim",
                    "metadata": {"name": "slow", "namespace": namespace},
                    "spec": k.claim_spec(namespace, class_name=class_name),
                },
                k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "slow"}]),
            ],
        )
        notes = wait_for(
            lambda: [n for n in k.event_notes(kube, namespace, "p", "FailedScheduling") if "timed out" in n],
            timeout=120,
            what="a FailedScheduling Event saying the attempt timed out",
        )
        assert isinstance(notes, list)
        assert "--allocation-timeout" in notes[0]
        assert "does not mean the claims do not fit" in notes[0]
        assert "fit on none" not in notes[0]
        timed_out_at = time.monotonic()
        # The class's own evaluation (DeviceClass status) goes on off the loop and ends.
        wait_for(
            lambda: (
                ((k.get(kube, k.CLASSES, class_name) or {}).get("status") or {}).get("selectedDevices")
                == count * PER_SLICE
            ),
            timeout=300,
            what="the slow class's status to count every device",
        )
        counted_at = time.monotonic()
        # And the pod is allocated by a later attempt, from the cached answers.
        wait_for(
            lambda: not k.is_gated(k.get(kube, "pod", "p", namespace=namespace) or {}),
            timeout=300,
            what="the pod to be allocated on a retry",
        )

    during = [s for s in probe.samples if started <= s[0] <= counted_at]
    assert len(during) >= 3, f"too few /healthz probes while evaluating: {during}"
    assert all(status == 200 for _, status, _ in during), during
    # On the loop, a few thousand devices at milliseconds each held /healthz for the whole
    # evaluation. Off it, no probe waits for more than a fraction of it: the bound grows with
    # the evaluation's own wall time, so a busy machine that slows both does not fail this.
    evaluation = counted_at - started
    slowest = max(seconds for _, _, seconds in during)
    assert slowest < max(scaled(3.0), evaluation / 4), (slowest, evaluation, during)
    assert timed_out_at <= counted_at
    assert operator.popen.poll() is None
