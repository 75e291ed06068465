"""Table cases: selector expressions and combinations found only by backtracking."""

from __future__ import annotations

import pytest

from .cases import combos
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(combos.CASES))
def test_combos(case: Case) -> None:
    run_case(case)
