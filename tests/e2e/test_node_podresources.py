"""Per-pod device attribution on the real node: the agent's PodResources socket, asked
with the kubelet's own client package (the one dcgm-exporter builds its pod mapping with,
`hack/podresources-client`), names the pods of draco's claims with their devices.

The agent runs the NVIDIA driver on the H100 recording (as `test_node_nvidia` does) with
`--pod-resources-socket`, in front of the test node's kubelet's socket. A pod shaped like
NVIDIA's gpu-test2 (two containers sharing one GPU) and a pod without claims run; then:

- `List` has both pods (the kubelet's answer passed on), and each container of the GPU pod
  has the claim as a `DynamicResource` (driver, pool, device, CDI devices) and the GPU as
  a device-plugin entry `nvidia.com/gpu` with its UUID; the mapping dcgm-exporter makes
  from those entries gives the GPU's metrics that pod and namespace;
- `Get` of the pod says the same, `GetAllocatableResources` lists the GPU;
- everything the kubelet's own socket lists is in the agent's answer;
- the agent's metrics have `draco_device_allocation` for each container with the UUID.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.controlplane import free_port
from draco.tools.dev.node import IMAGE
from tests.e2e.node_support import NodeTest
from tests.e2e.support import wait_for
from tests.e2e.test_node_nvidia import UUID, start_nvidia_agent, world  # noqa: F401 (the fixture)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def client() -> Path:
    """The PodResources client built from the Go module proxy (cached)."""
    out = subprocess.run(
        [str(ROOT / "hack" / "podresources-client.sh")],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def ask(client: Path, socket: Path, pod: str | None = None) -> dict[str, Any]:
    args = [str(client), "-socket", str(socket), *(("-pod", pod) if pod else ())]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def pod_body(
    namespace: str,
    name: str,
    containers: tuple[str, ...],
    claims: list[dict[str, Any]] | None,
    *,
    node: str | None = None,
) -> str:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {"name": c, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
            for c in containers
        ],
    }
    if claims is not None:
        metadata["annotations"] = {CLAIMS_ANNOTATION: json.dumps(claims)}
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    if node is not None:
        # Bound by hand: the session's other Nodes (objects only) would take it otherwise.
        spec["nodeName"] = node
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})


def containers(answer: dict[str, Any], namespace: str, name: str) -> dict[str, dict[str, Any]]:
    (entry,) = [p for p in answer["podResources"] if (p.get("namespace"), p["name"]) == (namespace, name)]
    return {c["name"]: c for c in entry.get("containers") or []}


def test_the_kubelets_podresources_client_sees_the_pods_of_dracos_claims(
    world: NodeTest,  # noqa: F811 (test_node_nvidia's fixture)
    client: Path,
) -> None:
    socket = world.tmp_path / "podresources.sock"
    assert world.node.workdir is not None
    kubelet_socket = world.node.workdir / "kubelet" / "pod-resources" / "kubelet.sock"
    metrics_port = free_port()
    start_nvidia_agent(
        world,
        "--pod-resources-socket", str(socket),
        "--kubelet-pod-resources-socket", str(kubelet_socket),
        "--metrics-port", str(metrics_port),
    )  # fmt: skip
    world.kube.kubectl(
        "apply", "-f", "-", input=(ROOT / "examples" / "nvidia" / "deviceclasses.yaml").read_text()
    )
    template = yaml.safe_load_all((ROOT / "examples" / "nvidia" / "gpu-test2.yaml").read_text())
    (rct,) = [d for d in template if d and d["kind"] == "ResourceClaimTemplate"]
    rct["metadata"]["namespace"] = world.namespace
    world.kube.kubectl("apply", "-f", "-", input=json.dumps(rct))
    world.start_operator()
    ns = world.namespace
    claims = [{"name": "shared-gpu", "resourceClaimTemplateName": "single-gpu"}]
    world.kube.kubectl("create", "-f", "-", input=pod_body(ns, "pod", ("ctr0", "ctr1"), claims))
    world.kube.kubectl("create", "-f", "-", input=pod_body(ns, "plain", ("app",), None, node=world.node.name))
    world.wait_running("pod")
    world.wait_running("plain")
    (claim,) = world.claims()
    claim_name = claim["metadata"]["name"]

    def attributed() -> dict[str, Any] | None:
        answer = ask(client, socket, f"{ns}/pod")
        return answer if answer["gpus"].get(UUID, {}).get("pod") == "pod" else None

    answer = wait_for(attributed, timeout=60, what="the agent's PodResources to name the GPU's pod")
    assert isinstance(answer, dict)

    # dcgm-exporter's mapping: the GPU's metrics get this pod (the last container listed).
    assert answer["gpus"][UUID] == {"pod": "pod", "namespace": ns, "container": "ctr1"}
    listed = answer["list"]
    for name, container in containers(listed, ns, "pod").items():
        assert container["devices"] == [{"resourceName": "nvidia.com/gpu", "deviceIds": [UUID]}], name
        (dynamic,) = container["dynamicResources"]
        assert (dynamic["claimName"], dynamic["claimNamespace"]) == (claim_name, ns)
        (resource,) = dynamic["claimResources"]
        assert (resource["driverName"], resource["poolName"], resource["deviceName"]) == (
            "gpu.nvidia.com", world.node.name, "gpu-0",
        )  # fmt: skip
        assert [d["name"].split("=")[0] for d in resource["cdiDevices"]] == ["gpu.nvidia.com/gpu"] * 2
    got = {"podResources": [answer["get"]["podResources"]]}
    assert containers(got, ns, "pod") == containers(listed, ns, "pod")
    assert list(containers(listed, ns, "plain")) == ["app"]  # the kubelet's pod, without devices
    assert {"resourceName": "nvidia.com/gpu", "deviceIds": [UUID]} in answer["allocatable"]["devices"]

    # Everything the kubelet's own socket lists is in the agent's answer.
    kubelets = ask(client, kubelet_socket)["list"]
    for pod in kubelets.get("podResources") or []:
        theirs = {c["name"] for c in pod.get("containers") or []}
        assert theirs <= set(containers(listed, pod.get("namespace"), pod["name"])), pod

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    lines = [line for line in text.splitlines() if line.startswith("draco_device_allocation{")]
    for ctr in ("ctr0", "ctr1"):
        assert any(
            f'container="{ctr}"' in line
            and f'uuid="{UUID}"' in line
            and 'pod="pod"' in line
            and f'claim="{claim_name}"' in line
            and line.endswith(" 1.0")
            for line in lines
        ), lines

    world.delete_pod("pod")
    wait_for(lambda: not world.claims(), timeout=90, what="the generated claim to be deleted")
    gone = ask(client, socket)
    assert UUID not in gone["gpus"]
