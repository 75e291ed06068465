"""What a process that only evaluates selectors loads: `draco.cel` without pydantic or
cel-python's package (the operator's CEL worker process imports only this)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Top-level packages it must not load, and `draco.api` (every pydantic model).
HEAVY = ("pydantic", "pydantic_core", "celpy")


@pytest.mark.parametrize(
    "statement",
    [
        "import draco.cel",
        "import draco.quantity",
        'from draco.cel import compile_selector, DeviceView; compile_selector("device.driver == \\"x\\"")'
        '.matches(DeviceView.from_wire({"name": "d", "capacity": {"c": {"value": "1Gi"}}}, driver="x"))',
    ],
)
def test_the_cel_layer_loads_no_pydantic_api_or_celpy(statement: str) -> None:
    check = (
        f"import sys; {statement}; print(sorted(m for m in sys.modules"
        f" if m.split('.')[0] in {HEAVY!r} or m == 'draco.api' or m.startswith('draco.api.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()
    assert loaded == "[]"


def test_without_cel_pythons_grammar_the_import_says_what_is_missing(tmp_path: Path) -> None:
    # A `celpy` package without `cel.lark` first on the path: what a broken install looks like.
    (tmp_path / "celpy").mkdir()
    (tmp_path / "celpy" / "__init__.py").write_text("raise AssertionError('celpy was imported')\n")
    failed = subprocess.run(
        [sys.executable, "-c", "import draco.cel"],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
        },
    )
    assert failed.returncode != 0
    assert "ModuleNotFoundError" in failed.stderr
    assert "install draco's dependencies (cel-python)" in failed.stderr
    assert "celpy was imported" not in failed.stderr
