"""The fault-injection soak (`tests/e2e/test_soak.py`, `make soak`): a cluster of real
processes, churn, faults at random, and invariants checked while both run.

Why a harness of its own: the other e2e tests each check one behaviour on a quiet cluster;
the soak checks that draco keeps its promises while everything happens at once — pods
come and go, taint rules evict, and the processes under it die, restart and stall. It
runs on a control plane of its own (it restarts kube-apiserver and pauses etcd, which
would disturb other tests of the session) with:

- etcd + kube-apiserver (`ControlPlane`), draco's CRDs;
- `draco webhook` registered by URL (validation, defaulting, the pod webhook);
- two `draco operator` replicas on one Lease (a leader and a standby);
- two `draco agent` processes on the fake driver, two simulated nodes each, binding
  conditions on (the chart's default) and `failPrepareRate`: preparing fails now and then.

Three threads share the run: **churn** (pods with template claims, pods sharing a claim,
extended-resource pods, groups of pods placed all or nothing (a PodGroup and its members,
some sharing a claim of the group), NoExecute DeviceTaintRules on devices in use, pod and
group deletions; it
also does what kube-scheduler and kubelet would do: binds un-gated pods to the node
draco pinned them to, and finishes the deletion of bound pods), **faults** (seeded:
SIGKILL of the operator leader, the standby, the webhook or an agent, then a restart;
a kube-apiserver restart; etcd stopped with SIGSTOP for seconds) and **invariants**
(checked every couple of seconds, see `Checker`). A drain at the end deletes every pod
and waits for every claim to be released and every prepared claim unprepared; then the
processes are stopped and none may be left behind.

Every wait is on an observable signal with a timeout scaled by `DRACO_TEST_TIMEOUT_SCALE`;
the only sleeps are the churn's pace and a fault's length, which are what is being tested.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from draco.agent.checkpoint import PREPARE_COMPLETED, ClaimRecord
from draco.api.constants import (
    API_VERSION,
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    POD_GROUP_LABEL,
    SCHEDULING_API_VERSION,
    SCHEDULING_GATE,
)
from draco.runtime.tls import write_webhook_certificates
from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e.progress import unexplained_waits, waits_for_draco
from tests.e2e.schedkit import pinned_node
from tests.e2e.support import DracoProcess, scaled, start_draco

Obj = dict[str, Any]

NAMESPACE = "soak"
DRIVER = "gpu.soak.draco.dev"
CLASS = "soak-gpu"
EXTENDED = f"deviceclass.resource.draco.dev/{CLASS}"
TEMPLATE = "one-gpu"
SHARED_CLAIMS = ("shared-0", "shared-1")
LEASE = "draco-soak"
CLAIMS = f"/apis/{API_VERSION}/resourceclaims"
RULES = f"/apis/{API_VERSION}/devicetaintrules"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
#: The churn's pods of high priority (one in four single pods): they preempt the others
#: when the devices are full (docs/preemption.md); nothing may be preempted for a pod of
#: equal or lower priority.
HIGH_PRIORITY_CLASS = "soak-high"
HIGH_PRIORITY = 1000
HIGH_SHARE = 0.25
#: How many pods of high priority the churn makes beyond its pod limit (when full).
HIGH_EXTRA_PODS = 4
GROUPS = f"/apis/{SCHEDULING_API_VERSION}/namespaces/{NAMESPACE}/podgroups"
#: Fault kinds, in the order the summary prints them.
FAULTS = ("kill-leader", "kill-standby", "kill-webhook", "kill-agent", "restart-apiserver", "pause-etcd")


class ApiDown(Exception):
    """The API server did not answer (restarting, etcd paused): try again later."""


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    """A few verbs against kube-apiserver with the admin's certificate (stdlib only: the
    soak asks every couple of seconds, and a kubectl process per read would cost the busy
    machine more than what is being measured)."""

    def __init__(self, plane: ControlPlane) -> None:
        assert plane.certs is not None
        self.server = plane.server
        self.context = ssl.create_default_context(cafile=str(plane.certs.ca_cert))
        self.context.load_cert_chain(str(plane.certs.admin_cert), str(plane.certs.admin_key))

    def call(
        self, method: str, path: str, body: Obj | None = None, *, content_type: str = "application/json"
    ) -> Obj:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=20, context=self.context) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            if exc.code in (429, 500, 502, 503, 504):
                raise ApiDown(f"HTTP {exc.code}: {text[:200]}") from exc
            raise ApiError(exc.code, text) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ApiDown(str(exc)) from exc
        return json.loads(raw) if raw else {}

    def list(self, path: str, **query: str) -> list[Obj]:
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        items: list[Obj] = self.call("GET", path + suffix).get("items") or []
        return items

    def create(self, path: str, obj: Obj) -> Obj:
        return self.call("POST", path, obj)

    def delete(self, path: str, *, grace: int | None = None, uid: str | None = None) -> None:
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        try:
            self.call("DELETE", path, body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise


# ---- processes


@dataclass
class Managed:
    """A `draco` process the soak can SIGKILL and start again with the same arguments."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    folder: Path
    process: DracoProcess | None = None
    starts: int = 0
    pids: list[int] = field(default_factory=list)
    #: Taken by whoever stops or starts it: the fault thread and the supervisor.
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Kept down on purpose by the fault thread (the supervisor leaves it alone).
    held: bool = False
    started_at: float = 0.0

    def start(self) -> None:
        self.starts += 1
        self.started_at = time.monotonic()
        log_path = self.folder / f"{self.name}-{self.starts}.log"
        self.process = start_draco(self.args, env=self.env, log_path=log_path)
        self.pids.append(self.process.popen.pid)

    def alive(self) -> bool:
        return self.process is not None and self.process.popen.poll() is None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill(signal.SIGKILL)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def logs(self) -> Iterator[Path]:
        return iter(sorted(self.folder.glob(f"{self.name}-*.log")))


@dataclass
class Settings:
    """What one soak run does (`from_env`: `DRACO_SOAK_SECONDS`, `DRACO_SOAK_SEED`)."""

    seconds: float
    seed: int
    #: Short mode: every fault kind once, in a seeded order; long mode: a kind at random.
    every_fault_once: bool
    fault_gap: tuple[float, float]
    max_pods: int = 14
    fail_prepare_rate: float = 0.1
    agents: int = 2
    nodes_per_agent: int = 2
    devices_per_node: int = 4
    #: The operators' --group-timeout: a group holding devices without running is released
    #: after this long (the soak checks that none holds them much longer).
    group_timeout: float = 15.0
    #: How long a broken promise may last before it is a violation: work in flight
    #: (an operator failing over takes its Lease's 15 s plus a start).
    grace: float = field(default_factory=lambda: scaled(90))

    @classmethod
    def from_env(cls) -> Settings:
        seconds = float(os.environ.get("DRACO_SOAK_SECONDS") or 60)
        seed = int(os.environ.get("DRACO_SOAK_SEED") or random.SystemRandom().randrange(1, 2**31))
        short = seconds < 300
        gap = (seconds / (len(FAULTS) + 2),) * 2 if short else (8.0, 25.0)
        return cls(seconds=seconds, seed=seed, every_fault_once=short, fault_gap=gap)


# ---- the run


@dataclass
class Violation:
    invariant: str
    evidence: str
    at: float


class Soak:
    """One soak run: `start()`, `run()`, `drain()`, `stop()`, then `summary()`."""

    def __init__(self, plane: ControlPlane, folder: Path, settings: Settings) -> None:
        self.plane = plane
        self.folder = folder
        self.settings = settings
        self.api = Api(plane)
        self.counts: Counter[str] = Counter()
        self.violations: list[Violation] = []
        self.served: set[str] = set()
        self.created: set[str] = set()
        #: The priority of each pod the churn made (PriorityClass HIGH_PRIORITY, else 0).
        self.priorities: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.faults_done = threading.Event()
        self.started_at = time.monotonic()
        self.marker = f"soak-{os.getpid()}-{settings.seed}"
        self.env = {**plane.env(), "DRACO_SOAK_RUN": self.marker}
        self.operators: list[Managed] = []
        self.agents: list[Managed] = []
        self.webhook: Managed | None = None
        #: Suspect conditions by key: when first seen (a violation once older than grace).
        self.suspects: dict[tuple[str, ...], float] = {}
        self.reported: set[tuple[str, ...]] = set()
        #: The churn's groups by name: their minCount, and the UIDs of members ever seen un-gated.
        self.groups: dict[str, tuple[int, set[str]]] = {}
        self.errors: Counter[str] = Counter()

    # ---- setup

    def nodes(self) -> list[str]:
        return [
            f"soak-{chr(ord('a') + a)}-{n}"
            for a in range(self.settings.agents)
            for n in range(self.settings.nodes_per_agent)
        ]

    def start(self) -> None:
        self.plane.kubectl("create", "namespace", NAMESPACE)
        self.plane.kubectl("label", "namespace", NAMESPACE, "resource.draco.dev/pod-webhook=enabled")
        self._start_webhook()
        devices = self.folder / "devices.yaml"
        devices.write_text(
            f"name: {DRIVER}\ncdiClass: gpu\nbindingConditions: true\nfailPrepareSeed: {self.settings.seed}\n"
            f"devices:\n- name: gpu-{{index}}\n  count: {self.settings.devices_per_node}\n"
            f"  failPrepareRate: {self.settings.fail_prepare_rate}\n"
        )
        for a in range(self.settings.agents):
            prefix = f"soak-{chr(ord('a') + a)}"
            agent = Managed(
                f"agent-{a}",
                ("agent", "--node-name", prefix, "--nodes", str(self.settings.nodes_per_agent),
                 "--create-nodes", "--driver", "fake", "--config", str(devices),
                 "--cdi-dir", str(self.folder / prefix / "cdi"), "--state-dir", str(self.folder / prefix / "state"),
                 "--poll-interval", "0.5"),
                self.env, self.folder,
            )  # fmt: skip
            agent.start()
            self.agents.append(agent)
        for i in range(2):
            operator = Managed(
                f"operator-{i}",
                ("operator", "--metrics-port", "0", "--health-port", "0", "--leader-election-id", LEASE,
                 "--leader-election-namespace", "default", "--group-timeout", str(self.settings.group_timeout)),
                {**self.env, "POD_NAME": f"operator-{i}"}, self.folder,
            )  # fmt: skip
            operator.start()
            self.operators.append(operator)
        self._apply(
            {
                "apiVersion": API_VERSION,
                "kind": "DeviceClass",
                "metadata": {"name": CLASS},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
                "spec": {"spec": _claim_spec()},
            },
            *(
                {
                    "apiVersion": API_VERSION,
                    "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": _claim_spec(),
                }
                for name in SHARED_CLAIMS
            ),
        )
        self._apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": HIGH_PRIORITY_CLASS},
                "value": HIGH_PRIORITY,
            }
        )
        self._wait(self._slices_published, 120, "every simulated node's ResourceSlice")
        self._wait(lambda: self._leader() is not None, 120, "an operator to take the Lease")

    def _apply(self, *objects: Obj) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        self.plane.kubectl("apply", "--server-side", "-f", "-", input=body, timeout=120)

    def _start_webhook(self) -> None:
        certs = write_webhook_certificates(["127.0.0.1"], directory=self.folder / "tls")
        port = free_port()
        url = f"https://127.0.0.1:{port}"
        printed = subprocess.run(
            [sys.executable, "-m", "draco.cli", "webhook", "--print-configuration", "--url", url,
             "--ca-file", str(certs.ca_file)],
            capture_output=True, text=True, check=True, env=self.env,
        )  # fmt: skip
        self.webhook = Managed(
            "webhook",
            ("webhook", "--listen-address", "127.0.0.1", "--port", str(port), "--cert-file", str(certs.cert_file),
             "--key-file", str(certs.key_file), "--metrics-port", "0", "--health-port", "0",
             # The CRDs' conversion points at this webhook, as the chart points it at its Service.
             "--patch-crds", "--url", url, "--ca-file", str(certs.ca_file)),
            self.env, self.folder,
        )  # fmt: skip
        self.webhook.start()
        self.plane.kubectl("apply", "-f", "-", input=printed.stdout)
        probe = {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": "soak-webhook-probe"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
        }

        def answers() -> bool:
            out = self.plane.kubectl(
                "create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False
            )
            return "denied the request" in out.stderr

        self._wait(answers, 60, "kube-apiserver to get answers from draco webhook")

    def _slices_published(self) -> bool:
        try:
            slices = self.api.list(f"/apis/{API_VERSION}/resourceslices")
        except ApiDown:
            return False
        return {s["spec"].get("nodeName") for s in slices} >= set(self.nodes())

    def _leader(self) -> Managed | None:
        try:
            lease = self.api.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{LEASE}")
        except (ApiDown, ApiError):
            return None
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        for operator in self.operators:
            if operator.alive() and holder.startswith(f"{operator.name}_"):
                return operator
        return None

    def _wait(self, predicate: Callable[[], object], seconds: float, what: str) -> None:
        budget = scaled(seconds)
        deadline = time.monotonic() + budget
        interval = 0.2
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(interval)
            interval = min(interval * 1.5, 2.0)
        raise AssertionError(f"soak: timed out after {budget:.0f}s waiting for {what}")

    # ---- the three threads

    def run(self) -> None:
        self.started_at = time.monotonic()
        threads = [
            threading.Thread(target=self._guard(self._churn), name="soak-churn", daemon=True),
            threading.Thread(target=self._guard(self._faults), name="soak-faults", daemon=True),
            threading.Thread(target=self._guard(self._invariants), name="soak-invariants", daemon=True),
        ]
        for thread in threads:
            thread.start()
        end = self.started_at + self.settings.seconds
        next_report = time.monotonic() + 60
        # Short mode: the run lasts until every fault kind has happened once, too.
        while not self.stopping.is_set() and (
            time.monotonic() < end or (self.settings.every_fault_once and not self.faults_done.is_set())
        ):
            self.stopping.wait(min(5.0, max(0.5, end - time.monotonic())))
            if time.monotonic() >= next_report:
                next_report += 60
                self._say(f"progress at {time.monotonic() - self.started_at:.0f}s: {self._counts_line()}")
        self.stopping.set()
        for thread in threads:
            thread.join(scaled(180))
            if thread.is_alive():
                self._violate("harness", f"thread {thread.name} did not stop")

    def _guard(self, body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except Exception as exc:  # a crashed thread is a failed soak, with its reason
                self._violate("harness", f"{threading.current_thread().name} crashed: {exc!r}")
                self.stopping.set()

        return run

    def _say(self, line: str) -> None:
        print(f"[soak seed={self.settings.seed}] {line}", flush=True)

    def _violate(self, invariant: str, evidence: str) -> None:
        with self.lock:
            self.violations.append(Violation(invariant, evidence, time.monotonic() - self.started_at))
            self.counts["violations"] += 1
        self._say(f"VIOLATION {invariant}: {evidence}")

    # ---- churn

    def _churn(self) -> None:
        rng = random.Random(self.settings.seed)
        serial = 0
        actions = ("template", "template", "template", "shared", "shared", "extended", "extended",
                   "stale", "unmade", "group", "group", "delete", "delete", "delete", "delete-group",
                   "taint")  # fmt: skip
        while not self.stopping.is_set():
            self._supervise()
            try:
                pods = self.api.list(PODS)
                self._play_scheduler_and_kubelet(pods)
                self._retire_rules()
                action = rng.choice(actions)
                live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
                if action in ("template", "shared", "extended", "stale", "unmade"):
                    if len(live) < self.settings.max_pods:
                        serial += 1
                        self._create_pod(f"{action}-{serial}", action, rng)
                    elif len(live) < self.settings.max_pods + HIGH_EXTRA_PODS and not any(
                        p["metadata"]["name"].startswith("urgent-") and waits_for_draco(p) for p in live
                    ):
                        # The devices are likely full: a pod of high priority must preempt
                        # (one such pod waits at a time, so the churn stays a mix).
                        serial += 1
                        self._create_pod(f"urgent-{serial}", "urgent", rng, high=True)
                elif action == "group":
                    if len(live) + 3 <= self.settings.max_pods + 3:
                        serial += 1
                        self._create_group(f"group-{serial}", rng)
                elif action == "delete-group" and self.groups:
                    self._delete_group(rng.choice(sorted(self.groups)))
                elif action == "delete" and (live := [p for p in live if not _group(p)]):
                    # Mostly pods that run (bound), as users end them; now and then one in flight.
                    bound = [p for p in live if (p.get("spec") or {}).get("nodeName")]
                    victim = rng.choice(bound if bound and rng.random() < 0.75 else live)
                    self.api.delete(
                        f"{PODS}/{victim['metadata']['name']}", grace=0, uid=victim["metadata"]["uid"]
                    )
                    self.counts["pods deleted"] += 1
                elif action == "taint":
                    self._taint_a_device_in_use(rng)
            except ApiDown as exc:
                self.errors["churn: API down"] += 1
                del exc
            except ApiError as exc:
                # The webhook being down refuses claim writes and, in the opted-in namespace,
                # draco's pods (failurePolicy Fail): expected.
                self.errors[f"churn: HTTP {exc.status}"] += 1
            self.stopping.wait(rng.uniform(0.2, 1.0))

    def _create_pod(self, name: str, kind: str, rng: random.Random, *, high: bool = False) -> None:
        """One pod of ``kind``: a template claim; a shared claim; an extended resource; a
        template claim whose claim-statuses annotation is stale (names a claim that is gone
        or a user's claim: what a restored backup leaves; it must get a new claim and be
        served); a claim by a name nobody makes (it waits, and must say so); two devices
        of the extended resource (``urgent``, of high priority: it preempts)."""
        entries: list[Obj] = []
        annotations: dict[str, str] = {}
        container: Obj = {"name": "main", "image": "registry.invalid/none"}
        if kind in ("template", "stale"):
            entries = [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]
            if kind == "stale":
                recorded = rng.choice((f"{name}-gpu-gone", rng.choice(SHARED_CLAIMS)))
                annotations[CLAIM_STATUSES_ANNOTATION] = json.dumps({"gpu": recorded})
        elif kind == "shared":
            entries = [{"name": "gpu", "resourceClaimName": rng.choice(SHARED_CLAIMS)}]
        elif kind == "unmade":
            entries = [{"name": "gpu", "resourceClaimName": "nobody-makes-this-claim"}]
        else:
            # An urgent pod asks for two devices at once: the devices are seldom free in
            # pairs when the pod limit is reached, so it preempts.
            count = "2" if kind == "urgent" else "1"
            container["resources"] = {"requests": {EXTENDED: count}, "limits": {EXTENDED: count}}
        if entries:
            annotations[CLAIMS_ANNOTATION] = json.dumps(entries)
        high = high or rng.random() < HIGH_SHARE
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {"soak/kind": kind},
                "annotations": annotations,
            },
            # The pod webhook adds the gate too (the namespace opted in; while the webhook is
            # down such a pod is refused there, failurePolicy Fail).
            "spec": {
                "schedulingGates": [{"name": SCHEDULING_GATE}],
                "containers": [container],
                "terminationGracePeriodSeconds": 0,
                **({"priorityClassName": HIGH_PRIORITY_CLASS} if high else {}),
            },
        }
        created = self.api.create(PODS, pod)
        with self.lock:
            self.created.add(created["metadata"]["uid"])
            self.priorities[created["metadata"]["uid"]] = int(created["spec"].get("priority") or 0)
        self.counts[f"pods created ({kind})"] += 1
        self.counts["high-priority pods created"] += high

    def _create_group(self, name: str, rng: random.Random) -> None:
        """A PodGroup of 2 or 3 members placed all or nothing, now and then with a claim of
        the group that every member shares (KEP-5729), else one claim per member."""
        size = rng.choice((2, 3))
        shared = rng.random() < 0.3
        entries = [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]
        spec: Obj = {"schedulingPolicy": {"gang": {"minCount": size}}}
        if shared:
            spec["resourceClaims"] = entries
        group = {
            "apiVersion": SCHEDULING_API_VERSION,
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.api.create(GROUPS, group)
        with self.lock:
            self.groups[name] = (size, set())
        for i in range(size):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": NAMESPACE,
                    "labels": {"soak/kind": "group", POD_GROUP_LABEL: name},
                    "annotations": {CLAIMS_ANNOTATION: json.dumps(entries)},
                },
                "spec": {
                    "schedulingGates": [{"name": SCHEDULING_GATE}],
                    "containers": [{"name": "main", "image": "registry.invalid/none"}],
                    "terminationGracePeriodSeconds": 0,
                },
            }
            created = self.api.create(PODS, pod)
            with self.lock:
                self.created.add(created["metadata"]["uid"])
        self.counts["groups created"] += 1
        self.counts["groups created with a claim of the group"] += shared
        self.counts["pods created (group)"] += size

    def _delete_group(self, name: str) -> None:
        """The whole group ends: its pods and its PodGroup (whose claims go with it)."""
        for pod in self.api.list(PODS, labelSelector=f"{POD_GROUP_LABEL}={name}"):
            self.api.delete(f"{PODS}/{pod['metadata']['name']}", grace=0, uid=pod["metadata"]["uid"])
        self.api.delete(f"{GROUPS}/{name}")
        with self.lock:
            self.groups.pop(name, None)
        self.counts["groups deleted"] += 1

    def _play_scheduler_and_kubelet(self, pods: list[Obj]) -> None:
        """Bind un-gated pods to the node draco pinned them to (kube-scheduler's part) and
        finish deleting bound pods (kubelet's part)."""
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            gated = any(g.get("name") == SCHEDULING_GATE for g in spec.get("schedulingGates") or [])
            if meta.get("deletionTimestamp"):
                if spec.get("nodeName"):
                    self.api.delete(f"{PODS}/{meta['name']}", grace=0, uid=meta["uid"])
                continue
            if gated:
                continue
            with self.lock:
                if meta["uid"] in self.created:
                    self.served.add(meta["uid"])
            if spec.get("nodeName"):
                continue
            node = pinned_node(pod)
            if node is None:
                continue
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta["name"], "uid": meta["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            try:
                self.api.create(f"{PODS}/{meta['name']}/binding", binding)
                self.counts["pods bound"] += 1
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise

    def _taint_a_device_in_use(self, rng: random.Random) -> None:
        if self.api.list(RULES):
            return
        in_use = [
            r
            for c in self.api.list(CLAIMS)
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
            or []
            if c.get("status", {}).get("reservedFor")
        ]
        if not in_use:
            return
        result = rng.choice(in_use)
        self.counts["taint rules"] += 1
        rule = {
            "apiVersion": API_VERSION,
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"evict-{self.counts['taint rules']}"},
            "spec": {
                "deviceSelector": {
                    "driver": result["driver"],
                    "pool": result["pool"],
                    "device": result["device"],
                },
                "taint": {"key": "soak.draco.dev/maintenance", "value": "soak", "effect": "NoExecute"},
            },
        }
        self.api.create(RULES, rule)

    def _retire_rules(self) -> None:
        """A rule lives about 15 s: long enough to evict, short enough to free its device."""
        now = time.time()
        for rule in self.api.list(RULES):
            created = _timestamp(rule["metadata"].get("creationTimestamp"))
            if created is not None and now - created > 15:
                self.api.delete(f"{RULES}/{rule['metadata']['name']}")

    # ---- faults

    def _faults(self) -> None:
        rng = random.Random(self.settings.seed + 1)
        plan = list(FAULTS)
        rng.shuffle(plan)
        try:
            while not self.stopping.is_set():
                if self.stopping.wait(rng.uniform(*self.settings.fault_gap)):
                    return
                if self.settings.every_fault_once:
                    if not plan:
                        return
                    kind = plan.pop()
                    if not self._inject(kind, rng):
                        plan.append(kind)  # no leader known at this moment: again later
                else:
                    self._inject(rng.choice(FAULTS), rng)
        finally:
            self.faults_done.set()

    def _inject(self, kind: str, rng: random.Random) -> bool:
        """Inject one fault of `kind`; False when it could not be (no leader known)."""
        outage = rng.uniform(1.0, 5.0)
        if kind in ("kill-leader", "kill-standby"):
            leader = self._leader()
            if leader is None:
                self.counts[f"{kind} postponed (no leader known)"] += 1
                return False
            victim = leader if kind == "kill-leader" else next(o for o in self.operators if o is not leader)
            self._kill_and_restart(kind, victim, outage)
        elif kind == "kill-webhook":
            assert self.webhook is not None
            self._kill_and_restart(kind, self.webhook, outage)
        elif kind == "kill-agent":
            self._kill_and_restart(kind, rng.choice(self.agents), outage)
        elif kind == "restart-apiserver":
            self._say("fault: restart kube-apiserver")
            self.plane.restart_apiserver()
            self.counts[kind] += 1
        elif kind == "pause-etcd":
            etcd = self.plane.child("etcd").popen
            pause = rng.uniform(2.0, 6.0)
            self._say(f"fault: pause etcd for {pause:.1f}s")
            etcd.send_signal(signal.SIGSTOP)
            try:
                time.sleep(pause)  # the pause itself: what the others must cope with
            finally:
                etcd.send_signal(signal.SIGCONT)
            self.counts[kind] += 1
        return True

    def _kill_and_restart(self, kind: str, victim: Managed, outage: float) -> None:
        self._say(f"fault: {kind} ({victim.name}), down {outage:.1f}s")
        with victim.lock:
            victim.held = True
            victim.kill()
        self.counts[kind] += 1
        time.sleep(outage)  # the outage itself: what the others must cope with
        with victim.lock:
            victim.start()
            victim.held = False

    def managed(self) -> list[Managed]:
        return [*self.operators, *self.agents, *([self.webhook] if self.webhook else [])]

    def _supervise(self) -> None:
        """Start again a process that exited by itself, as kubelet restarts a container (an
        operator exits when it loses its Lease, e.g. when kube-apiserver is gone longer than
        the renew deadline, as client-go's leader election does); at most every 2 s."""
        for managed in self.managed():
            with managed.lock:
                if managed.held or managed.alive() or time.monotonic() - managed.started_at < 2.0:
                    continue
                code = managed.process.popen.returncode if managed.process else None
                self._say(f"{managed.name} exited by itself (code {code}); started again, as kubelet would")
                self.counts[f"exited by itself: {managed.name.rsplit('-', 1)[0]}"] += 1
                managed.start()

    # ---- invariants

    def _invariants(self) -> None:
        while not self.stopping.is_set():
            self.check()
            self.stopping.wait(2.0)

    def check(self, *, final: bool = False) -> None:
        """One round of every invariant. A broken promise that can be work in flight is a
        suspect first, and a violation once it has lasted `grace` (`final`: at once)."""
        try:
            pods = self.api.list(PODS)
            claims = self.api.list(CLAIMS)
        except ApiDown:
            self.counts["invariant rounds skipped (API down)"] += 1
            return
        now = time.monotonic()
        seen: dict[tuple[str, ...], str] = {}
        self._no_device_twice(claims)
        self._claims_have_consumers(claims, pods, seen)
        self._pods_served_or_told(pods, seen)
        self._prepared_matches_allocated(claims, seen)
        self._preempted_only_for_higher_priority()
        partial = self._groups_whole(pods, claims, seen)
        overdue = []
        with self.lock:
            for key in list(self.suspects):
                if key not in seen:
                    del self.suspects[key]
                    self.reported.discard(key)
            for key, evidence in seen.items():
                first = self.suspects.setdefault(key, now)
                # A group partly un-gated may be seen between the pins of its members (written
                # at once, after every member's devices): it must not last.
                grace = partial if key[0] == "group partly un-gated" else self.settings.grace
                if key[0] == "device held by a waiting group":
                    grace = self.settings.group_timeout + self.settings.grace
                if (final or now - first > grace) and key not in self.reported:
                    self.reported.add(key)
                    overdue.append((key[0], f"{evidence} (for {now - first:.0f}s)"))
        for invariant, evidence in overdue:
            self._violate(invariant, evidence)
        self.counts["invariant rounds"] += 1

    def _preempted_only_for_higher_priority(self) -> None:
        """Every `Preempted` Event names a preemptor of higher priority than its victim."""
        try:
            events = self.api.list(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
        except ApiDown:
            return
        self.counts["checks: preempted only for higher priority"] += 1
        preempted = 0
        for event in events:
            if event.get("reason") != "Preempted":
                continue
            preempted += 1
            victim = str((event.get("regarding") or {}).get("uid") or "")
            note = str(event.get("note") or "")
            preemptor = note.removeprefix("Preempted by pod ").split(" ", 1)[0]
            with self.lock:
                ours, theirs = self.priorities.get(victim, 0), self.priorities.get(preemptor, 0)
            key = ("preempted for a pod of equal or lower priority", victim)
            if theirs <= ours and key not in self.reported:
                self.reported.add(key)
                self._violate(
                    "preempted for a pod of equal or lower priority",
                    f"pod {victim} (priority {ours}) preempted by {preemptor} (priority {theirs}): {note}",
                )
        self.counts["pods preempted"] = max(self.counts["pods preempted"], preempted)

    def _no_device_twice(self, claims: list[Obj]) -> None:
        holders: dict[tuple[str, str, str], list[str]] = {}
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                if result.get("adminAccess") or result.get("shareID"):
                    continue  # the allocator may give such a device to several claims
                key = (result["driver"], result["pool"], result["device"])
                holders.setdefault(key, []).append(_name(claim))
        self.counts["checks: device in one claim"] += 1
        for device, names in holders.items():
            if len(names) > 1:
                self._violate("device in two claims", f"device {'/'.join(device)} allocated to {names}")

    def _claims_have_consumers(
        self, claims: list[Obj], pods: list[Obj], seen: dict[tuple[str, ...], str]
    ) -> None:
        live = {
            p["metadata"]["uid"]
            for p in pods
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        }
        self.counts["checks: allocated claim has a consumer"] += 1
        for claim in claims:
            status = claim.get("status") or {}
            if not status.get("allocation"):
                continue
            reserved = [r for r in status.get("reservedFor") or [] if r.get("resource") == "pods"]
            others = [r for r in status.get("reservedFor") or [] if r.get("resource") != "pods"]
            if others or any(r.get("uid") in live for r in reserved):
                continue
            seen[("allocated claim without a live consumer", claim["metadata"]["uid"])] = (
                f"claim {_name(claim)} (uid {claim['metadata']['uid']}) allocated on {_devices(claim)}, "
                f"reservedFor {[r.get('name') for r in reserved]} names no live pod"
            )

    def _groups_whole(self, pods: list[Obj], claims: list[Obj], seen: dict[tuple[str, ...], str]) -> float:
        """No group partly un-gated (a member gated while another was ever un-gated), and
        no device held by the members of a group that waits (none of them un-gated) for
        longer than the group timeout. Returns how long a partial un-gating may be seen."""
        self.counts["checks: group whole or waiting whole"] += 1
        members: dict[str, list[Obj]] = {}
        for pod in pods:
            if (name := _group(pod)) is not None:
                members.setdefault(name, []).append(pod)
        with self.lock:
            groups = dict(self.groups)
        for name, (size, served) in groups.items():
            pods_of = members.get(name, [])
            gated = []
            for pod in pods_of:
                gates = (pod.get("spec") or {}).get("schedulingGates") or []
                if any(g.get("name") == SCHEDULING_GATE for g in gates):
                    gated.append(pod["metadata"]["name"])
                else:
                    served.add(pod["metadata"]["uid"])
            # Judged on the members that exist: one un-gated and evicted (deleted) between
            # two rounds was never seen un-gated, and is not gated either.
            if served and gated:
                seen[("group partly un-gated", name)] = (
                    f"group {name}: {len(served)} of its {size} pods un-gated, {', '.join(sorted(gated))} still gated"
                )
            if served:
                continue
            uids = {p["metadata"]["uid"] for p in pods_of}
            for claim in claims:
                status = claim.get("status") or {}
                reserved = {r.get("uid") for r in status.get("reservedFor") or []}
                group_claim = any(
                    r.get("resource") == "podgroups" and r.get("name") == name
                    for r in status.get("reservedFor") or []
                )
                if status.get("allocation") and (reserved & uids or group_claim):
                    seen[("device held by a waiting group", name, claim["metadata"]["uid"])] = (
                        f"group {name} waits (no member un-gated) while claim {_name(claim)} holds {_devices(claim)}"
                    )
        # A partial state between the pins of one commit lasts milliseconds; one left by an
        # operator that died among its pins is finished by the next leader (a failover).
        return self.settings.grace

    def _pods_served_or_told(self, pods: list[Obj], seen: dict[tuple[str, ...], str]) -> None:
        """Every pod draco is to place makes progress or carries a current Event saying why
        (`tests.e2e.progress`): one that waits, unchanged for half the grace, with no such
        Event since its last change is a suspect (then a violation once it lasts)."""
        self.counts["checks: pod served or told why"] += 1
        for pod in pods:
            if not waits_for_draco(pod):
                with self.lock:
                    if pod["metadata"]["uid"] in self.created:
                        self.served.add(pod["metadata"]["uid"])
        try:
            events = self.api.list(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
        except ApiDown:
            return
        broken = unexplained_waits(pods, events, now=time.time(), grace=self.settings.grace / 2)
        for uid, evidence in broken.items():
            seen[("pod neither served nor told why", uid)] = evidence

    def _prepared_matches_allocated(self, claims: list[Obj], seen: dict[tuple[str, ...], str]) -> None:
        self.counts["checks: prepared set = allocated set"] += 1
        allocated: dict[str, set[str]] = {node: set() for node in self.nodes()}
        names: dict[str, str] = {}
        for claim in claims:
            names[claim["metadata"]["uid"]] = _name(claim)
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                if result.get("driver") == DRIVER and result.get("pool") in allocated:
                    allocated[result["pool"]].add(claim["metadata"]["uid"])
        for node, wanted in allocated.items():
            prepared = self.prepared(node)
            for uid in wanted ^ prepared:
                where = (
                    "allocated there but not prepared"
                    if uid in wanted
                    else "prepared but not allocated there"
                )
                seen[("prepared set differs from allocated set", node, uid)] = (
                    f"node {node}: claim {names.get(uid, uid)} (uid {uid}) is {where}"
                )

    def prepared(self, node: str) -> set[str]:
        """The claims the node's agent has prepared (its checkpoint's completed records)."""
        prefix = node.rsplit("-", 1)[0]
        folder = self.folder / prefix / "state" / node / "checkpoint"
        done = set()
        for path in folder.glob("*.json"):
            try:
                record = ClaimRecord.from_json(json.loads(path.read_text())["claim"])
            except (OSError, ValueError, KeyError):
                continue  # removed while read: the next round sees it
            if record.state == PREPARE_COMPLETED:
                done.add(record.uid)
        return done

    # ---- the end

    def drain(self) -> None:
        """Every process up again, every pod deleted: every claim must then be released,
        every generated claim deleted and every prepared claim unprepared."""
        self._supervise()
        for name in [r["metadata"]["name"] for r in self._retry(lambda: self.api.list(RULES))]:
            self._retry(partial(self.api.delete, f"{RULES}/{name}"))
        for name in [g["metadata"]["name"] for g in self._retry(lambda: self.api.list(GROUPS))]:
            self._retry(partial(self.api.delete, f"{GROUPS}/{name}"))

        def empty() -> bool:
            self._supervise()
            try:
                pods = self.api.list(PODS)
                for pod in pods:
                    self.api.delete(f"{PODS}/{pod['metadata']['name']}", grace=0)
                claims = self.api.list(CLAIMS)
            except ApiDown:
                return False
            busy = [
                c
                for c in claims
                if (c.get("status") or {}).get("allocation") or c["metadata"]["name"] not in SHARED_CLAIMS
            ]
            return not pods and not busy and not any(self.prepared(n) for n in self.nodes())

        try:
            self._wait(empty, 180, "every pod gone, every claim released and unprepared")
        except AssertionError as exc:
            claims = self._retry(lambda: self.api.list(CLAIMS))
            left = [
                f"{_name(c)} allocation={bool((c.get('status') or {}).get('allocation'))}" for c in claims
            ]
            prepared = {n: sorted(self.prepared(n)) for n in self.nodes()}
            self._violate("drain", f"{exc}; claims left: {left}; prepared: {prepared}")
        self.check(final=True)
        with contextlib.suppress(ApiDown):
            events = self.api.list(f"/api/v1/namespaces/{NAMESPACE}/events")
            pods_by_reason: dict[str, set[str]] = {}
            for event in events:
                uid = str((event.get("involvedObject") or {}).get("uid"))
                pods_by_reason.setdefault(str(event.get("reason")), set()).add(uid)
            self.counts["pods evicted"] = len(pods_by_reason.get("DeviceTaintManagerEviction", ()))
            self.counts["pods told FailedScheduling"] = len(pods_by_reason.get("FailedScheduling", ()))

    def _retry(self, call: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + scaled(60)
        while True:
            try:
                return call()
            except ApiDown:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def stop(self) -> None:
        for managed in self.managed():
            managed.stop()
        with contextlib.suppress(Exception):
            os.kill(self.plane.child("etcd").popen.pid, signal.SIGCONT)

    def leaked(self) -> list[str]:
        """Processes of this run still alive after `stop()` and the control plane's stop:
        any process whose environment carries this run's marker, and the draco processes
        the run started."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().split(") ", 1)[1][:1]
            except (OSError, IndexError):
                continue
            if state == "Z":
                continue
            if f"DRACO_SOAK_RUN={self.marker}".encode() in environ or (
                self.plane.workdir is not None and str(self.plane.workdir) in cmdline
            ):
                found.append(f"pid {entry.name}: {cmdline[:200]}")
        return found

    def injected_prepare_failures(self) -> int:
        return sum(path.read_text(errors="replace").count('"Injected prepare failure"')
                   for agent in self.agents for path in agent.logs())  # fmt: skip

    def _counts_line(self) -> str:
        with self.lock:
            served, created = len(self.served), len(self.created)
        kills = ", ".join(f"{k}={self.counts[k]}" for k in FAULTS)
        return (
            f"{kills}; pods created={created} served={served}; "
            f"invariant rounds={self.counts['invariant rounds']}; violations={len(self.violations)}"
        )

    def summary(self, load: str) -> str:
        with self.lock:
            served, created = len(self.served), len(self.created)
        lines = [
            f"soak: {self.settings.seconds:.0f}s asked, {time.monotonic() - self.started_at:.0f}s run, seed {self.settings.seed} (DRACO_SOAK_SEED={self.settings.seed} replays "
            "the churn and the faults' order), load average at the end: " + load,
            "faults: "
            + ", ".join(f"{k} {self.counts[k]}" for k in FAULTS)
            + "".join(f", {k} {v}" for k, v in sorted(self.counts.items()) if "postponed" in k),
            "processes that exited by themselves (started again): "
            + (
                ", ".join(
                    f"{k.split(': ')[1]} {v}"
                    for k, v in sorted(self.counts.items())
                    if k.startswith("exited by itself")
                )
                or "none"
            ),
            f"  kills per kind: operator leader {self.counts['kill-leader']}, operator standby "
            f"{self.counts['kill-standby']}, webhook {self.counts['kill-webhook']}, agent {self.counts['kill-agent']}; "
            f"kube-apiserver restarts {self.counts['restart-apiserver']}; etcd pauses {self.counts['pause-etcd']}; "
            f"injected prepare failures {self.injected_prepare_failures()}",
            f"pods: created {created} ("
            + ", ".join(
                f"{k} {self.counts[f'pods created ({k})']}"
                for k in ("template", "shared", "extended", "stale", "unmade", "urgent")
            )
            + f", group {self.counts['pods created (group)']}), served {served}, bound {self.counts['pods bound']}, "
            f"deleted by churn {self.counts['pods deleted']}, groups created {self.counts['groups created']} "
            f"({self.counts['groups created with a claim of the group']} with a claim of the group), "
            f"deleted {self.counts['groups deleted']}, "
            f"taint rules {self.counts['taint rules']}, pods evicted by them {self.counts['pods evicted']}, "
            f"pods told FailedScheduling {self.counts['pods told FailedScheduling']}, "
            f"of high priority {self.counts['high-priority pods created']}, "
            f"preempted {self.counts['pods preempted']}",
            "invariant checks: "
            + ", ".join(
                f"{k.removeprefix('checks: ')} {v}"
                for k, v in sorted(self.counts.items())
                if k.startswith("checks: ")
            )
            + f"; rounds {self.counts['invariant rounds']}, skipped (API down) "
            f"{self.counts['invariant rounds skipped (API down)']}",
            f"churn errors (expected while faults last): {dict(self.errors)}",
            f"violations: {len(self.violations)}",
            *(f"  at {v.at:.0f}s {v.invariant}: {v.evidence}" for v in self.violations),
        ]
        return "\n".join(lines)


def _group(pod: Obj) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(POD_GROUP_LABEL)


def _claim_spec() -> Obj:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 1}}]}}


def _name(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _devices(claim: Obj) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [f"{r['pool']}/{r['device']}" for r in (allocation.get("devices") or {}).get("results") or []]


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
