"""Table cases: consumable capacity and request policies."""

from __future__ import annotations

import pytest

from .cases import capacity
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(capacity.CASES))
def test_capacity(case: Case) -> None:
    run_case(case)
