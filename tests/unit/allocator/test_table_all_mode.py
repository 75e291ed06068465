"""Table cases: allocationMode All."""

from __future__ import annotations

import pytest

from .cases import all_mode
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(all_mode.CASES))
def test_all_mode(case: Case) -> None:
    run_case(case)
