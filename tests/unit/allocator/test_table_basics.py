"""Table cases: basic ExactCount allocation, ordering, selectors, backtracking, devices in use."""

from __future__ import annotations

import pytest

from .cases import basics
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(basics.CASES))
def test_basics(case: Case) -> None:
    run_case(case)
