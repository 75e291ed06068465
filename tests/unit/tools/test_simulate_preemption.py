"""`draco simulate` shows what the operator would preempt for a pod that fits nowhere: the
node, each victim and why (its priority, the PodDisruptionBudget it violates), or why
nothing is preempted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools import simulate

DRIVER = "gpu.example.com"


def cluster(*, preemptor_priority: int, policy: str = "PreemptLowerPriority") -> list[dict[str, object]]:
    """One node of one GPU, held by the claim of a bound pod of priority 1 (a PDB covers
    it), and a gated pod asking for one GPU."""

    def claim(name: str, allocated_for: str | None) -> dict[str, object]:
        body: dict[str, object] = {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        }
        if allocated_for is not None:
            body["status"] = {
                "allocation": {
                    "devices": {
                        "results": [{"request": "gpu", "driver": DRIVER, "pool": "n", "device": "gpu-0"}]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": allocated_for, "uid": f"uid-{allocated_for}"}],
            }
        return body

    def pod(name: str, priority: int, **spec: object) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "labels": {"app": name},
                "annotations": {
                    CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimName": f"{name}-gpu"}])
                },
            },
            "spec": {"priority": priority, "containers": [{"name": "c", "image": "x"}], **spec},
        }

    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}},
        {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
        {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "n"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "n",
                "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        },
        claim("low-gpu", "low"),
        claim("high-gpu", None),
        pod("low", 1, nodeName="n"),
        pod(
            "high",
            preemptor_priority,
            preemptionPolicy=policy,
            schedulingGates=[{"name": SCHEDULING_GATE}],
        ),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-low", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "low"}}},
            "status": {"disruptionsAllowed": 0},
        },
    ]


def run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, objects: list[dict[str, object]]
) -> tuple[int, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    code = simulate.main(["-f", str(path), "--pod", "ns/high"])
    return code, capsys.readouterr().err


def test_simulate_shows_the_victims_and_why(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = run(capsys, tmp_path, cluster(preemptor_priority=100))
    assert code == simulate.EXIT_UNFIT, err
    assert "pod ns/high: does not fit" in err
    assert "would preempt 1 pod(s) on node n:" in err
    assert (
        "  ns/low: priority 1 is lower than the preemptor's 100; violates PodDisruptionBudget ns/keep-low"
        in err
    )


def test_simulate_says_why_nothing_is_preempted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _, err = run(capsys, tmp_path, cluster(preemptor_priority=100, policy="Never"))
    assert "preemption: not eligible due to preemptionPolicy=Never" in err
    assert "would preempt" not in err
    _, err = run(capsys, tmp_path, cluster(preemptor_priority=1))  # equal priority: nobody to evict
    assert "would preempt" not in err and "does not fit" in err
