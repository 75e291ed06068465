"""Table cases: device taints, DeviceTaintRules and tolerations."""

from __future__ import annotations

import pytest

from .cases import taints
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(taints.CASES))
def test_taints(case: Case) -> None:
    run_case(case)
