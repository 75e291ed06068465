"""`make demo`: the whole of draco on a laptop, in about a minute, cleaned up afterwards.

It starts the tests' control plane (etcd + kube-apiserver, no controllers), installs the
CRDs, runs the admission webhook (self-signed certificate, registering its own
configurations), the operator and a node agent with fake GPUs as processes, applies the
examples, and prints the claims with the devices they got. There is no Job controller,
so the demo stamps out each Job's pods the way the Job controller would (`<job>-<i>`,
owned by the Job, gated until draco allocated their claims), except that it creates all
`completions` at once rather than `parallelism` at a time, so the table shows every pod.

On a real node (when `DRACO_NODE_ASSETS` holds what `hack/node.sh` built and this is
root; `make demo` does both): containerd, a kubelet and kube-scheduler run beside the
control plane, in a network namespace of the node's own (the machine's own namespace gets
no address or route: see docs/node.md), the agent registers with containerd's NRI socket,
and the pods really run.
No registry is reachable, so every container image is replaced by the local busybox
image. The final table shows, per container, its node, the claim and device it was given
and what it printed; then the pods finish and the operator and agent clean up.

When the real node cannot run here (not root, no cgroups, `hack/node.sh` failed), the
demo fails and says why. Only when asked (`--simulate`, `make demo DEMO_ARGS=--simulate`)
does the agent simulate two nodes instead, and nothing runs: with `--complete` the demo
marks the pods Succeeded, as a kubelet would, and shows the operator cleaning up.

Everything it starts is stopped and its temporary folder removed on exit, on failure and
on Ctrl-C. With `--keep` the cluster (control plane, node, webhook, operator, agent) stays
up after the table, with an `export KUBECONFIG=...` line to poke at it, until Ctrl-C.
Logs of the webhook, the operator and the agent are printed when something goes wrong.
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
from draco.errors import ControlPlaneError, DracoError
from draco.logs import configure_logging
from draco.scheduling.podclaims import claim_statuses, parse_pod_claims
from draco.tools.dev.controlplane import ControlPlane, find_binaries, free_port
from draco.tools.dev.node import IMAGE, NODE_ASSETS_ENV, Node, find_node_assets, node_problems

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


def use_local_image(docs: list[dict[str, Any]]) -> None:
    """Every container of the Jobs runs the node's local busybox (no registry is reachable)."""
    for doc in docs:
        if doc.get("kind") != "Job":
            continue
        pod_spec = doc["spec"]["template"]["spec"]
        for container in [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]:
            container["image"] = IMAGE
            container["imagePullPolicy"] = "Never"


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


def pods_of(plane: ControlPlane, pods: list[tuple[str, str]]) -> list[dict[str, Any]]:
    out = []
    for namespace in sorted({ns for ns, _ in pods}):
        out += [
            p
            for p in get_json(plane, "pods", "-n", namespace)["items"]
            if (namespace, p["metadata"]["name"]) in pods
        ]
    return out


def all_printed(plane: ControlPlane, pods: list[tuple[str, str]]) -> bool:
    """Every container of every pod has started (so it printed, or is about to)."""
    items = pods_of(plane, pods)
    if len(items) < len(pods):
        return False
    for pod in items:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if len(statuses) < len(pod["spec"]["containers"]):
            return False
        if any("waiting" in (s.get("state") or {}) for s in statuses):
            return False
    return True


def note_devices(plane: ControlPlane, seen: dict[tuple[str, str], list[str]]) -> None:
    """Remember each allocated claim's devices: a pod's own claim is gone once it finishes."""
    for claim in get_json(plane, CLAIMS, "-A")["items"]:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        if results:
            seen[(claim["metadata"]["namespace"], claim["metadata"]["name"])] = [r["device"] for r in results]


def container_rows(
    plane: ControlPlane, pods: list[tuple[str, str]], devices_of: dict[tuple[str, str], list[str]]
) -> list[tuple[str, ...]]:
    """Pod, container, node, the claim and device it was given, and what it printed."""
    rows = []
    for pod in pods_of(plane, pods):
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        statuses = claim_statuses(pod)
        given: dict[str, list[str]] = {}
        for entry in parse_pod_claims(pod):
            claim_name = entry.resource_claim_name or statuses.get(entry.name)
            for container in entry.containers or [c["name"] for c in pod["spec"]["containers"]]:
                given.setdefault(container, []).append(claim_name or "?")
        for container in pod["spec"]["containers"]:
            cname = container["name"]
            names = given.get(cname, [])
            devices = [d for claim_name in names for d in devices_of.get((namespace, claim_name), [])]
            printed = plane.kubectl("logs", "-n", namespace, name, "-c", cname, check=False).stdout.strip()
            rows.append(
                (
                    name,
                    cname,
                    pod["spec"].get("nodeName") or "-",
                    ", ".join(names) or "-",
                    ", ".join(devices) or "-",
                    printed.splitlines()[0] if printed else "(nothing yet)",
                )
            )
    return rows


def start_webhook(plane: ControlPlane, processes: Processes, work: Path) -> None:
    """The admission webhook, self-signed, registering its own configurations."""
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


def keep_up(args: argparse.Namespace, plane: ControlPlane, processes: Processes, work: Path) -> None:
    """With --keep: leave everything running, say how to reach it, wait for Ctrl-C."""
    if not args.keep:
        return
    print()
    say("the cluster stays up (--keep); in another shell:")
    print(f"export KUBECONFIG={plane.kubeconfig}")
    print(f"export PATH={plane.binaries}:$PATH   # its kubectl")
    say(f"logs of the webhook, operator and agent in {work}; Ctrl-C stops everything and removes it")
    try:
        while True:
            processes.check()
            time.sleep(1)
    except KeyboardInterrupt:
        say("stopping the cluster")


def run_on_node(args: argparse.Namespace, work: Path, assets: Path) -> None:
    say("starting etcd + kube-apiserver, then containerd, a kubelet and kube-scheduler (a real node)")
    plane = ControlPlane(binaries=find_binaries(), workdir=work / "controlplane").start()
    processes = Processes(work, plane.env())
    node: Node | None = None
    try:
        node = Node(plane=plane, assets=assets).start()
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        say(
            f"node {node.name} is Ready ({node.address}, network namespace {node.netns.name if node.netns else '?'}); "
            "starting the webhook, the operator and the node agent (fake GPUs, NRI)"
        )
        start_webhook(plane, processes, work)
        processes.start("operator", "operator", "--metrics-port", "0", "--health-port", "0")
        processes.start(
            "agent", "agent", "--node-name", node.name, "--driver", "fake", "--config", str(DEVICES),
            "--binding-conditions", "--cdi-dir", str(work / "cdi"), "--state-dir", str(work / "state"),
            "--nri-socket", str(node.nri_socket),
        )  # fmt: skip
        wait(
            "the agent to publish the node's devices",
            lambda: any(s["spec"]["nodeName"] == node.name for s in get_json(plane, SLICES)["items"]),
            processes=processes,
        )
        print(plane.kubectl("get", SLICES).stdout)
        docs = load_examples()
        use_local_image(docs)
        say(f"no registry here: every container runs {IMAGE} (Debian's busybox-static, from hack/node.sh)")
        jobs = apply_examples(plane, docs)
        pods = [p for job in jobs for p in stamp_out_pods(plane, job)]
        say(
            f"waiting for draco to allocate and prepare, kube-scheduler to bind, the kubelet to run {len(pods)} pods"
        )
        started = time.monotonic()
        devices: dict[tuple[str, str], list[str]] = {}

        def started_all() -> bool:
            note_devices(plane, devices)
            return all_printed(plane, pods)

        wait("every container to start", started_all, processes=processes, timeout=args.timeout)
        say(f"all {len(pods)} pods ran after {time.monotonic() - started:.1f}s")
        time.sleep(1)  # the containers print first thing; give the last one a moment
        rows = container_rows(plane, pods, devices)
        print_table(rows, ("POD", "CONTAINER", "NODE", "CLAIM", "DEVICE", "PRINTED"))
        print()
        say("the containers finish; waiting for the operator and the agent to clean up")
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
        say("every pod Succeeded; the agent removed every CDI spec and metadata file")
        print_table(claim_rows(plane), ("CLAIM", "STATE", "NODE", "DEVICES", "PREPARED"))
        keep_up(args, plane, processes, work)
    except KeyboardInterrupt:
        raise
    except BaseException:
        processes.show_logs()
        if node is not None:
            for name in ("kubelet", "containerd"):
                print(f"---- last lines of the {name} log ----\n{node.logs(name)}", file=sys.stderr)
        raise
    finally:
        processes.stop()
        if node is not None:
            node.stop()
        plane.stop()


def run(args: argparse.Namespace, work: Path) -> None:
    if not args.simulate:
        # A real node or a failure that says why: simulated nodes only when asked for.
        problems = node_problems()
        try:
            assets = find_node_assets()
        except ControlPlaneError as exc:
            problems.insert(0, str(exc))
        if problems:
            raise DracoError(
                "the real node cannot run here: "
                + "; ".join(problems)
                + " (`make demo DEMO_ARGS=--simulate` runs on simulated nodes)"
            )
        run_on_node(args, work, assets)
        return
    say("simulating two nodes (--simulate): nothing runs")
    say("starting etcd + kube-apiserver")
    plane = ControlPlane(binaries=find_binaries(), workdir=work / "controlplane").start()
    processes = Processes(work, plane.env())
    try:
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        say("CRDs installed; starting the webhook, the operator and the node agent (fake GPUs, 2 nodes)")
        start_webhook(plane, processes, work)
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
        keep_up(args, plane, processes, work)
    except KeyboardInterrupt:
        raise
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
    parser.add_argument(
        "--keep",
        action="store_true",
        help="then keep the cluster up and print its `export KUBECONFIG=` line, until Ctrl-C",
    )
    parser.add_argument(
        "--simulate",
        action="store_true",
        help=f"simulate two nodes (no real node, even when {NODE_ASSETS_ENV} gives one)",
    )
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
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
