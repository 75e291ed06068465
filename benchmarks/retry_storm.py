"""The retry storm: a claim whose preparation keeps failing, beside pods that cannot fit.

Run: ``KUBEBUILDER_ASSETS=$(hack/controlplane.sh) .venv/bin/python benchmarks/retry_storm.py
[--duration 180] [--waiting 10]``.

It starts the tests' control plane, a real ``draco agent`` on one node (``--create-nodes``)
with fake devices of two drivers (``gpu``: two devices with binding conditions; ``nic``:
one device), and ``draco operator`` (namespace ``storm``, its metrics on a port). Then:

- pod ``refused`` uses claim ``refused`` whose opaque config the gpu driver refuses: every
  preparation fails, the binding failure condition turns True, the operator clears the
  allocation and tries again;
- ``--waiting`` pods each ask for two nic devices (one exists): they can never fit.

For ``--duration`` seconds it samples, every ``--every`` seconds: how many times the
refused claim was allocated and cleared again (the operator's ``BindingConditionsFailed``
Event count: every allocation of it ends so) and how many preparations the agent reported
failed (its ``FailedPrepareDynamicResources`` count), the waiting pods' ``FailedScheduling``
counts (each failed attempt writes one), the operator's ``draco_allocation_attempts`` by
result, and the operator's log lines (all, and the "Capacity changed during the attempt"
kind). Printed: per-minute rates over the run, attempts per waiting pod, Event objects per
pod and reason (aggregated Events: one object whose count grows), and the machine load
beside them. The processes run the code of the repository the script sits in
(``PYTHONPATH``), so a copy of the script in a checkout of another commit measures that
commit with the same method.
"""

from __future__ import annotations

import sys

if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    del sys.path[0]

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from draco.api.constants import API_VERSION, CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.controlplane import ControlPlane, find_binaries, free_port

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "storm"
NODE = "storm-node"
CLAIMS = "resourceclaims.resource.draco.dev"

DEVICES = """
drivers:
- name: gpu.storm.draco.dev
  cdiClass: gpu
  bindingConditions: true
  devices:
  - name: gpu-{index}
    count: 2
- name: nic.storm.draco.dev
  cdiClass: nic
  devices:
  - name: nic-0
"""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cpus)"


def objects(waiting: int) -> list[dict[str, Any]]:
    def device_class(kind: str) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": kind},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{kind}.storm.draco.dev"'}}]},
        }

    def pod(name: str, claim: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "annotations": {CLAIMS_ANNOTATION: json.dumps([claim])},
            },
            "spec": {
                "schedulingGates": [{"name": SCHEDULING_GATE}],
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "containers": [{"name": "main", "image": "registry.invalid/none"}],
            },
        }

    refused = {
        "opaque": {
            "driver": "gpu.storm.draco.dev",
            "parameters": {"apiVersion": "fake.draco.dev/v1alpha1", "kind": "NoSuchConfig"},
        }
    }
    items: list[dict[str, Any]] = [
        device_class("gpu"),
        device_class("nic"),
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaim",
            "metadata": {"name": "refused", "namespace": NAMESPACE},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}],
                    "config": [refused],
                }
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two-nics", "namespace": NAMESPACE},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "nic", "exactly": {"deviceClassName": "nic", "count": 2}}]
                    }
                }
            },
        },
        pod("refused", {"name": "gpu", "resourceClaimName": "refused"}),
    ]
    items += [
        pod(f"waiting-{i}", {"name": "nic", "resourceClaimTemplateName": "two-nics"}) for i in range(waiting)
    ]
    return items


def event_counts(plane: ControlPlane) -> dict[tuple[str, str], list[int]]:
    """(object name, reason) -> the counts of its Event objects."""
    out = plane.kubectl("get", "events.v1.events.k8s.io", "-n", NAMESPACE, "-o", "json", timeout=120)
    found: dict[tuple[str, str], list[int]] = {}
    for event in json.loads(out.stdout)["items"]:
        count = int((event.get("series") or {}).get("count") or event.get("deprecatedCount") or 1)
        key = (str((event.get("regarding") or {}).get("name")), str(event.get("reason")))
        found.setdefault(key, []).append(count)
    return found


def attempts_by_result(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    found: dict[str, float] = {}
    for match in re.finditer(r'^draco_allocation_attempts_total\{result="([^"]+)"\} (\S+)$', text, re.M):
        found[match.group(1)] = float(match.group(2))
    return found


def draco(plane: ControlPlane, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**plane.env(), "PYTHONPATH": str(ROOT / "operator")}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "draco.cli", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )


def sample(plane: ControlPlane, log: Path, port: int, waiting: int) -> dict[str, Any]:
    events = event_counts(plane)
    text = log.read_text(errors="replace")
    return {
        "at": time.monotonic(),
        "prepare_failures": sum(events.get(("refused", "FailedPrepareDynamicResources"), [])),
        "binding_failures": sum(events.get(("refused", "BindingConditionsFailed"), [])),
        "failed_scheduling": [
            sum(events.get((f"waiting-{i}", "FailedScheduling"), [])) for i in range(waiting)
        ],
        "event_objects": {f"{name}/{reason}": len(counts) for (name, reason), counts in events.items()},
        "attempts": attempts_by_result(port),
        "log_lines": text.count("\n"),
        "trying_again": text.count("Capacity changed during the attempt"),
        "load": load(),
    }


def run(plane: ControlPlane, args: argparse.Namespace, folder: Path) -> None:
    config = folder / "devices.yaml"
    config.write_text(DEVICES)
    plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    plane.kubectl("create", "namespace", NAMESPACE)
    agent_log, operator_log = folder / "agent.log", folder / "operator.log"
    agent = draco(
        plane,
        agent_log,
        "agent",
        "--node-name",
        NODE,
        "--driver",
        "fake",
        "--config",
        str(config),
        "--cdi-dir",
        str(folder / "cdi"),
        "--state-dir",
        str(folder / "state"),
        "--poll-interval",
        "0.2",
        "--create-nodes",
    )
    port = free_port()
    operator = draco(
        plane,
        operator_log,
        "operator",
        "--namespace",
        NAMESPACE,
        "--metrics-port",
        str(port),
        "--health-port",
        "0",
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            out = plane.kubectl("get", "resourceslices.resource.draco.dev", "-o", "json").stdout
            if len({s["spec"]["driver"] for s in json.loads(out)["items"]}) == 2:
                break
            time.sleep(0.5)
        else:
            raise SystemExit(
                "the agent published no slices in 120 s:\n" + agent_log.read_text(errors="replace")
            )
        print(f"agent published both drivers' slices; {load()}")
        plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects(args.waiting)}),
        )
        first = sample(plane, operator_log, port, args.waiting)
        samples = [first]
        print(f"created {args.waiting + 1} pods; sampling every {args.every:g}s for {args.duration:g}s")
        while time.monotonic() - first["at"] < args.duration:
            time.sleep(args.every)
            now = sample(plane, operator_log, port, args.waiting)
            samples.append(now)
            minutes = (now["at"] - first["at"]) / 60
            print(
                f"  {now['at'] - first['at']:5.0f}s: refused claim allocated and cleared {now['binding_failures']} "
                f"times, failed preparations {now['prepare_failures']}, FailedScheduling per waiting pod "
                f"max {max(now['failed_scheduling'], default=0)}, operator log lines {now['log_lines']} "
                f"({now['log_lines'] / minutes:.0f}/min); {now['load']}"
            )
        report(samples, args)
    finally:
        for process in (operator, agent):
            process.terminate()
        for process in (operator, agent):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            for log in (operator_log, agent_log):
                shutil.copy(log, args.logs / log.name)


def report(samples: list[dict[str, Any]], args: argparse.Namespace) -> None:
    first, last = samples[0], samples[-1]
    minutes = (last["at"] - first["at"]) / 60
    per_pod = last["failed_scheduling"]
    attempts = {k: v - first["attempts"].get(k, 0.0) for k, v in last["attempts"].items()}
    multi = {k: v for k, v in last["event_objects"].items() if v > 1}
    print(
        f"\nretry storm, {minutes * 60:.0f}s, code at {ROOT} (load at the end: {last['load']}):\n"
        f"  refused claim allocated and cleared {last['binding_failures']} times "
        f"({last['binding_failures'] / minutes:.1f}/min), failed preparations {last['prepare_failures']} "
        f"({last['prepare_failures'] / minutes:.1f}/min)\n"
        f"  FailedScheduling per waiting pod ({args.waiting}): min {min(per_pod, default=0)} max {max(per_pod, default=0)} "
        f"total {sum(per_pod)} ({sum(per_pod) / max(len(per_pod), 1) / minutes:.1f} per pod per min)\n"
        f"  operator allocation attempts by result: {json.dumps({k: int(v) for k, v in sorted(attempts.items())})}\n"
        f"  operator log lines {last['log_lines']} ({(last['log_lines'] - first['log_lines']) / minutes:.0f}/min), "
        f"'Capacity changed during the attempt' {last['trying_again']}\n"
        f"  Event objects per pod and reason: {len(last['event_objects'])} "
        f"(more than one object: {json.dumps(multi) if multi else 'none'})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds to run the storm")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--waiting", type=int, default=10, help="pods that cannot fit")
    parser.add_argument("--logs", type=Path, default=None, help="copy the operator's and agent's logs here")
    args = parser.parse_args()
    print(f"start: {load()}")
    with (
        tempfile.TemporaryDirectory(prefix="draco-storm-") as folder,
        ControlPlane(binaries=find_binaries()) as plane,
    ):
        run(plane, args, Path(folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
