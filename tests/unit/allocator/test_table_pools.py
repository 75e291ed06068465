"""Table cases: pool generations, resourceSliceCount, incomplete/obsolete/invalid pools."""

from __future__ import annotations

import pytest

from .cases import pools
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(pools.CASES))
def test_pools(case: Case) -> None:
    run_case(case)
