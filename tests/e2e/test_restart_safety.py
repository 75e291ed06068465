"""The operator killed (SIGKILL) at random points while pods come and go never leaves the
cluster inconsistent: no device allocated twice, every pod either un-gated with a
consistent allocation or still waiting with an Event, no generated claim without a live
pod, no finalizer on a claim nobody uses.

And devices freed while the operator is down or starting go to the pods that wait for
them: a restarted operator's picture of the devices in use converges to the API's without
waiting for an unrelated event. ``DRACO_RESTART_REPEATS`` (default 1) runs that test that
many times per variant; ``DRACO_SIGKILL_REPEATS`` (default 1) runs the SIGKILL test that many
times, each with its own seed.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from draco.api.constants import FINALIZER
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, scaled, start_operator, wait_for

# One replica, restarted at once: without it every restart after a SIGKILL would first wait
# out the dead process's 15 s Lease (test_leader.py covers that).
RESTART_AT_ONCE = ("--leader-elect=false",)

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]

NODES = 5
DEVICES_PER_NODE = 8
PODS = 200
WAVE = 20
FINISHED_SHARE = 0.75
MIN_KILLS = 3


def wait_started(operator: DracoProcess) -> None:
    """Until the allocation half has listed the cluster and its workers run."""
    wait_for(lambda: "Allocation started" in operator.logs(), timeout=90, what="operator started")


def finish(kube: ControlPlane, namespace: str, names: list[str]) -> None:
    """Pods ran to completion (there is no kubelet to say so)."""
    patch = json.dumps({"status": {"phase": "Succeeded"}})

    def one(name: str) -> None:
        kube.kubectl(
            "patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", patch
        )

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, names))


def problems(kube: ControlPlane, namespace: str) -> list[str]:
    """Every inconsistency of the namespace's pods and claims right now (empty when settled)."""
    pods = {p["metadata"]["name"]: p for p in k.items(kube, "pods", namespace=namespace)}
    claims = k.items(kube, k.CLAIMS, namespace=namespace)
    found: list[str] = []
    holders = Counter(device for c in claims for device in k.allocated_devices(c))
    found += [f"device {device} allocated {n} times" for device, n in holders.items() if n > 1]
    by_name = {c["metadata"]["name"]: c for c in claims}
    live_uids = {p["metadata"]["uid"] for p in pods.values() if p["status"].get("phase") != "Succeeded"}
    for claim in claims:
        name = claim["metadata"]["name"]
        owners = [o["uid"] for o in claim["metadata"].get("ownerReferences") or []]
        if owners and not set(owners) & live_uids:
            found.append(f"generated claim {name} has no live pod")
        # A generated claim is created with the finalizer; on any other unused claim, and on
        # an allocated one nobody uses, it is left over.
        pending_generated = owners and not (claim.get("status") or {}).get("allocation")
        if (
            FINALIZER in (claim["metadata"].get("finalizers") or [])
            and not k.reserved_uids(claim)
            and not pending_generated
        ):
            found.append(f"claim {name} keeps the finalizer but nobody uses it")
    waiting_without_event = []
    for name, pod in pods.items():
        if pod["status"].get("phase") == "Succeeded":
            continue
        if k.is_gated(pod):
            waiting_without_event.append(name)
            continue
        claim_name = k.generated_claims(pod).get("gpu")
        pod_claim = by_name.get(claim_name or "")
        if pod_claim is None:
            found.append(f"un-gated pod {name} has no claim")
        elif k.reserved_uids(pod_claim) != {pod["metadata"]["uid"]}:
            found.append(f"un-gated pod {name}: claim {claim_name} is not reserved for it")
        elif k.allocation_node(pod_claim) != k.pinned_node(pod):
            found.append(
                f"un-gated pod {name}: pinned to {k.pinned_node(pod)}, claim on {k.allocation_node(pod_claim)}"
            )
    if waiting_without_event:
        with_event = {
            (e.get("regarding") or {}).get("name")
            for e in k.events(kube, namespace)
            if e.get("reason") == "FailedScheduling"
        }
        found += [
            f"gated pod {n} has no FailedScheduling Event"
            for n in waiting_without_event
            if n not in with_event
        ]
        if sum(holders.values()) < NODES * DEVICES_PER_NODE:
            found.append(
                f"{len(waiting_without_event)} pods wait while {NODES * DEVICES_PER_NODE - sum(holders.values())} devices are free"
            )
    return found


#: How many times the SIGKILL test runs (``DRACO_SIGKILL_REPEATS``), each with its own seed.
SIGKILL_REPEATS = int(os.environ.get("DRACO_SIGKILL_REPEATS", "1"))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("attempt", range(SIGKILL_REPEATS))
def test_sigkill_at_random_points_keeps_allocations_consistent(
    kube: ControlPlane, namespace: str, draco_process: Start, attempt: int
) -> None:
    seed = 20261121 + attempt
    print(f"sigkill test seed {seed}")
    rng = random.Random(seed)
    names = [f"{namespace}-n{i}" for i in range(NODES)]
    k.add_nodes(kube, [k.node(n) for n in names])
    k.apply(kube, [k.device_class(namespace), k.template(namespace, "one")])
    k.apply(kube, [k.node_slice(namespace, n, DEVICES_PER_NODE) for n in names])
    operator = start_operator(draco_process, namespace, extra=RESTART_AT_ONCE)
    wait_started(operator)
    kills = 0
    entry = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    finished: set[str] = set()
    waves = PODS // WAVE
    for wave in range(waves):
        k.create(kube, [k.pod(namespace, f"p{wave:02d}-{i:02d}", entry) for i in range(WAVE)])
        time.sleep(rng.uniform(0.0, 1.5))
        # At random, but at least MIN_KILLS times whatever the seed draws.
        if rng.random() < 0.6 or waves - wave <= MIN_KILLS - kills:
            operator.kill()
            kills += 1
            operator = start_operator(draco_process, namespace, extra=RESTART_AT_ONCE)
            if rng.random() < 0.3:  # sometimes in the middle of its start
                time.sleep(rng.uniform(1.0, 4.0))
                operator.kill()
                kills += 1
                operator = start_operator(draco_process, namespace, extra=RESTART_AT_ONCE)
            wait_started(operator)
        running = [
            p["metadata"]["name"]
            for p in k.items(kube, "pods", namespace=namespace)
            if not k.is_gated(p) and p["metadata"]["name"] not in finished
        ]
        done = [n for n in running if rng.random() < FINISHED_SHARE]
        finish(kube, namespace, done)
        finished.update(done)
    assert kills >= MIN_KILLS
    # Every pod still running finishes too, so the devices certainly turn over: the pods
    # that wait must get them, from whichever operator survived the kills.
    running = [
        p["metadata"]["name"]
        for p in k.items(kube, "pods", namespace=namespace)
        if not k.is_gated(p) and p["metadata"]["name"] not in finished
    ]
    finish(kube, namespace, running)
    finished.update(running)

    # Waiting pods are woken by devices being freed, so a defect leaves this state unchanged
    # however long it waits; the budget only has to cover a slow machine.
    budget = scaled(180)
    deadline = time.monotonic() + budget
    while found := problems(kube, namespace):
        assert time.monotonic() < deadline, f"still inconsistent after {budget:.0f}s: {found}"
        time.sleep(2)
    # Still consistent a while later: nothing was left half-done to go wrong afterwards.
    time.sleep(3)
    assert problems(kube, namespace) == []
    ungated = [p for p in k.items(kube, "pods", namespace=namespace) if not k.is_gated(p)]
    assert len(ungated) > NODES * DEVICES_PER_NODE, "pods really came and went through the devices"


#: How many times each variant of the restart-and-free test runs (``DRACO_RESTART_REPEATS``).
RESTART_REPEATS = int(os.environ.get("DRACO_RESTART_REPEATS", "1"))
#: 60 one-device pods on 40 devices: 40 are placed, 20 wait; 20 placed pods then go away.
RESTART_PODS = 60
FREED = 20
#: How long the waiting pods may take to get the freed devices once the operator runs.
FREED_TO_WAITING_S = 30.0


def _ungated(kube: ControlPlane, namespace: str) -> list[str]:
    return sorted(
        p["metadata"]["name"] for p in k.items(kube, "pods", namespace=namespace) if not k.is_gated(p)
    )


def _waiting_with_event(kube: ControlPlane, namespace: str) -> set[str]:
    """Gated pods the operator tried and found no device for (a FailedScheduling Event)."""
    gated = {p["metadata"]["name"] for p in k.items(kube, "pods", namespace=namespace) if k.is_gated(p)}
    tried = {
        (e.get("regarding") or {}).get("name")
        for e in k.events(kube, namespace)
        if e.get("reason") == "FailedScheduling"
    }
    return gated & tried


def _free(kube: ControlPlane, namespace: str, names: list[str]) -> None:
    """The pods ran to completion, then were deleted (no kubelet: gone at once)."""
    finish(kube, namespace, names)
    kube.kubectl("delete", "pod", "-n", namespace, "--wait=false", *names, timeout=120)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("attempt", range(RESTART_REPEATS))
@pytest.mark.parametrize("freed", ["while-down", "while-starting"])
def test_devices_freed_around_a_restart_go_to_waiting_pods(
    kube: ControlPlane, namespace: str, draco_process: Start, freed: str, attempt: int
) -> None:
    names = [f"{namespace}-n{i}" for i in range(NODES)]
    k.add_nodes(kube, [k.node(n) for n in names])
    k.apply(kube, [k.device_class(namespace), k.template(namespace, "one")])
    k.apply(kube, [k.node_slice(namespace, n, DEVICES_PER_NODE) for n in names])
    devices = NODES * DEVICES_PER_NODE
    operator = start_operator(draco_process, namespace)
    wait_started(operator)
    entry = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    k.create(kube, [k.pod(namespace, f"p{i:02d}", entry) for i in range(RESTART_PODS)])
    wait_for(
        lambda: (
            len(_ungated(kube, namespace)) == devices
            and len(_waiting_with_event(kube, namespace)) == RESTART_PODS - devices
        ),
        timeout=180,
        interval=1,
        what=f"{devices} pods placed and {RESTART_PODS - devices} waiting with an Event",
    )
    operator.kill()
    leaving = _ungated(kube, namespace)[:FREED]
    if freed == "while-down":
        _free(kube, namespace, leaving)
        operator = start_operator(draco_process, namespace)
    else:
        operator = start_operator(draco_process, namespace)
        # After its first LIST, before its watches run: the window a fresh operator must
        # not lose changes in.
        wait_for(lambda: "Lifecycle primed" in operator.logs(), timeout=90, what="operator listing")
        _free(kube, namespace, leaving)
    wait_started(operator)
    wait_for(
        lambda: len(_ungated(kube, namespace)) == devices,
        timeout=FREED_TO_WAITING_S,
        interval=0.5,
        what=f"the {FREED} freed devices given to the {RESTART_PODS - devices} waiting pods",
    )
    assert problems(kube, namespace) == []
