"""`hack/gpu-check.sh` on the NVML recordings the unit tests replay: every step it would
run on a real GPU (slices, allocate and prepare, the CDI spec, attribution through the
agent's PodResources API, unprepare; two claims sharing one device by memory; an XID
from the agent's health-events file reaching the claims and pods and clearing again)
passes, with the step of each device kind there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.support import scaled
from tests.unit.agent.gpus import A100_MIG, H100

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
#: Steps every recording passes (their names may go on past the step column).
ALWAYS = (
    "control plane",
    "slices valid",
    "slices shared",
    "shares: two halves of",
    "shares: CDI specs",
    "health: XID to claim and pod",
    "health: recovery",
    "shares: unprepare",
)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("shape", "kind"), [(H100, "gpu"), (A100_MIG, "mig")], ids=["h100", "a100-mig"])
def test_gpu_check_passes_on_a_recording(shape: tuple[Path, ...], kind: str) -> None:
    env = {**os.environ, "GPU_CHECK_REPLAY": " ".join(str(p) for p in shape), "DRACO_PYTHON": sys.executable}
    run = subprocess.run(
        [str(ROOT / "hack" / "gpu-check.sh")],
        env=env, capture_output=True, text=True, timeout=scaled(600), check=False,
    )  # fmt: skip
    report = run.stdout + run.stderr[-3000:]
    assert run.returncode == 0, report
    passed = [line[6:].strip() for line in run.stdout.splitlines() if line.startswith("PASS ")]
    for step in (
        *ALWAYS,
        *(f"{kind}: {s}" for s in ("allocate + prepare", "CDI spec", "attribution", "unprepare")),
    ):
        assert any(line.startswith(step) for line in passed), f"{step} did not pass:\n{report}"
    assert not [line for line in run.stdout.splitlines() if line.startswith("FAIL")], report
    assert "ALL PASSED" in run.stdout
