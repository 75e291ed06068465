"""`--nvidia-compat`: NVIDIA's quickstart claims allocate on the replayed GPUs and prepare.

The claims and classes are `examples/nvidia/` (NVIDIA's quickstart shapes with the DRA
objects' apiVersion changed to resource.draco.dev/v1); the slices are what the agent
publishes for the recorded H100 and the A100 in MIG mode under driver name gpu.nvidia.com.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.agent.drivers.nvidia import NVIDIA_COMPAT_DRIVER_NAME, NvidiaDriver, NvidiaOptions
from draco.agent.prepare import INVALID_CONFIG_REASON, NodePreparer
from draco.allocator import Allocated, Inventory, Node, Unfit, allocate
from tests.unit.agent.gpus import A100_MIG, H100, NODE, HostTools, driver, published_slices
from tests.unit.agent.support import validate_cdi

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "nvidia"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


CLASSES = documents("deviceclasses.yaml")


def claims_of(name: str) -> list[dict[str, Any]]:
    """The claims a quickstart manifest makes: one per pod of a template, one per ResourceClaim."""
    docs = documents(name)
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    plain = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaim"}
    out: list[dict[str, Any]] = []
    for doc in docs:
        pod = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc.get("spec") or {}
        if doc["kind"] not in ("Pod", "Deployment"):
            continue
        for ref in pod.get("resourceClaims") or []:
            if "resourceClaimTemplateName" in ref:
                spec = templates[ref["resourceClaimTemplateName"]]["spec"]["spec"]
                claim_name = f"{doc['metadata']['name']}-{ref['name']}"
            else:
                spec = plain[ref["resourceClaimName"]]["spec"]
                claim_name = ref["resourceClaimName"]
            if any(c["metadata"]["name"] == claim_name for c in out):
                continue
            out.append(
                {
                    "apiVersion": "resource.draco.dev/v1",
                    "kind": "ResourceClaim",
                    "metadata": {
                        "name": claim_name,
                        "namespace": doc["metadata"]["namespace"],
                        "uid": f"0b0c5d3e-1111-4222-8333-{len(out):012d}",
                    },
                    "spec": spec,
                }
            )
    return out


def allocate_on(drv: NvidiaDriver, claims: Sequence[dict[str, Any]]) -> Allocated | Unfit:
    inventory = Inventory.build(classes=CLASSES, slices=published_slices(drv))
    return allocate(inventory=inventory, node=Node(NODE), claims=list(claims))


def with_allocation(claim: dict[str, Any], out: Allocated) -> dict[str, Any]:
    key = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
    return {**claim, "status": {"allocation": out.results.json()[key]}}


def prepare(tmp_path: Path, drv: NvidiaDriver, claim: dict[str, Any]) -> list[dict[str, Any]]:
    """Prepare `claim` on the node; the CDI devices of its spec (metadata device left out)."""
    p = NodePreparer(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers={drv.name: drv}
    )
    outcome = p.prepare(claim)
    assert outcome.ok, [d.error for d in outcome.devices]
    uid = claim["metadata"]["uid"]
    spec = json.loads((tmp_path / "cdi" / f"draco-{drv.name}-{uid}.json").read_text())
    validate_cdi(spec)
    assert spec["kind"] == "gpu.nvidia.com/gpu"
    return [d for d in spec["devices"] if f"{uid}-metadata-" not in d["name"]]


def compat(shape: Sequence[Path], tmp_path: Path) -> NvidiaDriver:
    return driver(shape, tmp_path=tmp_path, name=NVIDIA_COMPAT_DRIVER_NAME, binding_conditions=True)


def test_the_compat_driver_publishes_under_nvidias_name_and_attributes(tmp_path: Path) -> None:
    (gpu,) = compat(H100, tmp_path).inventory(NODE).devices
    for name in (
        "type",
        "uuid",
        "index",
        "minor",
        "productName",
        "brand",
        "architecture",
        "driverVersion",
        "cudaDriverVersion",
        "cudaComputeCapability",
        "pcieBusID",
    ):
        assert name in gpu.attributes
    (slice_,) = [s for s in published_slices(compat(H100, tmp_path)) if s["spec"].get("devices")]
    assert slice_["spec"]["driver"] == "gpu.nvidia.com"


@pytest.mark.parametrize("manifest", ["gpu-test2.yaml", "gpu-test3.yaml"])
def test_one_gpu_shared_by_containers_or_pods_allocates_and_prepares(tmp_path: Path, manifest: str) -> None:
    drv = compat(H100, tmp_path)
    (claim,) = claims_of(manifest)
    out = allocate_on(drv, [claim])
    assert isinstance(out, Allocated), out
    (device,) = prepare(tmp_path, drv, with_allocation(claim, out))
    assert device["containerEdits"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=GPU-00000000-1111-2222-3333-444444444444"
    ]


def test_gpu_test1_gives_each_pod_a_gpu_of_its_own(tmp_path: Path) -> None:
    drv = compat(H100, tmp_path)
    first, second = claims_of("gpu-test1.yaml")
    out = allocate_on(drv, [first])
    assert isinstance(out, Allocated), out
    prepare(tmp_path, drv, with_allocation(first, out))
    # The recorded machine has one H100: the second pod's GPU is not there.
    assert isinstance(allocate_on(drv, [first, second]), Unfit)


def test_gpu_test4_gets_four_mig_devices_of_one_gpu(tmp_path: Path) -> None:
    drv = compat(A100_MIG, tmp_path)
    (claim,) = claims_of("gpu-test4.yaml")
    out = allocate_on(drv, [claim])
    assert isinstance(out, Allocated), out
    results = out.results.json()[f"gpu-test4/{claim['metadata']['name']}"]["devices"]["results"]
    assert {r["request"]: r["device"] for r in results} == {
        "mig-1g-5gb-0": "gpu-0-mig-1g5gb-19-2",
        "mig-1g-5gb-1": "gpu-0-mig-1g5gb-19-3",
        "mig-2g-10gb": "gpu-0-mig-2g10gb-14-0",
        "mig-3g-20gb": "gpu-0-mig-3g20gb-9-4",
    }
    devices = prepare(tmp_path, drv, with_allocation(claim, out))
    visible = sorted(e for d in devices for e in d["containerEdits"]["env"])
    assert visible == [f"NVIDIA_VISIBLE_DEVICES=MIG-bbbbbbbb-0000-1111-2222-44444444440{i}" for i in range(4)]


def gpu_test5_claim(sharing: dict[str, Any]) -> dict[str, Any]:
    """One request of NVIDIA's quickstart gpu-test5 with its GpuConfig."""
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "shared",
            "namespace": "gpu-test5",
            "uid": "0b0c5d3e-1111-4222-8333-555555555555",
        },
        "spec": {
            "devices": {
                "requests": [{"name": "shared-gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
                "config": [
                    {
                        "requests": ["shared-gpu"],
                        "opaque": {
                            "driver": "gpu.nvidia.com",
                            "parameters": {
                                "apiVersion": "resource.nvidia.com/v1beta1",
                                "kind": "GpuConfig",
                                "sharing": sharing,
                            },
                        },
                    }
                ],
            }
        },
    }


@pytest.mark.parametrize(
    ("sharing", "programs", "error"),
    [
        ({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}, (), None),
        ({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}, ("nvidia-smi",), None),
        (
            {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
            (),
            "interval Long cannot be applied here: NVML has no call for it and nvidia-smi",
        ),
        (
            {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
            (),
            "sharing strategy MPS cannot be applied here: nvidia-cuda-mps-control",
        ),
    ],
)
def test_gpu_configs_are_applied_or_the_claim_fails_with_the_reason(
    tmp_path: Path, sharing: dict[str, Any], programs: tuple[str, ...], error: str | None
) -> None:
    tools = HostTools(programs=programs)
    drv = driver(
        H100,
        tmp_path=tmp_path,
        name=NVIDIA_COMPAT_DRIVER_NAME,
        binding_conditions=True,
        options=NvidiaOptions(tools=tools),
    )
    claim = gpu_test5_claim(sharing)
    out = allocate_on(drv, [claim])
    assert isinstance(out, Allocated), out
    allocated = with_allocation(claim, out)
    if error is None:
        prepare(tmp_path, drv, allocated)
        interval = sharing["timeSlicingConfig"]["interval"]
        applied = [argv for argv, _, _ in tools.ran]
        uuid = "GPU-00000000-1111-2222-3333-444444444444"
        want = (
            []
            if interval == "Default"
            else [["/usr/bin/nvidia-smi", "compute-policy", "-i", uuid, "--set-timeslice", "3"]]
        )
        assert applied == want
        return
    p = NodePreparer(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers={drv.name: drv}
    )
    (failed,) = p.prepare(allocated).devices
    assert failed.reason == INVALID_CONFIG_REASON
    assert failed.error is not None and error in failed.error
    assert not tools.ran
