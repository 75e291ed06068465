"""Table cases: adminAccess."""

from __future__ import annotations

import pytest

from .cases import admin
from .kit import Case, params, run_case


@pytest.mark.parametrize("case", params(admin.CASES))
def test_admin(case: Case) -> None:
    run_case(case)
