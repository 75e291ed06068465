"""Table cases: matchAttribute and distinctAttribute, scalar and list-typed."""

from __future__ import annotations

import pytest

from .cases import constraints
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(constraints.CASES))
def test_constraints(case: Case) -> None:
    run_case(case)
