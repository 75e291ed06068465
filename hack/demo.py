"""`make demo`: the whole of draco on a laptop, in about a minute, cleaned up afterwards.

It starts the tests' control plane (etcd + kube-apiserver, no scheduler, kubelet or
controllers), installs the CRDs, runs the admission webhook (self-signed certificate,
registering its own configurations), the operator and a node agent with fake GPUs on two
simulated nodes as processes, applies the examples, and prints the claims with the
devices they got. There is no Job controller either, so the demo stamps out each Job's
pods the way the Job controller would (`<job>-<i>`, owned by the Job, gated until draco
allocated their claims), except that it creates all `completions` at once rather than
`parallelism` at a time, so the table shows every pod's claim. With `--complete` it then
marks the pods Succeeded, as a kubelet would, and shows the operator cleaning up.

Everything it starts is stopped and its temporary folder removed on exit, on failure and
on Ctrl-C. Logs of the webhook, the operator and the agent are printed when something
goes wrong.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from draco.api.constants import SCHEDULING_GATE
from draco.errors import DracoError
from draco.logs import configure_logging
from draco.tools.dev.controlplane import ControlPlane, find_binaries, free_port

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DEVICES = EXAMPLES / "agent" / "demo-devices.yaml"
FALLBACK_WORKLOAD = EXAMPLES / "agent" / "workload.yaml"
NODE_PREFIX = "demo-node"
NODES = 2
CLAIMS = "resourceclaims.resource.draco.dev"
SLICES = "resourceslices.resource.draco.dev"


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


class Processes:
    """Child processes of the demo, each logging to a file, all stopped at the end."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder = folder
        self.env = env
        self.started: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log_path = self.folder / f"{name}.log"
        with log_path.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "draco.cli", "--log-format", "json", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.started.append((name, popen, log_path))
        return popen

    def check(self) -> None:
        for name, popen, _ in self.started:
            if popen.poll() is not None:
                raise DracoError(f"the {name} exited with status {popen.returncode}")

    def show_logs(self, lines: int = 25) -> None:
        for name, _, log_path in self.started:
            tail = log_path.read_text(errors="replace").splitlines()[-lines:]
            print(f"---- last {len(tail)} lines of the {name} log ----", file=sys.stderr)
            print("\n".join(tail), file=sys.stderr)

    def stop(self) -> None:
        for _, popen, _ in reversed(self.started):
            if popen.poll() is None:
                popen.terminate()
        for _, popen, _ in self.started:
            try:
                popen.wait(20)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(5)


def wait(what: str, predicate: Callable[[], Any], *, processes: Processes, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processes.check()
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise DracoError(f"timed out after {timeout:.0f}s waiting for {what}")


def get_json(plane: ControlPlane, *args: str) -> Any:
    return json.loads(plane.kubectl("get", *args, "-o", "json").stdout)


def load_examples() -> list[dict[str, Any]]:
    files = sorted(p for p in EXAMPLES.glob("*.yaml") if p.is_file()) + sorted(EXAMPLES.glob("*.yml"))
    if not files:
        say(f"no examples in {EXAMPLES.relative_to(ROOT)}/; using {FALLBACK_WORKLOAD.relative_to(ROOT)}")
        files = [FALLBACK_WORKLOAD]
    docs: list[dict[str, Any]] = []
    for path in files:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
        say(f"applying {path.relative_to(ROOT)}")
    return docs


def apply_examples(plane: ControlPlane, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply everything (namespaces first) and return the Jobs as stored."""
    namespaces = {d["metadata"].get("namespace") for d in docs if d.get("kind") != "Namespace"} - {None}
    for ns in sorted(namespaces):
        plane.kubectl("create", "namespace", ns, check=False)
    ordered = sorted(docs, key=lambda d: (d.get("kind") != "Namespace", d.get("kind") == "Job"))
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(ordered))
    return [d for d in docs if d.get("kind") == "Job"]


def stamp_out_pods(plane: ControlPlane, job: dict[str, Any]) -> list[tuple[str, str]]:
    """Create the Job's pods as the Job controller would; returns (namespace, name)s."""
    namespace = job["metadata"].get("namespace", "default")
    name = job["metadata"]["name"]
    stored = get_json(plane, "job", "-n", namespace, name)
    spec = job["spec"]
    count = int(spec.get("completions") or spec.get("parallelism") or 1)
    template = spec["template"]
    pods = []
    for i in range(count):
        meta = template.get("metadata") or {}
        pod_spec = json.loads(json.dumps(template["spec"]))
        gates = pod_spec.setdefault("schedulingGates", [])
        if not any(g.get("name") == SCHEDULING_GATE for g in gates):
            gates.append({"name": SCHEDULING_GATE})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{i}",
                "namespace": namespace,
                "labels": {
                    **(meta.get("labels") or {}),
                    "job-name": name,
                    "batch.kubernetes.io/job-completion-index": str(i),
                },
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": name,
                        "uid": stored["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pod_spec,
        }
        plane.kubectl("create", "-f", "-", input=json.dumps(pod))
        pods.append((namespace, pod["metadata"]["name"]))
    say(f"job {namespace}/{name}: created {count} pods (the Job controller's part)")
    return pods


def gated(plane: ControlPlane, pods: list[tuple[str, str]]) -> list[str]:
    left = []
    for namespace in sorted({ns for ns, _ in pods}):
        for pod in get_json(plane, "pods", "-n", namespace)["items"]:
            if (namespace, pod["metadata"]["name"]) not in pods:
                continue
            if any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or []):
                left.append(pod["metadata"]["name"])
    return left


def claim_rows(plane: ControlPlane) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for claim in get_json(plane, CLAIMS, "-A")["items"]:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        devices = ", ".join(f"{r['pool']}/{r['device']}" for r in results) or "-"
        nodes = ", ".join(sorted({r["pool"] for r in results})) or "-"
        ready = sum(
            1
            for d in status.get("devices") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in d.get("conditions") or [])
        )
        # Computed like upstream's STATE column, from the fields themselves.
        state = ["deleted"] if claim["metadata"].get("deletionTimestamp") else []
        if status.get("allocation"):
            state += ["allocated", "reserved"] if status.get("reservedFor") else ["allocated"]
        elif not state:
            state = ["pending"]
        name = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        rows.append((name, ",".join(state), nodes, devices, f"{ready}/{len(results)}"))
    return sorted(rows)


def print_table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@contextmanager
def interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """SIGTERM (e.g. from `timeout`) cleans up like Ctrl-C does."""

    def handler(*_: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run(args: argparse.Namespace, work: Path) -> None:
    say("starting etcd + kube-apiserver")
    plane = ControlPlane(binaries=find_binaries(), workdir=work / "controlplane").start()
    processes = Processes(work, plane.env())
    try:
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        say("CRDs installed; starting the webhook, the operator and the node agent (fake GPUs, 2 nodes)")
        port = free_port()
        processes.start(
            "webhook", "webhook", "--listen-address", "127.0.0.1", "--port", str(port),
            "--self-signed", "--dns-name", "127.0.0.1", "--cert-dir", str(work / "webhook-tls"),
            "--register", "--url", f"https://127.0.0.1:{port}", "--metrics-port", "0", "--health-port", "0",
        )  # fmt: skip
        wait(
            "the webhook to register itself",
            lambda: (
                plane.kubectl(
                    "get", "validatingwebhookconfiguration", "resource.draco.dev", check=False
                ).returncode
                == 0
            ),
            processes=processes,
        )
        processes.start("operator", "operator", "--metrics-port", "0", "--health-port", "0")
        processes.start(
            "agent",
            "agent",
            "--node-name",
            NODE_PREFIX,
            "--nodes",
            str(NODES),
            "--create-nodes",
            "--driver",
            "fake",
            "--config",
            str(DEVICES),
            "--binding-conditions",
            "--cdi-dir",
            str(work / "cdi"),
            "--state-dir",
            str(work / "state"),
        )
        wait(
            "the agent to publish both nodes",
            lambda: len({s["spec"]["nodeName"] for s in get_json(plane, SLICES)["items"]}) >= NODES,
            processes=processes,
        )
        print(plane.kubectl("get", SLICES).stdout)
        jobs = apply_examples(plane, load_examples())
        pods = [p for job in jobs for p in stamp_out_pods(plane, job)]
        say(f"waiting for draco to allocate, prepare and un-gate {len(pods)} pods")
        started = time.monotonic()
        wait(
            "every pod to be un-gated",
            lambda: not gated(plane, pods),
            processes=processes,
            timeout=args.timeout,
        )
        say(f"all {len(pods)} pods un-gated after {time.monotonic() - started:.1f}s")
        print(plane.kubectl("get", CLAIMS, "-A").stdout)
        print_table(claim_rows(plane), ("CLAIM", "STATE", "NODE", "DEVICES", "PREPARED"))
        print()
        say(f"CDI specs written by the agent: {sum(1 for _ in (work / 'cdi').rglob('*.json'))}")
        if args.complete:
            for namespace, name in pods:
                plane.kubectl(
                    "patch", "pod", "-n", namespace, name, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"phase": "Succeeded"}}),
                )  # fmt: skip
            say("pods marked Succeeded (the kubelet's part); waiting for the operator to clean up")
            wait(
                "every claim to be released",
                lambda: all("reserved" not in row[1] for row in claim_rows(plane)),
                processes=processes,
                timeout=args.timeout,
            )
            wait(
                "the agent to unprepare",
                lambda: not any((work / "cdi").rglob("*.json")),
                processes=processes,
                timeout=args.timeout,
            )
            say("the agent removed every CDI spec and metadata file")
            print_table(claim_rows(plane), ("CLAIM", "STATE", "NODE", "DEVICES", "PREPARED"))
    except BaseException:
        processes.show_logs()
        raise
    finally:
        processes.stop()
        plane.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description="Run draco end to end on a local control plane.")
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for the pods")
    parser.add_argument(
        "--complete", action="store_true", help="then mark pods Succeeded and show the cleanup"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, CDI specs)")
    args = parser.parse_args()
    configure_logging(fmt="text", level="WARNING")
    work = Path(tempfile.mkdtemp(prefix="draco-demo-"))
    try:
        with interrupts_as_keyboard_interrupt():
            run(args, work)
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted; cleaned up", file=sys.stderr)
        return 130
    except DracoError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
