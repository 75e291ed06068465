"""Table cases: the result shape: results order and config."""

from __future__ import annotations

import pytest

from .cases import results
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(results.CASES))
def test_results(case: Case) -> None:
    run_case(case)
