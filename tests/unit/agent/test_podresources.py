"""Per-pod device attribution: which container holds which prepared device
(`attribution`), the `draco_device_allocation` metric, and the PodResources v1 server,
served on a real unix socket and asked by a gRPC client, in front of a stand-in kubelet."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from grpc import aio

from draco.agent.attribution import AttributedDevice, container_names, pod_devices
from draco.agent.drivers.fake import FakeDriver, parse_fake_config
from draco.agent.main import Agent, AgentConfig
from draco.agent.nodepods import AllocationCollector, NodePods
from draco.agent.podresources.proto import SERVICE, message, message_class
from draco.agent.podresources.server import PodResourcesServer
from draco.api.constants import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION
from draco.kube.client import Kube
from tests.unit.agent.gpus import A100_MIG, H100, NODE
from tests.unit.agent.gpus import driver as nvidia
from tests.unit.agent.support import FAKE_YAML, claim, result

POD_UID = "9f8e7d6c-0000-4000-8000-000000000001"


def pod(
    name: str = "pod",
    *,
    claims: list[dict[str, Any]],
    containers: tuple[str, ...] = ("main",),
    statuses: dict[str, str] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    annotations = {CLAIMS_ANNOTATION: json.dumps(claims)}
    if statuses:
        annotations[CLAIM_STATUSES_ANNOTATION] = json.dumps(statuses)
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": POD_UID, "annotations": annotations},
        "spec": {
            "nodeName": "node-a",
            "initContainers": [
                {"name": "setup"},
                {"name": "sidecar", "restartPolicy": "Always"},
            ],
            "containers": [{"name": c} for c in containers],
        },
        "status": {"phase": phase},
    }


def reserved(body: dict[str, Any], uid: str = POD_UID, name: str = "pod") -> dict[str, Any]:
    body["status"]["reservedFor"] = [{"resource": "pods", "name": name, "uid": uid}]
    return body


def device(name: str, request: str = "gpu") -> AttributedDevice:
    return AttributedDevice(driver="gpu.draco.dev", pool="node-a", device=name, request=request)


# ---- attribution (pure)


def test_the_kubelets_containers_sidecars_first() -> None:
    assert container_names(pod(claims=[], containers=("a", "b"))) == ["sidecar", "a", "b"]


def test_each_container_holds_the_claims_given_to_it_and_only_the_requests_it_names() -> None:
    shared = reserved(claim(result("gpu-0"), result("gpu-1", request="extra"), name="shared"))
    mine = reserved(claim(result("gpu-2"), name="mine", uid="other-uid"))
    claims = {"shared": shared, "mine": mine}
    prepared = {
        id(shared): [device("gpu-0"), device("gpu-1", request="extra")],
        id(mine): [device("gpu-2")],
    }
    body = pod(
        claims=[
            {
                "name": "s",
                "resourceClaimName": "shared",
                "containers": ["main", {"name": "other", "request": "extra"}],
            },
            {"name": "m", "resourceClaimName": "mine", "containers": ["main"]},
        ],
        containers=("main", "other"),
    )
    found = pod_devices(
        body, claims=lambda ns, name: claims.get(name), prepared=lambda c: prepared.get(id(c))
    )
    assert found is not None
    held = {c.name: [(cl.name, [d.device for d in cl.devices]) for cl in c.claims] for c in found.containers}
    assert held == {
        "sidecar": [],
        "main": [("shared", ["gpu-0", "gpu-1"]), ("mine", ["gpu-2"])],
        "other": [("shared", ["gpu-1"])],
    }


def test_claims_not_reserved_for_the_pod_or_not_prepared_here_are_left_out() -> None:
    foreign = reserved(claim(result("gpu-0"), name="foreign"), uid="someone-else")
    unprepared = reserved(claim(result("gpu-1"), name="unprepared", uid="u2"))
    claims = {"foreign": foreign, "unprepared": unprepared}
    body = pod(
        claims=[
            {"name": "a", "resourceClaimName": "foreign"},
            {"name": "b", "resourceClaimName": "unprepared"},
        ]
    )
    found = pod_devices(
        body,
        claims=lambda ns, name: claims.get(name),
        prepared=lambda c: [device("gpu-0")] if c is foreign else None,
    )
    assert found is not None and all(not c.claims for c in found.containers)


def test_a_done_pod_is_not_listed() -> None:
    body = pod(claims=[], phase="Succeeded")
    assert pod_devices(body, claims=lambda ns, name: None, prepared=lambda c: None) is None


def test_template_claims_resolve_through_the_claim_statuses_annotation() -> None:
    generated = reserved(claim(result("gpu-3"), name="pod-gpu-x2k9f"))
    generated["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "pod", "uid": POD_UID, "controller": True}
    ]
    body = pod(claims=[{"name": "gpu", "resourceClaimTemplateName": "t"}], statuses={"gpu": "pod-gpu-x2k9f"})
    found = pod_devices(
        body,
        claims=lambda ns, name: generated if name == "pod-gpu-x2k9f" else None,
        prepared=lambda c: [device("gpu-3")],
    )
    assert found is not None
    # A claim that names no container is every container's (the sidecar's too).
    assert [(c, cl.name, d.device) for c, cl, d in found.devices()] == [
        ("sidecar", "pod-gpu-x2k9f", "gpu-3"),
        ("main", "pod-gpu-x2k9f", "gpu-3"),
    ]


# ---- the agent's node: NodePods over a real preparer, the metric


def agent(tmp_path: Path, drivers: list[Any] | None = None, node: str = "node-a") -> Agent:
    drivers = drivers or [FakeDriver(s) for s in parse_fake_config(FAKE_YAML).drivers]
    config = AgentConfig(
        nodes=[node], drivers=drivers, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state"
    )
    return Agent(config, kube=cast(Kube, None))


def node_pods(tmp_path: Path) -> NodePods:
    a = agent(tmp_path)
    body = reserved(claim(result("gpu-0"), result("nic-0", request="net", driver="nic.draco.dev"), name="c1"))
    assert a.preparers["node-a"].prepare(body).ok
    a.claims[body["metadata"]["uid"]] = body
    pods = NodePods(a)
    pods.pods = {"ns/pod": pod(claims=[{"name": "c", "resourceClaimName": "c1", "containers": ["main"]}])}
    return pods


def test_the_allocation_metric_has_a_series_per_device_and_container(tmp_path: Path) -> None:
    pods = node_pods(tmp_path)
    (family,) = AllocationCollector(pods).collect()
    series = sorted(
        (s.labels["driver"], s.labels["device"], s.labels["container"], s.value) for s in family.samples
    )
    assert family.name == "draco_device_allocation"
    assert series == [("gpu.draco.dev", "gpu-0", "main", 1), ("nic.draco.dev", "nic-0", "main", 1)]
    sample = family.samples[0]
    assert {k: sample.labels[k] for k in ("node", "pool", "namespace", "pod", "claim", "uuid")} == {
        "node": "node-a", "pool": "node-a", "namespace": "ns", "pod": "pod", "claim": "c1", "uuid": "",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (H100, [("nvidia.com/gpu", "GPU-00000000-1111-2222-3333-444444444444")]),
        (A100_MIG, "nvidia.com/mig-"),
    ],
)
def test_nvidia_devices_carry_the_device_plugins_names(shape: Any, expected: Any) -> None:
    driver = nvidia(shape)
    ids = [driver.device_plugin_id(d) for d in driver.inventory(NODE).devices]
    if isinstance(expected, list):
        assert ids == expected
    else:
        assert ids and all(
            i is not None and i[0].startswith(expected) and i[1].startswith("MIG-") for i in ids
        )


# ---- the gRPC server, in front of a stand-in kubelet


class Kubelet:
    """A PodResources server with fixed answers, as the kubelet would give them."""

    def __init__(self) -> None:
        self.list = message("ListPodResourcesResponse")
        entry = self.list.pod_resources.add(name="pod", namespace="ns")
        entry.containers.add(name="sidecar")
        main = entry.containers.add(name="main", cpu_ids=[2, 3])
        main.devices.add(resource_name="example.com/nic", device_ids=["nic-7"])
        self.list.pod_resources.add(name="plain", namespace="ns").containers.add(name="app")
        self.allocatable = message("AllocatableResourcesResponse", cpu_ids=[0, 1, 2, 3])
        self.allocatable.devices.add(resource_name="example.com/nic", device_ids=["nic-7"])

    async def serve(self, socket: Path) -> aio.Server:
        import grpc

        async def list_(request: Any, context: Any) -> Any:
            return self.list

        async def get(request: Any, context: Any) -> Any:
            for entry in self.list.pod_resources:
                if (entry.namespace, entry.name) == (request.pod_namespace, request.pod_name):
                    return message("GetPodResourcesResponse", pod_resources=entry)
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )

        async def allocatable(request: Any, context: Any) -> Any:
            return self.allocatable

        server = aio.server()
        methods = {
            "List": (list_, "ListPodResourcesRequest"),
            "Get": (get, "GetPodResourcesRequest"),
            "GetAllocatableResources": (allocatable, "AllocatableResourcesRequest"),
        }
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    SERVICE,
                    {
                        name: grpc.unary_unary_rpc_method_handler(
                            fn,
                            request_deserializer=message_class(req).FromString,
                            response_serializer=lambda m: m.SerializeToString(),
                        )
                        for name, (fn, req) in methods.items()
                    },
                ),
            )
        )
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        return server


class Client:
    def __init__(self, socket: Path) -> None:
        self.channel = aio.insecure_channel(f"unix://{socket}")

    async def call(self, method: str, request: Any, response: str) -> Any:
        stub = self.channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message_class(response).FromString,
        )
        return await stub(request, timeout=10)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Client, Kubelet, NodePods]]:
    import asyncio

    pods = node_pods(tmp_path)
    kubelet = Kubelet()
    kubelet_socket = tmp_path / "kubelet.sock"
    stand_in = await kubelet.serve(kubelet_socket)
    socket = tmp_path / "draco" / "podresources.sock"
    server = PodResourcesServer(pods, socket=socket, kubelet_socket=kubelet_socket)
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.serving.wait(), 30)
    client = Client(socket)
    yield client, kubelet, pods
    await client.channel.close()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await stand_in.stop(None)
    assert not socket.exists()


def containers_of(response: Any, name: str) -> dict[str, Any]:
    (entry,) = [p for p in response.pod_resources if p.name == name]
    return {c.name: c for c in entry.containers}


async def test_list_is_the_kubelets_answer_with_dracos_devices_added(
    served: tuple[Client, Kubelet, NodePods],
) -> None:
    client, _kubelet, _pods = served
    answer = await client.call("List", message("ListPodResourcesRequest"), "ListPodResourcesResponse")
    assert sorted(p.name for p in answer.pod_resources) == ["plain", "pod"]
    main = containers_of(answer, "pod")["main"]
    assert list(main.cpu_ids) == [2, 3]  # the kubelet's part, untouched
    assert [(d.resource_name, list(d.device_ids)) for d in main.devices] == [("example.com/nic", ["nic-7"])]
    (dynamic,) = main.dynamic_resources
    assert (dynamic.claim_name, dynamic.claim_namespace) == ("c1", "ns")
    resources = [
        (r.driver_name, r.pool_name, r.device_name, r.HasField("share_id")) for r in dynamic.claim_resources
    ]
    assert resources == [
        ("gpu.draco.dev", "node-a", "gpu-0", False),
        ("nic.draco.dev", "node-a", "nic-0", False),
    ]
    cdi = [d.name for d in dynamic.claim_resources[0].cdi_devices]
    assert cdi[0].startswith("gpu.draco.dev/gpu=") and cdi[0].endswith("-gpu-0")
    assert not containers_of(answer, "pod")["sidecar"].dynamic_resources  # given nothing


async def test_get_and_allocatable(served: tuple[Client, Kubelet, NodePods]) -> None:
    client, _kubelet, pods = served
    got = await client.call(
        "Get",
        message("GetPodResourcesRequest", pod_name="pod", pod_namespace="ns"),
        "GetPodResourcesResponse",
    )
    assert [d.claim_name for c in got.pod_resources.containers for d in c.dynamic_resources] == ["c1"]
    with pytest.raises(aio.AioRpcError) as missing:
        await client.call(
            "Get",
            message("GetPodResourcesRequest", pod_name="gone", pod_namespace="ns"),
            "GetPodResourcesResponse",
        )
    assert missing.value.details() == "pod gone in namespace ns not found"
    allocatable = await client.call(
        "GetAllocatableResources", message("AllocatableResourcesRequest"), "AllocatableResourcesResponse"
    )
    assert list(allocatable.cpu_ids) == [0, 1, 2, 3]
    assert pods.allocatable() == []  # the fake driver names no device-plugin resource


async def test_without_a_kubelet_the_nodes_pods_are_listed(tmp_path: Path) -> None:
    import asyncio

    pods = node_pods(tmp_path)
    socket = tmp_path / "podresources.sock"
    server = PodResourcesServer(pods, socket=socket, kubelet_socket=tmp_path / "no-kubelet.sock")
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.serving.wait(), 30)
    client = Client(socket)
    try:
        answer = await client.call("List", message("ListPodResourcesRequest"), "ListPodResourcesResponse")
        assert list(containers_of(answer, "pod")) == ["sidecar", "main"]
        assert [d.claim_name for d in containers_of(answer, "pod")["main"].dynamic_resources] == ["c1"]
    finally:
        await client.channel.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_gpu_metrics_carry_the_pod_in_the_device_plugin_entries(tmp_path: Path) -> None:
    """NVIDIA's devices also appear in `devices` as nvidia.com/gpu with the GPU's UUID:
    the entries dcgm-exporter maps a GPU's metrics to a pod with."""
    from draco.agent.podresources.proto import pods_response

    a = agent(tmp_path, drivers=[nvidia(H100)], node=NODE)
    body = reserved(claim(result("gpu-0", driver="gpu.nvidia.draco.dev", pool=NODE), name="c1"))
    assert a.preparers[NODE].prepare(body).ok
    a.claims[body["metadata"]["uid"]] = body
    pods = NodePods(a)
    pods.pods = {"ns/pod": pod(claims=[{"name": "c", "resourceClaimName": "c1", "containers": ["main"]}])}
    answer = pods_response(pods.devices(), None)
    main = containers_of(answer, "pod")["main"]
    assert [(d.resource_name, list(d.device_ids)) for d in main.devices] == [
        ("nvidia.com/gpu", ["GPU-00000000-1111-2222-3333-444444444444"])
    ]
    assert pods.allocatable() == [("nvidia.com/gpu", "GPU-00000000-1111-2222-3333-444444444444")]


def test_the_agent_and_the_operator_load_no_grpc_until_asked() -> None:
    code = "import sys, draco.agent.cli, draco.operator.root, draco.webhook.cli; print('grpc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_shared_devices_share_id_is_sent() -> None:
    from draco.agent.attribution import AttributedClaim, ContainerDevices, PodDevices
    from draco.agent.podresources.proto import pods_response

    shared = AttributedDevice(driver="d", pool="p", device="gpu-0", request="r", share_id="1a2b")
    pod_ = PodDevices(
        "ns", "pod", POD_UID, (ContainerDevices("main", (AttributedClaim("ns", "c", (shared,)),)),)
    )
    wire = pods_response([pod_], None).SerializeToString()
    (resource,) = (
        message_class("ListPodResourcesResponse")
        .FromString(wire)
        .pod_resources[0]
        .containers[0]
        .dynamic_resources[0]
        .claim_resources
    )
    assert resource.HasField("share_id") and resource.share_id == "1a2b"


async def test_a_cancelled_server_stops_whole_before_it_returns(
    served: tuple[Client, Kubelet, NodePods], tmp_path: Path
) -> None:
    """Cancelling the server's task (the agent stopping) stops gRPC, closes the channel to
    the kubelet and removes the socket before the task ends. gRPC's own shutdown future is
    cancelled along with `wait_for_termination`, so waiting on it made `stop` raise at once:
    the channel stayed open and the socket stayed until gRPC's core removed it, after the
    agent had gone (a test saw it still there)."""
    import asyncio

    _client, _kubelet, pods = served
    socket = tmp_path / "second.sock"
    server = PodResourcesServer(pods, socket=socket, kubelet_socket=tmp_path / "kubelet.sock")
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.serving.wait(), 30)
    second = Client(socket)
    try:
        await second.call("List", message("ListPodResourcesRequest"), "ListPodResourcesResponse")
    finally:
        await second.channel.close()
    assert server._channel is not None  # the kubelet was asked
    task.cancel()
    (outcome,) = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(outcome, asyncio.CancelledError)
    assert not socket.exists()
    assert server._channel is None
