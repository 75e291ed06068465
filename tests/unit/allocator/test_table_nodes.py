"""Table cases: node selection and the result's nodeSelector."""

from __future__ import annotations

import pytest

from .cases import nodes
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(nodes.CASES))
def test_nodes(case: Case) -> None:
    run_case(case)
