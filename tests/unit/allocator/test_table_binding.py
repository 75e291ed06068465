"""Table cases: binding conditions and the ordering of pools that have them."""

from __future__ import annotations

import pytest

from .cases import binding
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(binding.CASES))
def test_binding(case: Case) -> None:
    run_case(case)
