"""What the agent's NRI handler gives a container: claims per container, checks, CDI edits."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from draco.agent.drivers.fake import FakeDriver, parse_fake_config
from draco.agent.injection import ClaimInjector, adjustment_from_cdi, claims_for_container
from draco.agent.metadata import first_known
from draco.agent.nri import Container, DeviceNode, Mount, PodSandbox
from draco.agent.prepare import NodePreparer
from draco.errors import AgentError
from draco.scheduling.podclaims import PodClaim
from tests.unit.agent.support import FAKE_YAML, claim, result

POD_UID = "pod-uid-1"
METADATA = (
    "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/claim-1/gpu/gpu.draco.dev-metadata.json"
)


def test_claims_for_container_follow_the_annotation() -> None:
    everyone = PodClaim(name="a", resource_claim_name="a")
    only_main = PodClaim(name="b", resource_claim_name="b", containers=("main",))
    nobody = PodClaim(name="c", resource_claim_name="c", containers=())
    assert claims_for_container([everyone, only_main, nobody], "main") == [everyone, only_main]
    assert claims_for_container([everyone, only_main, nobody], "sidecar") == [everyone]


def test_cdi_edits_become_one_adjustment() -> None:
    null = os.stat("/dev/null")
    adjust = adjustment_from_cdi(
        [
            {"env": ["A=1", "B=x=y"], "deviceNodes": [{"path": "/dev/fake0", "hostPath": "/dev/null"}]},
            {
                "env": ["A=2"],
                "mounts": [
                    {"hostPath": "/h/meta.json", "containerPath": "/c/meta.json", "options": ["ro", "bind"]}
                ],
                "deviceNodes": [{"path": "/dev/blk", "type": "b", "major": 7, "minor": 1, "fileMode": 0o640}],
                "hooks": [{"hookName": "createContainer", "path": "/bin/hook", "args": ["hook"]}],
            },
        ]
    )
    assert adjust.env == (("B", "x=y"), ("A", "2"))
    assert adjust.devices == (
        DeviceNode(
            path="/dev/fake0",
            type="c",
            major=os.major(null.st_rdev),
            minor=os.minor(null.st_rdev),
            file_mode=0o666,
        ),
        DeviceNode(path="/dev/blk", type="b", major=7, minor=1, file_mode=0o640),
    )
    assert adjust.mounts == (
        Mount(destination="/c/meta.json", source="/h/meta.json", options=("ro", "bind")),
    )
    assert [(stage, hook.path) for stage, hook in adjust.hooks] == [("create_container", "/bin/hook")]


def test_a_device_node_missing_on_the_host_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="not on the node"):
        adjustment_from_cdi([{"deviceNodes": [{"path": str(tmp_path / "nothing")}]}])
    with pytest.raises(AgentError, match="not a device node"):
        adjustment_from_cdi([{"deviceNodes": [{"path": str(tmp_path)}]}])


def test_mount_without_bind_option_gets_one() -> None:
    (mount,) = adjustment_from_cdi([{"mounts": [{"hostPath": "/a", "containerPath": "/b"}]}]).mounts
    assert mount.options == ("bind",)


# ---- the handler against a real preparer


def reserved(obj: dict[str, Any], *uids: str) -> dict[str, Any]:
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": uid} for uid in uids]
    return obj


class Claims:
    def __init__(self, *claims: dict[str, Any]) -> None:
        self.by_key = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in claims}

    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.by_key.get(f"{namespace}/{name}")


def injector(tmp_path: Path, claims: Claims, *, wait: float = 0.2) -> ClaimInjector:
    drivers = {d.name: d for d in (FakeDriver(s) for s in parse_fake_config(FAKE_YAML).drivers)}
    preparer = NodePreparer(
        node="node-a", cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers=drivers
    )
    synced = asyncio.Event()
    synced.set()
    return ClaimInjector(preparer=preparer, lookup=claims, synced=synced, wait_seconds=wait)


def pod(annotation: list[dict[str, Any]] | None, **more: str) -> PodSandbox:
    annotations = dict(more)
    if annotation is not None:
        annotations["resource.draco.dev/claims"] = json.dumps(annotation)
    return PodSandbox(id="sb", name="p", namespace="ns", uid=POD_UID, annotations=annotations)


def read_metadata(path: str) -> dict[str, Any]:
    return first_known(Path(path).read_text())


def container(name: str = "main") -> Container:
    return Container(id=f"c-{name}", pod_sandbox_id="sb", name=name)


async def test_prepared_claim_is_injected_into_the_containers_it_is_given_to(tmp_path: Path) -> None:
    obj = reserved(claim(result("gpu-0")), POD_UID)
    inj = injector(tmp_path, Claims(obj))
    assert inj.preparer.prepare(obj).ok
    p = pod([{"name": "gpu", "resourceClaimName": "claim-1", "containers": ["main"]}])
    adjust = await inj.create_container(p, container("main"))
    assert adjust is not None
    assert adjust.env == (("DRACO_FAKE_DEVICE_GPU_0", "gpu-0"),)
    assert [d.path for d in adjust.devices] == ["/dev/null"]
    (mount,) = adjust.mounts
    assert mount.destination == METADATA
    assert read_metadata(mount.source)["requests"][0]["devices"][0]["name"] == "gpu-0"
    assert await inj.create_container(p, container("sidecar")) is None
    assert await inj.create_container(pod(None), container("main")) is None


async def test_template_claims_resolve_through_the_claim_statuses_annotation(tmp_path: Path) -> None:
    obj = reserved(claim(result("gpu-1"), name="p-gpu-x7k2q", pod_claim_name="gpu"), POD_UID)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": POD_UID, "controller": True}
    ]
    inj = injector(tmp_path, Claims(obj))
    assert inj.preparer.prepare(obj).ok
    p = pod(
        [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
        **{"resource.draco.dev/claim-statuses": json.dumps({"gpu": "p-gpu-x7k2q"})},
    )
    adjust = await inj.create_container(p, container())
    assert adjust is not None and ("DRACO_FAKE_DEVICE_GPU_1", "gpu-1") in adjust.env
    assert adjust.mounts[0].destination.endswith(
        "/resourceclaimtemplates/gpu/gpu/gpu.draco.dev-metadata.json"
    )


async def test_a_claim_of_someone_else_fails_the_container(tmp_path: Path) -> None:
    obj = reserved(claim(result("gpu-0")), "another-pod")
    inj = injector(tmp_path, Claims(obj))
    assert inj.preparer.prepare(obj).ok
    with pytest.raises(AgentError, match="not reserved for this pod"):
        await inj.create_container(pod([{"name": "gpu", "resourceClaimName": "claim-1"}]), container())


async def test_an_unprepared_claim_fails_the_container_after_a_short_wait(tmp_path: Path) -> None:
    obj = reserved(claim(result("gpu-0")), POD_UID)
    inj = injector(tmp_path, Claims(obj), wait=0.2)
    with pytest.raises(AgentError, match="not prepared on node node-a yet"):
        await inj.create_container(pod([{"name": "gpu", "resourceClaimName": "claim-1"}]), container())


async def test_a_prepare_finishing_during_the_wait_is_injected(tmp_path: Path) -> None:
    obj = reserved(claim(result("gpu-0")), POD_UID)
    inj = injector(tmp_path, Claims(obj), wait=5)
    asyncio.get_running_loop().call_later(0.1, inj.preparer.prepare, obj)
    adjust = await inj.create_container(pod([{"name": "gpu", "resourceClaimName": "claim-1"}]), container())
    assert adjust is not None and adjust.env


async def test_missing_claims_and_claims_of_other_nodes(tmp_path: Path) -> None:
    elsewhere = reserved(claim(result("gpu-0", pool="node-b")), POD_UID)
    inj = injector(tmp_path, Claims(elsewhere))
    # Allocated from another node's pool: nothing for this agent to add.
    assert (
        await inj.create_container(pod([{"name": "g", "resourceClaimName": "claim-1"}]), container()) is None
    )
    with pytest.raises(AgentError, match="claim ns/absent does not exist"):
        await inj.create_container(pod([{"name": "g", "resourceClaimName": "absent"}]), container())


async def test_a_broken_annotation_fails_the_container(tmp_path: Path) -> None:
    inj = injector(tmp_path, Claims())
    broken = PodSandbox(
        id="sb", name="p", namespace="ns", uid=POD_UID, annotations={"resource.draco.dev/claims": "{"}
    )
    with pytest.raises(AgentError, match="pod ns/p"):
        await inj.create_container(broken, container())


def _env_names(adjust: Any) -> set[str]:
    return {name for name, _ in adjust.env} if adjust is not None else set()


async def test_a_container_named_with_a_request_gets_only_that_requests_devices(tmp_path: Path) -> None:
    obj = reserved(claim(result("gpu-0", request="big"), result("gpu-1", request="small/any")), POD_UID)
    inj = injector(tmp_path, Claims(obj))
    assert inj.preparer.prepare(obj).ok
    given = ["whole", {"name": "a", "request": "big"}, {"name": "b", "request": "small"}]
    p = pod([{"name": "gpu", "resourceClaimName": "claim-1", "containers": given}])
    assert _env_names(await inj.create_container(p, container("a"))) == {"DRACO_FAKE_DEVICE_GPU_0"}
    assert _env_names(await inj.create_container(p, container("b"))) == {"DRACO_FAKE_DEVICE_GPU_1"}
    assert _env_names(await inj.create_container(p, container("whole"))) == {
        "DRACO_FAKE_DEVICE_GPU_0",
        "DRACO_FAKE_DEVICE_GPU_1",
    }
    assert await inj.create_container(p, container("other")) is None


async def test_the_special_claim_gives_each_container_its_mapped_requests(tmp_path: Path) -> None:
    obj = reserved(
        claim(
            result("gpu-0", request="container-0-request-0"), result("gpu-1", request="container-1-request-0")
        ),
        POD_UID,
    )
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": POD_UID, "controller": True}
    ]
    obj["metadata"]["annotations"] = {"resource.draco.dev/extended-resource-claim": "true"}
    inj = injector(tmp_path, Claims(obj))
    assert inj.preparer.prepare(obj).ok
    record = {
        "resourceClaimName": "claim-1",
        "requestMappings": [
            {
                "containerName": "init",
                "resourceName": "example.com/gpu",
                "requestName": "container-0-request-0",
            },
            {
                "containerName": "init",
                "resourceName": "example.com/gpu",
                "requestName": "container-1-request-0",
            },
            {"containerName": "a", "resourceName": "example.com/gpu", "requestName": "container-1-request-0"},
        ],
    }
    p = pod(None, **{"resource.draco.dev/extended-resource-claim-status": json.dumps(record)})
    assert _env_names(await inj.create_container(p, container("a"))) == {"DRACO_FAKE_DEVICE_GPU_1"}
    assert _env_names(await inj.create_container(p, container("init"))) == {
        "DRACO_FAKE_DEVICE_GPU_0",
        "DRACO_FAKE_DEVICE_GPU_1",
    }
    assert await inj.create_container(p, container("b")) is None
    # A special claim the pod does not control is refused.
    obj["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    with pytest.raises(AgentError, match="not generated for this pod"):
        await inj.create_container(p, container("a"))
