"""Table cases: the 32-results limit and fatal input errors."""

from __future__ import annotations

import pytest

from .cases import limits
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(limits.CASES))
def test_limits(case: Case) -> None:
    run_case(case)
