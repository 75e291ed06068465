"""draco's allocator against upstream's own code, on random problems.

Upstream is the structured allocator of k8s.io/dynamic-resource-allocation v0.37.1 (the
scheduler's, with the default 1.37 features), built from the Go module proxy by
hack/upstream-allocator.sh and cached; the problems come from :mod:`.generator`, seeded.
Every problem must land in a category that is not a mismatch (see :mod:`.compare`):
agreement, or a difference explained by a departure named in ``draco.allocator``'s
docstring whose precondition holds.

``make test`` runs a few hundred problems from a fresh seed each time (printed, with the
command that replays it); ``make differential`` runs 10,000. Set DRACO_DIFFERENTIAL_SEED
and DRACO_DIFFERENTIAL_CASES to choose. The test skips only when Go is not installed.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from .compare import DEPARTURES, Verdict, judge, summarize
from .generator import Generator, invalid_objects
from .upstream import Upstream, build_upstream, go_available

CASES = int(os.environ.get("DRACO_DIFFERENTIAL_CASES") or 300)
SEED = int(os.environ.get("DRACO_DIFFERENTIAL_SEED") or random.SystemRandom().randrange(1, 2**31))
#: Mismatching problems are written here, one JSON file each, to replay or to turn into
#: table cases.
OUT = Path(os.environ.get("DRACO_DIFFERENTIAL_OUT") or "/tmp/draco-differential")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    if not go_available():
        pytest.skip("Go is not installed: the differential test builds upstream's allocator with Go >= 1.26")
    process = Upstream(build_upstream())
    try:
        yield process
    finally:
        process.close()


def test_every_departure_the_comparison_accepts_is_documented() -> None:
    """A difference is accepted only under a departure named in the allocator's docstring."""
    import draco.allocator

    documented = draco.allocator.__doc__ or ""
    for name in DEPARTURES:
        assert f"**{name}**" in documented, f"departure {name!r} is not in draco.allocator's docstring"


@pytest.mark.timeout(3600)
def test_draco_agrees_with_upstream(upstream: Upstream) -> None:
    replay = f"DRACO_DIFFERENTIAL_SEED={SEED} DRACO_DIFFERENTIAL_CASES={CASES} make differential"
    print(f"\ndifferential: seed {SEED}, {CASES} problems (replay: {replay})")
    generator = Generator(SEED)
    counts: Counter[str] = Counter()
    mismatches: list[str] = []
    start = time.monotonic()
    for index in range(CASES):
        problem = generator.problem(index)
        invalid = invalid_objects(problem)
        verdict = (
            Verdict("MISMATCH generator made an invalid object", mismatch=True, detail="; ".join(invalid))
            if invalid
            else judge(problem, upstream)
        )
        counts[verdict.category] += 1
        cited = verdict.category.rsplit("[", 1)[-1].rstrip("]") if verdict.category.endswith("]") else None
        assert cited is None or cited in DEPARTURES, (
            f"category {verdict.category!r} cites an unknown departure"
        )
        if verdict.mismatch:
            OUT.mkdir(parents=True, exist_ok=True)
            path = OUT / f"{problem['id']}.json"
            path.write_text(json.dumps(problem, indent=1))
            mismatches.append(f"{problem['id']}: {verdict.category}: {verdict.detail[:2000]} ({path})")
    elapsed = time.monotonic() - start
    load = os.getloadavg()[0]
    print(
        f"differential: {CASES} problems in {elapsed:.1f}s (load {load:.1f}), by category:\n{summarize(counts)}"
    )
    assert not mismatches, (
        f"{len(mismatches)} of {CASES} problems differ from upstream without a documented departure "
        f"(seed {SEED}; replay: {replay}):\n" + "\n".join(mismatches[:10])
    )
