"""What a process that only evaluates selectors loads: `draco.cel` without pydantic or
cel-python's package (the operator's CEL worker process imports only this)."""

from __future__ import annotations

import subprocess
import sys

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
