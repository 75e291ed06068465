"""The Dockerfile's install steps, run without a container engine (none on the CI
machines): the wheel built from this tree, installed into a clean virtualenv with its
dependencies from the package index, and `draco --version` run from it. The Dockerfile is
read to check it still runs these same steps, as a non-root user, on a pinned base."""

from __future__ import annotations

import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import draco

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_the_dockerfile_is_multi_stage_non_root_and_pinned() -> None:
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert base is not None
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base.group(1)), base.group(1)
    stages = re.findall(r"^FROM \S+(?: AS (\w+))?$", DOCKERFILE, re.MULTILINE)
    assert stages[0] == "build" and stages[-1] == "", stages
    final = DOCKERFILE[DOCKERFILE.rindex("\nFROM ") :]
    assert "USER 65532:65532" in final and "COPY --from=build /opt/draco /opt/draco" in final
    for step in (
        "python -m pip wheel --no-deps --wheel-dir /wheels .",
        "python -m venv /opt/draco",
        '/opt/draco/bin/pip install "${wheel}${EXTRAS:+[$EXTRAS]}"',
        "/opt/draco/bin/draco --version",
    ):
        assert step in DOCKERFILE, step


# Every dependency is downloaded (or taken from pip's cache) and installed: minutes on a
# busy machine, beyond the suite's default per-test limit.
@pytest.mark.timeout(1500)
def test_the_wheel_installs_into_a_clean_virtualenv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(ROOT)],
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("draco-*.whl")
    target = tmp_path / "venv"
    venv.create(target, with_pip=True)
    subprocess.run(
        [str(target / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        check=True,
        timeout=900,
    )
    out = subprocess.run(
        [str(target / "bin" / "draco"), "--version"], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert out.stdout.strip() == f"draco {draco.__version__}"
    # Installed from the wheel, not this tree: no source on the path.
    where = subprocess.run(
        [str(target / "bin" / "python"), "-c", "import draco; print(draco.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert where.stdout.startswith(str(target)), where.stdout
