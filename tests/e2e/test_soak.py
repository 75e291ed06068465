"""The fault-injection soak: churn while the processes under it die, restart and stall,
with draco's promises checked all along (`tests/e2e/soakkit.py` says how).

`make test` runs it short (`DRACO_SOAK_SECONDS`, default 60: every fault kind once);
`make soak` runs it for 30 minutes beside two CPU hogs, a fault at random every 8-25 s.
`DRACO_SOAK_SEED` replays a run's churn and faults (the seed is printed). A broken promise
fails the test with its evidence; the counts are printed either way.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane, find_binaries
from tests.e2e.soakkit import FAULTS, Settings, Soak
from tests.e2e.support import scaled

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings.from_env()


@pytest.fixture
def plane() -> Iterator[ControlPlane]:
    """A control plane of the soak's own: it restarts kube-apiserver and pauses etcd."""
    plane = ControlPlane(binaries=find_binaries()).start()
    try:
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
        yield plane
    finally:
        plane.stop()


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


@pytest.mark.timeout(int(SETTINGS.seconds + scaled(900)))
def test_soak_keeps_every_promise_under_faults(plane: ControlPlane) -> None:
    # A SIGTERM (a CI timeout, a Ctrl-C'd make soak's kill) must still stop every process.
    def terminate(*_: object) -> None:
        raise SystemExit(143)

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminate) if main else None
    folder = Path(tempfile.mkdtemp(prefix="draco-soak-"))
    soak = Soak(plane, folder, SETTINGS)
    print(f"\nsoak: seed {SETTINGS.seed}, {SETTINGS.seconds:.0f}s, logs in {folder}", flush=True)
    try:
        soak.start()
        soak.run()
        soak.drain()
    finally:
        soak.stop()
        plane.stop()
        if main:
            signal.signal(signal.SIGTERM, previous)
    leaked = soak.leaked()
    if leaked:
        soak._violate("no process leaked", "; ".join(leaked))
    summary = soak.summary(_load())
    print(summary, flush=True)
    assert not soak.violations, summary
    assert soak.counts["invariant rounds"] > 0, summary
    if SETTINGS.every_fault_once:
        assert all(soak.counts[kind] for kind in FAULTS), summary
    for kind, count in soak.counts.items():
        if kind.startswith("pods created"):
            assert count > 0, summary
