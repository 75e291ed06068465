#!/usr/bin/env bash
# Check draco's NVIDIA driver on this machine's real GPU, end to end, and print PASS/FAIL
# per step (docs/agent.md, "Checking a GPU machine"):
#
#   hack/gpu-check.sh
#
# 1. NVML answers (pynvml from `pip install -e '.[nvidia]'`; the NVIDIA driver loaded);
# 2. a local control plane (etcd + kube-apiserver from hack/controlplane.sh, CRDs applied),
#    `draco operator` and `draco agent --driver nvidia --binding-conditions --create-nodes
#    --nvidia-shares memory --nvidia-health-events FILE`;
# 3. the node's ResourceSlices: published, valid by draco's own validation, every device
#    shared (memory as consumable capacity);
# 4. a claim for the whole GPU (`type == "gpu"`) and, when a GPU is in MIG mode, one for a
#    MIG device (`type == "mig"`), each with a pod that names it: allocated, prepared
#    (claim Ready, pod un-gated), CDI spec checked (NVIDIA_VISIBLE_DEVICES is the device's
#    UUID, its device nodes exist on this machine);
# 5. attribution: each pod bound to the node (as kube-scheduler would), the agent's
#    PodResources API (`--pod-resources-socket`, what dcgm-exporter is pointed at) names
#    the pod's container with the device's UUID under nvidia.com/gpu (nvidia.com/mig-<profile>)
#    and the claim;
# 6. the pods deleted: claims deallocated, CDI specs removed (unprepared);
# 7. shares: two claims of half the memory of one device, each with a pod: both allocated
#    on that device (two shares), both prepared, each CDI spec naming the device's UUID;
# 8. health: an XID 79 written to the agent's health-events file (the path an NVML event
#    takes, without touching the GPU) reaches the device's taint, both claims' status and
#    both pods' condition and Events; "recovered" clears all of it; then the pods go.
#
# Nothing runs on the GPU, no GPU setting changes, and nothing outside a temporary folder is
# written: there is no kubelet; the agent's CDI and state folders are under that folder
# (kept on failure).
#
# Exit status: 0 every step passed, 1 a step failed, 2 no NVIDIA GPU/NVML here (nothing
# else was tried). GPU_CHECK_REPLAY="a.json b.json" runs the same steps on a recording
# of NVML (`--nvml-replay`) instead, device nodes not checked: for trying the script
# without a GPU. DRACO_PYTHON picks the Python (default: .venv/bin/python).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${DRACO_PYTHON:-$ROOT/.venv/bin/python}"
REPLAY="${GPU_CHECK_REPLAY:-}"

say() { printf '%-5s %-28s %s\n' "$1" "$2" "${3:-}"; }

if [ ! -x "$PY" ]; then
  say FAIL python "no $PY: run \`make venv\` (or set DRACO_PYTHON)"
  exit 1
fi

if [ -z "$REPLAY" ]; then
  if ! probe="$("$PY" - <<'EOF' 2>&1
import sys
try:
    import pynvml
except ImportError:
    sys.exit("pynvml is not installed: pip install -e '.[nvidia]'")
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as exc:
    sys.exit(f"NVML does not start: {exc}")
count = pynvml.nvmlDeviceGetCount()
if not count:
    sys.exit("NVML sees no GPU")
version = pynvml.nvmlSystemGetDriverVersion()
print(f"{count} GPU(s), driver {version.decode() if isinstance(version, bytes) else version}")
pynvml.nvmlShutdown()
EOF
)"; then
    say SKIP nvml "no NVIDIA GPU/NVML on this machine: ${probe##*$'\n'}"
    exit 2
  fi
  say PASS nvml "$probe"
else
  say INFO nvml "replaying $REPLAY (no real GPU)"
fi

if ! BIN="$("$ROOT/hack/controlplane.sh" | tail -n 1)"; then
  say FAIL control-plane-binaries "hack/controlplane.sh failed"
  exit 1
fi

export GPU_CHECK_ROOT="$ROOT" GPU_CHECK_BIN="$BIN" GPU_CHECK_REPLAY="$REPLAY"
exec "$PY" - <<'EOF'
"""The steps after NVML: control plane, operator, agent, claims, CDI, unprepare."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from draco.tools.dev.controlplane import ControlPlane
from draco.validation import render_all, validate_object

ROOT = Path(os.environ["GPU_CHECK_ROOT"])
REPLAY = os.environ.get("GPU_CHECK_REPLAY", "").split()
NAMESPACE = "gpu-check"
NODE = "gpu-check-node"
SLICES = "resourceslices.resource.draco.dev"
CLAIMS = "resourceclaims.resource.draco.dev"
PODS_HEALTH = "resource.draco.dev/DevicesHealthy"
SCALE = float(os.environ.get("DRACO_TEST_TIMEOUT_SCALE", "1"))
failures: list[str] = []


def say(status: str, step: str, detail: str = "") -> None:
    print(f"{status:<5} {step:<28} {detail}", flush=True)
    if status == "FAIL":
        failures.append(step)


def wait(predicate, timeout: float):
    deadline = time.monotonic() + timeout * SCALE
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


work = Path(tempfile.mkdtemp(prefix="draco-gpu-check-"))
cdi_dir, state_dir, health_events = work / "cdi", work / "state", work / "health-events"
pod_resources_socket = work / "pod-resources.sock"
processes: list[subprocess.Popen] = []
plane = ControlPlane(binaries=Path(os.environ["GPU_CHECK_BIN"]), workdir=work / "controlplane")


def start(name: str, *args: str) -> subprocess.Popen:
    log = open(work / f"{name}.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "draco.cli", "--log-format", "text", *args],
        env=plane.env(),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    processes.append(process)
    return process


def kubectl_json(*args: str) -> dict:
    out = plane.kubectl(*args, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def apply(*objects: dict) -> None:
    plane.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


def published() -> list[dict]:
    items = kubectl_json("get", SLICES, f"--field-selector=spec.nodeName={NODE}").get("items") or []
    pools = {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in items}
    return items if len(pools) == 1 and next(iter(pools))[1] == len(items) else []


def pod_resources() -> list:
    """The agent's PodResources List (`--pod-resources-socket`), as a gRPC client asks it."""
    import grpc

    from draco.agent.podresources.proto import SERVICE, message, message_class

    with grpc.insecure_channel(f"unix://{pod_resources_socket}") as channel:
        call = channel.unary_unary(
            f"/{SERVICE}/List",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message_class("ListPodResourcesResponse").FromString,
        )
        return list(call(message("ListPodResourcesRequest"), timeout=10).pod_resources)


def check_attribution(kind: str, pod_name: str, claim_name: str, device: dict) -> None:
    """The pod bound to the node (as kube-scheduler would): the agent's PodResources
    answer names the pod's container with the device, as dcgm-exporter reads it."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod_name, "namespace": NAMESPACE},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    }
    plane.kubectl(
        "create", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name}/binding", "-f", "-",
        input=json.dumps(binding),
    )
    uuid = device["attributes"]["uuid"]["string"]

    def named() -> str:
        for entry in pod_resources():
            for container in entry.containers:
                ids = [i for d in container.devices if d.resource_name.startswith("nvidia.com/") for i in d.device_ids]
                claims = [r.claim_name for r in container.dynamic_resources]
                if entry.name == pod_name and uuid in ids and claim_name in claims:
                    resource = next(d.resource_name for d in container.devices if uuid in d.device_ids)
                    return f"{entry.namespace}/{entry.name} {container.name}: {resource} {uuid}"
        return ""

    found = wait(named, 60)
    if found:
        say("PASS", f"{kind}: attribution", found)
    else:
        say("FAIL", f"{kind}: attribution", f"the PodResources answer does not name {pod_name} with {uuid}")


def check_claim(kind: str, devices: dict[str, dict]) -> None:
    """A claim for one device of `kind`, a pod naming it: prepare, CDI, attribution,
    unprepare."""
    claim_name, pod_name = f"{kind}-claim", f"{kind}-pod"
    claim_with_pod(kind, {"deviceClassName": f"nvidia-{kind}"})
    started = time.monotonic()
    claim = wait(lambda: prepared(kind), 120)
    if not claim:
        got = kubectl_json("get", CLAIMS, "-n", NAMESPACE, claim_name)
        say("FAIL", f"{kind}: prepare", json.dumps(got.get("status") or {})[:300])
        return
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    device = devices[result["device"]]
    say("PASS", f"{kind}: allocate + prepare", f"{result['device']} in {time.monotonic() - started:.1f} s")
    problems, have = cdi_problems(claim, devices)
    say("FAIL" if problems else "PASS", f"{kind}: CDI spec", "; ".join(problems) or have)
    spec_file = cdi_dir / f"draco-{result['driver']}-{claim['metadata']['uid']}.json"

    check_attribution(kind, pod_name, claim_name, device)
    # Bound, and no kubelet to finish its deletion: removed at once.
    plane.kubectl("delete", "pod", "-n", NAMESPACE, pod_name, "--grace-period=0", "--force", "--wait=false")

    def released() -> bool:
        got = kubectl_json("get", CLAIMS, "-n", NAMESPACE, claim_name)
        return bool(got) and not (got.get("status") or {}).get("allocation") and not spec_file.exists()

    if wait(released, 120):
        say("PASS", f"{kind}: unprepare", "claim deallocated, CDI spec removed")
    else:
        say("FAIL", f"{kind}: unprepare", f"claim still allocated or {spec_file} still there")


def claim_with_pod(name: str, request: dict) -> None:
    """A claim `<name>-claim` with one request, and a pod `<name>-pod` that names it."""
    apply(
        {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"{name}-claim", "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-pod",
                "namespace": NAMESPACE,
                "annotations": {"resource.draco.dev/claims": json.dumps([{"name": "gpu", "resourceClaimName": f"{name}-claim"}])},
            },
            "spec": {
                "schedulingGates": [{"name": "resource.draco.dev/allocation"}],
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "containers": [{"name": "main", "image": "registry.invalid/none"}],
            },
        },
    )


def prepared(name: str) -> dict:
    """The claim of `name` once every device is Ready and its pod un-gated, else {}."""
    claim = kubectl_json("get", CLAIMS, "-n", NAMESPACE, f"{name}-claim")
    entries = (claim.get("status") or {}).get("devices") or []
    ready = entries and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in e.get("conditions") or []) for e in entries
    )
    pod = kubectl_json("get", "pod", "-n", NAMESPACE, f"{name}-pod")
    ungated = pod and not (pod.get("spec") or {}).get("schedulingGates")
    return claim if ready and ungated else {}


def cdi_problems(claim: dict, devices: dict[str, dict]) -> tuple[list[str], str]:
    """What is wrong with the claim's CDI spec (nothing: []) and a line saying what it has."""
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    uid = claim["metadata"]["uid"]
    spec_file = cdi_dir / f"draco-{result['driver']}-{uid}.json"
    try:
        spec = json.loads(spec_file.read_text())
        name = f"{uid}-{result['device']}" + (f"-{result['shareID']}" if result.get("shareID") else "")
        (edits,) = [d["containerEdits"] for d in spec["devices"] if d["name"] == name]
    except (OSError, ValueError, KeyError) as exc:
        return [f"{spec_file}: {exc!r}"], ""
    uuid = devices[result["device"]]["attributes"]["uuid"]["string"]
    nodes = [n["path"] for n in edits.get("deviceNodes") or []]
    problems = []
    if edits.get("env") != [f"NVIDIA_VISIBLE_DEVICES={uuid}"]:
        problems.append(f"env {edits.get('env')}")
    if not REPLAY:
        problems += [f"{n} missing" for n in nodes if not Path(n).exists()]
    return problems, f"{spec['kind']}: NVIDIA_VISIBLE_DEVICES={uuid}, {' '.join(nodes)}"


def release(names: list[str], step: str) -> None:
    """Delete the pods of `names`: claims deallocated, CDI specs removed."""
    uids = {n: kubectl_json("get", CLAIMS, "-n", NAMESPACE, f"{n}-claim").get("metadata", {}).get("uid") for n in names}
    for name in names:
        plane.kubectl("delete", "pod", "-n", NAMESPACE, f"{name}-pod", "--wait=false")

    def released() -> bool:
        for name in names:
            got = kubectl_json("get", CLAIMS, "-n", NAMESPACE, f"{name}-claim")
            if not got or (got.get("status") or {}).get("allocation") or list(cdi_dir.glob(f"*-{uids[name]}.json")):
                return False
        return True

    if wait(released, 120):
        say("PASS", step, "claims deallocated, CDI specs removed")
    else:
        say("FAIL", step, "a claim still allocated or its CDI spec still there")


def health_of(names: list[str]) -> list[tuple[str, str, str]]:
    """Per claim of `names`: its devices' Healthy condition, its pod's health condition, and
    whether the pod got a DeviceUnhealthy Event (each "" when absent)."""
    out = []
    for name in names:
        claim = kubectl_json("get", CLAIMS, "-n", NAMESPACE, f"{name}-claim")
        claim_says = " ".join(
            c.get("message", "")
            for e in (claim.get("status") or {}).get("devices") or []
            for c in e.get("conditions") or []
            if c["type"] == "Healthy" and c["status"] == "False"
        )
        pod = kubectl_json("get", "pod", "-n", NAMESPACE, f"{name}-pod")
        pod_says = " ".join(
            c.get("message", "") for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == PODS_HEALTH
        )
        events = kubectl_json("get", "events", "-n", NAMESPACE, f"--field-selector=involvedObject.name={name}-pod")
        reasons = " ".join(sorted({e.get("reason", "") for e in events.get("items") or []}))
        out.append((claim_says, pod_says, reasons))
    return out


def check_health(names: list[str], device: dict) -> None:
    """An XID written to the health-events file reaches the claims and pods; recovery clears it."""
    uuid = device["attributes"]["uuid"]["string"]
    gpu = device["attributes"].get("parentUUID", device["attributes"]["uuid"])["string"]
    with health_events.open("a") as out:
        out.write(f"{gpu} xid 79\n")

    def tainted() -> bool:
        now = {d["name"]: d for s in published() for d in s["spec"].get("devices") or []}
        return any(t.get("value") == "xid-79" for t in now.get(device["name"], {}).get("taints") or [])

    told = wait(lambda: tainted() and all(c and p and "DeviceUnhealthy" in r for c, p, r in health_of(names)), 90)
    if not told:
        say("FAIL", "health: XID to claim and pod", f"taint {tainted()}; (claim, pod, events) {health_of(names)}")
        return
    claim_says, pod_says, _ = health_of(names)[0]
    if "XID 79" in claim_says and "XID 79" in pod_says:
        say("PASS", "health: XID to claim and pod", f"{uuid}: {pod_says[:160]}")
    else:
        say("FAIL", "health: XID to claim and pod", f"claim says {claim_says!r}, pod says {pod_says!r}")
    with health_events.open("a") as out:
        out.write(f"{gpu} recovered\n")
    cleared = wait(lambda: not tainted() and all(not c and not p and "DeviceHealthy" in r for c, p, r in health_of(names)), 90)
    say("PASS" if cleared else "FAIL", "health: recovery", "taint, claim and pod conditions gone" if cleared else repr(health_of(names)))


def check_shares(kind: str, devices: dict[str, dict]) -> None:
    """Two claims of half the memory of one shared device of `kind`, both prepared; then health."""
    name, device = next((n, d) for n, d in sorted(devices.items()) if d["attributes"]["type"]["string"] == kind)
    if not device.get("allowMultipleAllocations"):
        say("FAIL", f"shares: {kind}", f"{name} is not published shared")
        return
    memory = int(device["capacity"]["memory"]["value"])
    half = f"{memory // 2**20 // 2}Mi"
    uuid = device["attributes"]["uuid"]["string"]
    driver = next(iter({s["spec"]["driver"] for s in published()}))
    request = {
        "deviceClassName": f"nvidia-{kind}",
        "selectors": [{"cel": {"expression": f"device.attributes['{driver}'].uuid == '{uuid}'"}}],
        "capacity": {"requests": {"memory": half}},
    }
    names = [f"share-{i}" for i in range(2)]
    for share in names:
        claim_with_pod(share, request)
    claims = [wait(lambda s=share: prepared(s), 120) for share in names]
    if not all(claims):
        say("FAIL", f"shares: two halves of {name}", json.dumps([(c or {}).get("status") for c in claims])[:300])
        return
    results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
    shares = {r.get("shareID") for r in results}
    same = {r["device"] for r in results} == {name} and len(shares) == 2 and None not in shares
    consumed = [r.get("consumedCapacity", {}).get("memory") for r in results]
    say("PASS" if same else "FAIL", f"shares: two halves of {name}", f"shares {sorted(map(str, shares))}, memory {consumed}")
    problems = [p for c in claims for p in cdi_problems(c, devices)[0]]
    say("FAIL" if problems else "PASS", "shares: CDI specs", "; ".join(problems) or f"one per share, NVIDIA_VISIBLE_DEVICES={uuid}")
    check_health(names, device)
    release(names, "shares: unprepare")


try:
    plane.start()
    plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    say("PASS", "control plane", f"kube-apiserver {plane.version()}")
    plane.kubectl("create", "namespace", NAMESPACE)
    start("operator", "operator", "--namespace", NAMESPACE, "--metrics-port", "0", "--health-port", "0")
    agent_args = ["agent", "--node-name", NODE, "--driver", "nvidia", "--binding-conditions", "--create-nodes"]
    agent_args += ["--cdi-dir", str(cdi_dir), "--state-dir", str(state_dir)]
    agent_args += ["--pod-resources-socket", str(pod_resources_socket)]
    agent_args += ["--nvidia-shares", "memory", "--nvidia-health-events", str(health_events)]
    for path in REPLAY:
        agent_args += ["--nvml-replay", path]
    agent = start("agent", *agent_args)

    slices = wait(lambda: published() or agent.poll() is not None, 60)
    if not isinstance(slices, list) or not slices:
        say("FAIL", "slices published", f"none for node {NODE} (see {work}/agent.log)")
        raise SystemExit
    devices = {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}
    errors = [e for s in slices for e in validate_object(s)]
    say("PASS" if not errors else "FAIL", "slices valid", render_all(errors) if errors else f"{len(slices)} slice(s)")
    unshared = sorted(n for n, d in devices.items() if not d.get("allowMultipleAllocations"))
    say("FAIL" if unshared else "PASS", "slices shared", f"not shared: {unshared}" if unshared else "memory is consumable capacity")
    driver = slices[0]["spec"]["driver"]
    kinds = sorted({d["attributes"]["type"]["string"] for d in devices.values()})
    say("INFO", "devices", ", ".join(sorted(devices)))
    for kind in ("gpu", "mig"):
        expression = f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{kind}'"
        apply(
            {
                "apiVersion": "resource.draco.dev/v1",
                "kind": "DeviceClass",
                "metadata": {"name": f"nvidia-{kind}"},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            }
        )
    if "gpu" in kinds:
        check_claim("gpu", devices)
    else:
        say("SKIP", "gpu: whole GPU", "every GPU is in MIG mode: no whole GPU is published")
    if "mig" in kinds:
        check_claim("mig", devices)
    else:
        say("SKIP", "mig: MIG device", "no GPU in MIG mode with MIG devices")
    check_shares("gpu" if "gpu" in kinds else "mig", devices)
except SystemExit:
    pass
except Exception as exc:  # report, clean up, fail
    say("FAIL", "unexpected error", repr(exc))
finally:
    for process in reversed(processes):
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
    plane.stop()
if failures:
    print(f"FAILED: {', '.join(failures)}; logs in {work}")
    sys.exit(1)
shutil.rmtree(work, ignore_errors=True)
print("ALL PASSED")
EOF
