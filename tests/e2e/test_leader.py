"""Replicas of `draco operator` against one API server: one leader at a time (the Lease),
a standby that takes over when the leader is SIGKILLed, and never a device given twice;
operators limited to different namespaces share one driver without double allocation.

Every operator here is a real `draco operator` process started through `draco_process`;
each test uses a Lease of its own (in its namespace), so tests never wait on each other's.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pytest

from draco.api.constants import API_VERSION
from draco.kube.leader import micro_time_now
from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]

LEASE = "draco-operator-e2e"
#: client-go's defaults, which `draco operator` uses.
LEASE_DURATION_S = 15.0
RETRY_PERIOD_S = 2.0


def _http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


@dataclass
class Replica:
    """One operator process and its ports."""

    process: DracoProcess
    metrics_port: int
    health_port: int
    namespaces: tuple[str, ...] = ()

    def alive(self) -> bool:
        return self.process.popen.poll() is None

    def identity(self) -> str | None:
        """The holder identity it logged when it started waiting for the lease."""
        for line in self.process.logs().splitlines():
            if '"Waiting for leadership"' in line:
                return str(json.loads(line)["identity"])
        return None

    def reports_leading(self) -> bool | None:
        """`leader_election_master_status` on /metrics (None: no answer)."""
        status, body = _http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        if status != 200:
            return None
        found = re.search(rf'leader_election_master_status{{name="{LEASE}"}} ([01])\.0', body)
        return None if found is None else found.group(1) == "1"

    def readiness(self) -> dict[str, object] | None:
        status, body = _http_get(f"http://127.0.0.1:{self.health_port}/readyz")
        if status == 0:
            return None
        data: dict[str, object] = json.loads(body)
        data["status"] = status
        return data


def start_replica(draco_process: Start, lease_namespace: str, *namespaces: str) -> Replica:
    metrics_port, health_port = free_port(), free_port()
    process = start_operator(
        draco_process,
        *namespaces,
        lease=LEASE,
        metrics_port=metrics_port,
        health_port=health_port,
        extra=("--leader-election-namespace", lease_namespace),
    )
    return Replica(process, metrics_port, health_port, tuple(namespaces))


def lease(kube: ControlPlane, namespace: str) -> k.Obj | None:
    return k.get(kube, "leases.coordination.k8s.io", LEASE, namespace=namespace)


def holder(kube: ControlPlane, namespace: str) -> str:
    return str(((lease(kube, namespace) or {}).get("spec") or {}).get("holderIdentity") or "")


@dataclass
class Watcher:
    """Samples, in the background, the Lease's holder and what every live replica's
    /metrics says, and records every moment two replicas claimed to lead at once."""

    kube: ControlPlane
    namespace: str
    replicas: list[Replica]
    holders: list[tuple[float, str]] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    leading_seen: Counter[int] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watcher:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            current = holder(self.kube, self.namespace)
            if not self.holders or self.holders[-1][1] != current:
                self.holders.append((time.monotonic(), current))
            leading = [i for i, r in enumerate(self.replicas) if r.alive() and r.reports_leading()]
            for i in leading:
                self.leading_seen[i] += 1
            if len(leading) > 1:
                self.overlaps.append(f"replicas {leading} all report leading (lease holder {current!r})")
            self._stop.wait(0.3)


def log_events(replica: Replica) -> list[str]:
    events = []
    for line in replica.process.logs().splitlines():
        try:
            events.append(str(json.loads(line).get("event", "")))
        except ValueError:
            continue
    return events


def assert_nothing_ran_before_leading(replica: Replica) -> None:
    """The controllers (Kopf's startup handlers) start only after the lease is taken."""
    events = log_events(replica)
    assert "Became leader" in events, events[-20:]
    became = events.index("Became leader")
    for started in ("Operator started", "Allocation started"):
        assert started in events, f"{started!r} missing: {events[-20:]}"
        assert events.index(started) > became, f"{started!r} logged before leadership"


PODS = 200
WAVE = 20
NODES = 5
DEVICES_PER_NODE = 48


def allocation_problems(kube: ControlPlane, namespaces: list[str], *, expect_pods: int | None) -> list[str]:
    """Devices given twice, and (when `expect_pods`) pods not yet allocated and un-gated."""
    claims = [c for ns in namespaces for c in k.items(kube, k.CLAIMS, namespace=ns)]
    holders = Counter(device for c in claims for device in k.allocated_devices(c))
    found = [f"device {d} allocated {n} times" for d, n in holders.items() if n > 1]
    if expect_pods is None:
        return found
    pods = [p for ns in namespaces for p in k.items(kube, "pods", namespace=ns)]
    by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    if len(pods) != expect_pods:
        found.append(f"{len(pods)} pods, expected {expect_pods}")
    for pod in pods:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if k.is_gated(pod):
            found.append(f"pod {ns}/{name} still gated")
            continue
        claim = by_key.get((ns, k.generated_claims(pod).get("gpu") or ""))
        if claim is None or not k.allocated_devices(claim):
            found.append(f"pod {ns}/{name} un-gated without an allocated claim")
        elif k.allocation_node(claim) != k.pinned_node(pod):
            found.append(
                f"pod {ns}/{name} pinned to {k.pinned_node(pod)}, claim on {k.allocation_node(claim)}"
            )
    return found


@pytest.mark.timeout(900)
def test_two_replicas_one_leader_sigkilled_midway_no_device_twice(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    names = [f"{namespace}-n{i}" for i in range(NODES)]
    k.add_nodes(kube, [k.node(n) for n in names])
    k.apply(kube, [k.device_class(namespace), k.template(namespace, "one")])
    k.apply(kube, [k.node_slice(namespace, n, DEVICES_PER_NODE) for n in names])
    replicas = [start_replica(draco_process, namespace, namespace) for _ in range(2)]

    wait_for(lambda: holder(kube, namespace), timeout=120, what="a replica to take the lease")
    wait_for(
        lambda: all(r.identity() for r in replicas), timeout=60, what="both replicas to log their identity"
    )
    by_identity = {r.identity(): i for i, r in enumerate(replicas)}
    first = by_identity[holder(kube, namespace)]
    leader, standby = replicas[first], replicas[1 - first]
    wait_for(lambda: leader.reports_leading() is True, timeout=60, what="the leader's metric to say so")
    assert standby.reports_leading() is False
    # A standby is ready (it can take over) but says it does not lead; it runs nothing.
    standby_ready = wait_for(standby.readiness, timeout=30, what="the standby's /readyz")
    assert isinstance(standby_ready, dict)
    assert (standby_ready["status"], standby_ready["leader"]) == (200, False), standby_ready
    wait_for(
        lambda: (leader.readiness() or {}).get("status") == 200, timeout=120, what="the leader to be ready"
    )
    assert (leader.readiness() or {}).get("leader") is True
    assert "Allocation started" not in log_events(standby)

    killed_at, standby_log_at_kill = 0.0, 0
    watcher = Watcher(kube, namespace, replicas).start()
    try:
        entry = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
        waves = PODS // WAVE
        for wave in range(waves):
            k.create(kube, [k.pod(namespace, f"p{wave:02d}-{i:02d}", entry) for i in range(WAVE)])
            if wave == waves // 2 - 1:
                # Mid-way: some pods allocated, some not yet; the leader dies without a word.
                wait_for(
                    lambda: any(not k.is_gated(p) for p in k.items(kube, "pods", namespace=namespace)),
                    timeout=120,
                    what="the leader to allocate some pods",
                )
                standby_log_at_kill = len(log_events(standby))
                leader.process.kill()
                killed_at = time.time()
        new_holder = standby.identity()
        wait_for(lambda: holder(kube, namespace) == new_holder, timeout=120, what="the standby to take over")
        # From the Lease itself (the standby stamps acquireTime with this machine's clock), so
        # the test's own polling of a loaded API server is not counted.
        acquired = ((lease(kube, namespace) or {}).get("spec") or {}).get("acquireTime", "")
        took_over_after = datetime.fromisoformat(acquired.replace("Z", "+00:00")).timestamp() - killed_at
        wait_for(
            lambda: not allocation_problems(kube, [namespace], expect_pods=PODS),
            timeout=300,
            interval=2,
            what="every pod allocated and un-gated",
        )
    finally:
        watcher.stop()

    assert allocation_problems(kube, [namespace], expect_pods=PODS) == []
    assert watcher.overlaps == [], watcher.overlaps
    assert [h for _, h in watcher.holders] == [leader.identity(), standby.identity()], watcher.holders
    assert watcher.leading_seen[first] > 0 and watcher.leading_seen[1 - first] > 0, watcher.leading_seen
    # The standby led only after the kill, and ran its controllers only once it led.
    assert "Became leader" not in log_events(standby)[:standby_log_at_kill]
    assert_nothing_ran_before_leading(standby)
    # client-go's bound: the lease duration on the standby's clock from the last renewal
    # it saw, plus its jittered retry (and the API round trips of a loaded machine).
    assert took_over_after < LEASE_DURATION_S + 2 * 2.2 * RETRY_PERIOD_S + 15, took_over_after
    spec = (lease(kube, namespace) or {}).get("spec") or {}
    assert spec.get("leaseTransitions") == 1, spec
    print(f"takeover {took_over_after:.1f}s after SIGKILL; holders {[h for _, h in watcher.holders]}")


def shared_template(namespace: str, class_name: str) -> k.Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one", "namespace": namespace},
        "spec": {"spec": k.claim_spec(namespace, class_name=class_name)},
    }


@pytest.mark.timeout(600)
def test_operators_of_two_namespaces_share_one_driver_without_double_allocation(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    """`--namespace a` and `--namespace b`: one leads at a time (same Lease), and whichever
    leads sees the other namespace's claims and pods: no device twice, no cpu twice.

    One node: 3 cpus, 7 devices of one driver. The leader's namespace takes 3 devices and
    all 3 cpus; the other's then gets 3 more devices for pods without cpu requests, and its
    pod asking for a cpu waits (its device would be free: the cpu is what is missing)."""
    a, b = namespace, f"{namespace}-b"
    kube.kubectl("create", "namespace", b)
    try:
        node_name = f"{a}-n0"
        k.add_nodes(kube, [k.node(node_name, cpu="3")])
        gpu_class = f"{a}-gpu"
        k.apply(kube, [k.device_class(a), k.node_slice(a, node_name, 7)])
        k.apply(kube, [shared_template(ns, gpu_class) for ns in (a, b)])
        replicas = {ns: start_replica(draco_process, a, ns) for ns in (a, b)}
        wait_for(lambda: holder(kube, a), timeout=120, what="one operator to take the lease")
        wait_for(lambda: all(r.identity() for r in replicas.values()), timeout=60, what="identities logged")
        first = next(ns for ns, r in replicas.items() if r.identity() == holder(kube, a))
        second = b if first == a else a
        entry = [{"name": "gpu", "resourceClaimTemplateName": "one"}]

        # The leader's namespace: three pods of one cpu each fill the node's cpu.
        k.create(kube, [k.pod(first, f"p{i}", entry, cpu="1") for i in range(3)])
        wait_for(
            lambda: not allocation_problems(kube, [first], expect_pods=3),
            timeout=180,
            what=f"the pods of {first} allocated",
        )
        # The standby's namespace: three pods without cpu requests and one asking for a cpu.
        k.create(kube, [k.pod(second, f"q{i}", entry) for i in range(3)])
        k.create(kube, [k.pod(second, "hungry", entry, cpu="1")])
        # Nobody serves them while the operator of `first` leads: no claim is made for them.
        assert k.items(kube, k.CLAIMS, namespace=second) == []
        assert all(k.is_gated(p) for p in k.items(kube, "pods", namespace=second))

        # The leader stops cleanly: it releases the lease and the other one leads at once.
        replicas[first].process.stop()
        wait_for(
            lambda: holder(kube, a) == replicas[second].identity(),
            timeout=60,
            what="the standby to take over",
        )
        pods = {f"q{i}" for i in range(3)}

        def second_settled() -> bool:
            listed = {p["metadata"]["name"]: p for p in k.items(kube, "pods", namespace=second)}
            return all(not k.is_gated(listed[n]) for n in pods) and bool(
                k.event_notes(kube, second, "hungry", "FailedScheduling")
            )

        wait_for(second_settled, timeout=180, interval=1, what=f"the pods of {second} allocated or refused")
        assert allocation_problems(kube, [a, b], expect_pods=None) == []
        devices = Counter(
            d for ns in (a, b) for c in k.items(kube, k.CLAIMS, namespace=ns) for d in k.allocated_devices(c)
        )
        assert len(devices) == 6, devices
        hungry = k.get(kube, "pods", "hungry", namespace=second)
        assert hungry is not None and k.is_gated(hungry), (
            "the node's cpu is taken by the other namespace's pods"
        )
        notes = k.event_notes(kube, second, "hungry", "FailedScheduling")
        assert any("Insufficient cpu" in n for n in notes), notes
        assert_nothing_ran_before_leading(replicas[second])
    finally:
        kube.kubectl("delete", "namespace", b, "--wait=false", check=False)


def test_a_leader_whose_lease_is_taken_exits_at_once(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    """Losing the Lease stops every controller: the process exits (status 1) within the
    renew deadline, as client-go's controllers do, and the Deployment restarts it."""
    replica = start_replica(draco_process, namespace, namespace)
    wait_for(lambda: replica.reports_leading() is True, timeout=120, what="the operator to lead")
    spec = {"holderIdentity": "intruder", "renewTime": micro_time_now(), "leaseDurationSeconds": 3600}
    kube.kubectl(
        "patch", "leases.coordination.k8s.io", LEASE, "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": spec}),
    )  # fmt: skip
    taken_at = time.monotonic()
    wait_for(lambda: not replica.alive(), timeout=60, what="the operator to exit")
    exited_after = time.monotonic() - taken_at
    assert replica.process.popen.returncode == 1
    assert "Leadership lost" in log_events(replica)
    assert holder(kube, namespace) == "intruder", "it never took the lease back"
    # The next renewal (every retry period) sees the new holder; allow for a loaded machine.
    assert exited_after < RETRY_PERIOD_S + 10 + 15, exited_after

    # Its replacement waits as a standby (the intruder's lease runs an hour) and stops
    # cleanly on SIGTERM without ever running a controller.
    standby = start_replica(draco_process, namespace, namespace)
    wait_for(lambda: "New leader observed" in log_events(standby), timeout=60, what="the standby to wait")
    assert standby.reports_leading() is False
    standby.process.stop()
    assert standby.process.popen.returncode == 0
    events = log_events(standby)
    assert "Stopped while waiting for leadership" in events
    assert "Became leader" not in events and "Operator started" not in events
