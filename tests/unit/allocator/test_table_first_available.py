"""Table cases: firstAvailable prioritized lists, their constraints and config."""

from __future__ import annotations

import pytest

from .cases import first_available
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(first_available.CASES))
def test_first_available(case: Case) -> None:
    run_case(case)
