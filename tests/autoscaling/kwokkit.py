"""The real Karpenter beside the test control plane, with its in-tree kwok cloud provider.

Karpenter (`hack/karpenter.sh`: ``sigs.k8s.io/karpenter`` built from the Go module proxy,
cached) makes a Node object for each NodeClaim it launches, from an instance-type file; no
kubelet runs. What a kubelet and a kwok controller would do for such a node, the stage here
does, and nothing more: it marks the new node Ready, and starts draco's node agent on it
(``draco agent --driver fake``) with the device file of its instance type, so the node
publishes its devices when it appears, as a GPU node's agent does when it boots. A pod bound
to such a node is marked Running once every claim it names is reserved for it and the
agent has prepared each of its devices there (their ``Ready`` entries in the claim's
``status.devices``): what a kubelet would wait for before starting the containers, so a
pod's time to Running includes the new node's agent. When the node goes, so does its agent. A kube-controller-manager that runs only the garbage
collector removes what the node owned (its ResourceSlices), as in any cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draco.api.constants import CLAIMS_ANNOTATION
from draco.tools.dev.controlplane import ChildProcess, ControlPlane, free_port
from tests.e2e.support import DracoProcess, start_draco

Obj = dict[str, Any]

#: A kwok node's label, and the instance-type label Karpenter puts on it.
KWOK_LABEL = "kwok.x-k8s.io/node"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"


def karpenter_binary() -> Path | None:
    value = os.environ.get("KARPENTER", "")
    return Path(value) if value and os.access(value, os.X_OK) else None


def karpenter_crds() -> Path:
    value = os.environ.get("KARPENTER_CRDS", "")
    if value:
        return Path(value)
    binary = karpenter_binary()
    assert binary is not None
    return binary.parent.parent / "crds"


def instance_type(name: str, *, cpu: str, memory: str, price: float, resources: Mapping[str, str]) -> Obj:
    """One entry of Karpenter's kwok instance-type file."""
    return {
        "name": name,
        "offerings": [
            {"capacityType": "on-demand", "zone": "test-zone-a", "price": price, "available": True}
        ],
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": cpu, "memory": memory, "pods": "110", **resources},
    }


#: What Karpenter's provisioner logs once per scheduling decision that launches nodes.
PROVISIONING_ROUND = "computed new nodeclaim(s) to fit pod(s)"


def log_size(process: ChildProcess) -> int:
    """Where ``process``'s log ends now (what later lines are read from)."""
    try:
        return process.log_path.stat().st_size
    except OSError:
        return 0


def provisioning_rounds(karpenter: ChildProcess, *, since: int) -> list[tuple[int, int]]:
    """(NodeClaims, pods) of each scheduling decision Karpenter logged after byte ``since``
    of its log (JSON lines), in order."""
    with karpenter.log_path.open("rb") as log:
        log.seek(since)
        lines = log.read().decode(errors="replace").splitlines()
    rounds = []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("message") == PROVISIONING_ROUND:
            rounds.append((int(entry.get("nodeclaims", 0)), int(entry.get("pods", 0))))
    return rounds


def start_garbage_collector(kube: ControlPlane, workdir: Path) -> ChildProcess:
    """kube-controller-manager with only the garbage collector (owner references)."""
    binary = kube.binaries / "kube-controller-manager"
    port = free_port()
    log_path = workdir / "kube-controller-manager.log"
    with log_path.open("wb") as out:
        popen = subprocess.Popen(
            [
                str(binary),
                f"--kubeconfig={kube.kubeconfig}",
                f"--authentication-kubeconfig={kube.kubeconfig}",
                f"--authorization-kubeconfig={kube.kubeconfig}",
                "--controllers=garbagecollector",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return ChildProcess("kube-controller-manager", popen, log_path)


def start_karpenter(kube: ControlPlane, workdir: Path, instance_types: list[Obj]) -> ChildProcess:
    binary = karpenter_binary()
    assert binary is not None
    types_path = workdir / "instance-types.json"
    types_path.write_text(json.dumps(instance_types))
    env = {
        **kube.env(),
        "INSTANCE_TYPES_FILE_PATH": str(types_path),
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(free_port()),
        "HEALTH_PROBE_PORT": str(free_port()),
        "SYSTEM_NAMESPACE": "default",
        "LOG_LEVEL": "debug",
        "BATCH_IDLE_DURATION": "1s",
        "BATCH_MAX_DURATION": "5s",
    }
    log_path = workdir / "karpenter.log"
    with log_path.open("wb") as out:
        popen = subprocess.Popen(
            [str(binary)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    return ChildProcess("karpenter", popen, log_path)


@dataclass
class NodeStage:
    """What kubelet and kwok do for a new kwok node: Ready, draco's agent on it, and its pods
    Running once their devices are prepared."""

    kube: ControlPlane
    workdir: Path
    #: Instance type -> the fake device file its nodes' agent reads (none: no agent).
    device_files: Mapping[str, Path]
    agents: dict[str, DracoProcess] = field(default_factory=dict)
    #: Node -> when it was first seen (time.monotonic()).
    seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> NodeStage:
        self._thread = threading.Thread(target=self._loop, name="node-stage", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for process in self.agents.values():
            process.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(subprocess.SubprocessError, json.JSONDecodeError, OSError):
                self._step()
            self._stop.wait(0.5)

    def _step(self) -> None:
        result = self.kube.kubectl("get", "nodes", "-l", KWOK_LABEL, "-o", "json", check=False)
        if result.returncode != 0:
            return
        nodes = {n["metadata"]["name"]: n for n in json.loads(result.stdout)["items"]}
        for name, node in nodes.items():
            self.seen.setdefault(name, time.monotonic())
            if not _ready(node):
                self._make_ready(name)
            self._untaint(node)
            kind = (node["metadata"].get("labels") or {}).get(INSTANCE_TYPE_LABEL, "")
            if name not in self.agents and kind in self.device_files:
                self.agents[name] = self._agent(name, self.device_files[kind])
        for name in [n for n in self.agents if n not in nodes]:
            self.agents.pop(name).stop()
        if nodes:
            self._run_pods(set(nodes))

    def _run_pods(self, nodes: set[str]) -> None:
        result = self.kube.kubectl("get", "pods", "-A", "-o", "json", check=False)
        if result.returncode != 0:
            return
        waiting = [
            p
            for p in json.loads(result.stdout)["items"]
            if p["spec"].get("nodeName") in nodes
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase", "Pending") == "Pending"
        ]
        if not waiting:
            return
        result = self.kube.kubectl(
            "get", "resourceclaims.resource.draco.dev", "-A", "-o", "json", check=False
        )
        if result.returncode != 0:
            return
        claims = json.loads(result.stdout)["items"]
        for pod in waiting:
            if _devices_prepared(pod, claims):
                self._mark_running(pod)

    def _mark_running(self, pod: Obj) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        ]
        containers = [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in pod["spec"]["containers"]
        ]
        status = {
            "phase": "Running",
            "startTime": now,
            "conditions": conditions,
            "containerStatuses": containers,
        }
        meta = pod["metadata"]
        self.kube.kubectl(
            "patch",
            "pod",
            meta["name"],
            "-n",
            meta["namespace"],
            "--subresource=status",
            "--type=strategic",
            "-p",
            json.dumps({"status": status}),
            check=False,
        )

    def _make_ready(self, name: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "the test's node stage stands in for the kubelet",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        patch = json.dumps({"status": {"conditions": [condition], "phase": "Running"}})
        self.kube.kubectl(
            "patch", "node", name, "--subresource=status", "--type=strategic", "-p", patch, check=False
        )

    def _untaint(self, node: Obj) -> None:
        """Drop the ``not-ready`` taint admission put on the new Node, as the node lifecycle
        controller does once the node is Ready (precondition: the version read)."""
        taints = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if not str(t.get("key", "")).startswith("node.kubernetes.io/not-ready")]
        if len(kept) == len(taints):
            return
        patch = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": kept or None},
        }
        self.kube.kubectl(
            "patch", "node", node["metadata"]["name"], "--type=merge", "-p", json.dumps(patch), check=False
        )

    def _agent(self, node: str, devices: Path) -> DracoProcess:
        folder = self.workdir / "agents" / node
        folder.mkdir(parents=True, exist_ok=True)
        return start_draco(
            (
                "agent",
                "--node-name",
                node,
                "--driver",
                "fake",
                "--config",
                str(devices),
                "--cdi-dir",
                str(folder / "cdi"),
                "--state-dir",
                str(folder / "state"),
            ),
            env=self.kube.env(),
            log_path=folder / "agent.log",
        )


def _devices_prepared(pod: Obj, claims: list[Obj]) -> bool:
    """Every claim ``pod`` names is reserved for it, and each device allocated to those claims
    has its ``Ready`` entry True in the claim's ``status.devices`` (the agent prepared it)."""
    named = json.loads((pod["metadata"].get("annotations") or {}).get(CLAIMS_ANNOTATION) or "[]")
    uid = pod["metadata"]["uid"]
    mine = [
        c
        for c in claims
        if any(r.get("uid") == uid for r in (c.get("status") or {}).get("reservedFor") or [])
    ]
    if len(mine) < len(named):
        return False
    for claim in mine:
        status = claim.get("status") or {}
        ready = {
            (e.get("driver"), e.get("pool"), e.get("device"))
            for e in status.get("devices") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in e.get("conditions") or [])
        }
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        if any((r["driver"], r["pool"], r["device"]) not in ready for r in results):
            return False
    return True


def _ready(node: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
