"""Table cases: partitionable devices (shared counters)."""

from __future__ import annotations

import pytest

from .cases import counters
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(counters.CASES))
def test_counters(case: Case) -> None:
    run_case(case)
