"""`hack/gpu-check.sh` on the NVML recordings the unit tests replay: every step it would
run on a real GPU (slices, allocate and prepare, the CDI spec, attribution through the
agent's PodResources API, unprepare) passes, with the step of each device kind there."""

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


@pytest.mark.parametrize(("shape", "kind"), [(H100, "gpu"), (A100_MIG, "mig")], ids=["h100", "a100-mig"])
def test_gpu_check_passes_on_a_recording(shape: tuple[Path, ...], kind: str) -> None:
    env = {**os.environ, "GPU_CHECK_REPLAY": " ".join(str(p) for p in shape), "DRACO_PYTHON": sys.executable}
    run = subprocess.run(
        [str(ROOT / "hack" / "gpu-check.sh")],
        env=env, capture_output=True, text=True, timeout=scaled(300), check=False,
    )  # fmt: skip
    report = run.stdout + run.stderr[-3000:]
    assert run.returncode == 0, report
    steps = {line[6:34].strip(): line[:5].strip() for line in run.stdout.splitlines() if line[:5].strip()}
    for step in ("allocate + prepare", "CDI spec", "attribution", "unprepare"):
        assert steps.get(f"{kind}: {step}") == "PASS", report
    assert "ALL PASSED" in run.stdout
