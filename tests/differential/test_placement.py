"""Where draco + kube-scheduler place a pod against where kube-scheduler with native DRA does.

Random cases (:mod:`.placement.generator`: a small cluster with pods already bound and
devices already allocated, one incoming pod carrying node selection, taints and
tolerations, requests, host ports, pod (anti-)affinity, topology spread and a device
claim) go through two systems on two real kube-apiservers (:mod:`.placement.systems`):
upstream kube-scheduler v1.37 allocating ``resource.k8s.io/v1`` claims itself, and
draco's operator with the same kube-scheduler binding what it un-gates. Every case is
judged (:mod:`.placement.judge`): every pod upstream binds must be bound by draco, on a
node that keeps every rule (checked apart from both systems, :mod:`.placement.rules`),
the same node with the same devices unless upstream had a tie among its top-scored nodes.

``make differential`` runs 1,000 cases, ``make test`` a few dozen, from a fresh seed each
time (printed, with the command that replays it). DRACO_PLACEMENT_SEED and
DRACO_PLACEMENT_CASES choose; DRACO_PLACEMENT_ONLY=3,17 runs only those case indices of
the seed; DRACO_PLACEMENT_CONCURRENCY sets the cases in flight (default 6). Each
mismatching case is written as JSON (the case, what each system did, upstream's scores,
where the rules admit the pod) to DRACO_PLACEMENT_OUT (/tmp/draco-placement-differential).
The test skips only when the control-plane binaries (with kube-scheduler) are missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import find_binaries

from .placement import render, rules
from .placement.generator import Generator
from .placement.judge import summarize
from .placement.run import Clock, Judged, load, run_cases
from .placement.systems import System

CASES = int(os.environ.get("DRACO_PLACEMENT_CASES") or 30)
SEED = int(os.environ.get("DRACO_PLACEMENT_SEED") or random.SystemRandom().randrange(1, 2**31))
ONLY = [int(i) for i in (os.environ.get("DRACO_PLACEMENT_ONLY") or "").split(",") if i.strip()]
CONCURRENCY = int(os.environ.get("DRACO_PLACEMENT_CONCURRENCY") or 6)
OUT = Path(os.environ.get("DRACO_PLACEMENT_OUT") or "/tmp/draco-placement-differential")


def _assets() -> Path:
    try:
        assets = find_binaries()
    except Exception as exc:
        pytest.skip(f"no control-plane binaries: {exc}")
    if not os.access(assets / "kube-scheduler", os.X_OK):
        pytest.skip(
            f"{assets} lacks kube-scheduler: run hack/controlplane.sh kube-scheduler (make differential does)"
        )
    return assets


@pytest.mark.timeout(4 * 3600)
async def test_draco_places_pods_where_upstream_does() -> None:
    assets = _assets()
    indices = ONLY or list(range(CASES))
    replay = f"DRACO_PLACEMENT_SEED={SEED} DRACO_PLACEMENT_CASES={CASES} make differential PYTEST_ARGS='-k placement'"
    print(f"\nplacement differential: seed {SEED}, {len(indices)} cases, {CONCURRENCY} at a time ({load()})")
    print(f"  replay: {replay}")
    workdir = Path(tempfile.mkdtemp(prefix="draco-placement-"))
    upstream = System("upstream", assets, workdir / "upstream")
    draco = System("draco", assets, workdir / "draco")
    counts: Counter[str] = Counter()
    harness: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    mismatches: list[str] = []
    clock = Clock()

    def on_judged(judged: Judged) -> None:
        verdict = judged.verdict
        counts[verdict.category] += 1
        for problem in verdict.harness:
            harness[problem] += 1
        for system in ("upstream", "draco"):
            outcomes[f"{system} {(verdict.detail.get(system) or {}).get('kind', 'not run')}"] += 1
        if verdict.mismatch:
            OUT.mkdir(parents=True, exist_ok=True)
            path = OUT / f"{SEED}-{judged.index}.json"
            report = {
                "seed": SEED,
                "index": judged.index,
                "replay": f"DRACO_PLACEMENT_SEED={SEED} DRACO_PLACEMENT_ONLY={judged.index} "
                "make differential PYTEST_ARGS='-k placement'",
                "category": verdict.category,
                "harness": verdict.harness,
                **verdict.detail,
                "cluster": rules.describe(_world(judged)),
                "case": judged.case,
            }
            path.write_text(json.dumps(report, indent=1))
            mismatches.append(f"{judged.index}: {verdict.category} {verdict.harness} ({path})")
        done = sum(counts.values())
        if done % 100 == 0:
            print(f"  {done}/{len(indices)} cases in {clock.seconds():.0f}s ({load()})", flush=True)

    try:
        await asyncio.gather(upstream.start(), draco.start())
        print(f"  both systems started in {clock.seconds():.0f}s ({load()})", flush=True)
        await run_cases(
            upstream, draco, Generator(SEED), indices, concurrency=CONCURRENCY, on_judged=on_judged
        )
    finally:
        await asyncio.gather(upstream.close(), draco.close(), return_exceptions=True)
        if mismatches:
            keep = OUT / f"{SEED}-logs"
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(workdir, keep, ignore=shutil.ignore_patterns("*.yaml"))
        shutil.rmtree(workdir, ignore_errors=True)
    total = sum(counts.values())
    agreed = sum(v for k, v in counts.items() if k.startswith("agree"))
    print(
        f"placement differential: {total} cases in {clock.seconds():.0f}s ({load()}), seed {SEED}\n"
        f"  agreements {agreed}, mismatches {len(mismatches)}; by category:\n{summarize(counts)}"
        + (f"\n  harness doubts:\n{summarize(harness)}" if harness else "")
        + f"\n  outcomes:\n{summarize(outcomes)}"
    )
    assert not mismatches, (
        f"{len(mismatches)} of {total} cases: draco's placement differs from upstream's or breaks a rule "
        f"(seed {SEED}; replay: {replay}; JSON in {OUT}):\n" + "\n".join(mismatches[:20])
    )


def _world(judged: Judged) -> rules.World:
    from .placement.run import world_of

    return world_of(judged.case, f"c{judged.index}")


def test_generated_cases_render_for_both_systems() -> None:
    """Every case renders into objects that name only the case's own nodes and namespaces."""
    generator = Generator(1)
    for index in range(200):
        case = generator.case(index)
        tag = f"c{index}"
        for system in ("upstream", "draco"):
            pod = render.incoming_pod(case, tag, system)
            assert pod["spec"]["nodeSelector"][render.CASE_LABEL] == tag
            assert (render.GATE in json.dumps(pod)) == (system == "draco")
        world = _world(Judged(index, case, None))  # type: ignore[arg-type]
        assert all(name.startswith(f"{tag}-") for name in world.nodes)
