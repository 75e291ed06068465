"""Control planes left behind by a killed owner are swept by the next one to start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import sweep_abandoned


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def child_naming(workdir: Path, started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A process in its own session whose command line names `workdir`, like etcd's --data-dir."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", f"--data-dir={workdir}/etcd"],
        start_new_session=True,
    )
    started.append(process)
    # Right after the exec the kernel may still show an empty command line.
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 60
    while not cmdline.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    return process


def test_a_dead_owners_folder_goes_and_its_processes_stop(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    workdir = tmp_path / "draco-cp-abandoned"
    workdir.mkdir()
    (workdir / "owner.pid").write_text(str(dead_pid()))
    etcd = child_naming(workdir, children)
    (workdir / "etcd.pid").write_text(str(etcd.pid))

    assert sweep_abandoned(tmp_path) == [workdir]

    assert not workdir.exists()
    assert etcd.wait(timeout=30) != 0


def test_a_live_owners_folder_stays(tmp_path: Path, children: list[subprocess.Popen[bytes]]) -> None:
    workdir = tmp_path / "draco-cp-live"
    workdir.mkdir()
    (workdir / "owner.pid").write_text(str(os.getpid()))
    etcd = child_naming(workdir, children)
    (workdir / "etcd.pid").write_text(str(etcd.pid))

    assert sweep_abandoned(tmp_path) == []

    assert workdir.exists()
    assert etcd.poll() is None


def test_a_reused_pid_is_not_killed(tmp_path: Path, children: list[subprocess.Popen[bytes]]) -> None:
    workdir = tmp_path / "draco-cp-reused"
    workdir.mkdir()
    (workdir / "owner.pid").write_text(str(dead_pid()))
    stranger = child_naming(tmp_path / "elsewhere", children)
    (workdir / "etcd.pid").write_text(str(stranger.pid))

    assert sweep_abandoned(tmp_path) == [workdir]

    assert stranger.poll() is None


def test_folders_without_an_owner_file_are_kept(tmp_path: Path) -> None:
    (tmp_path / "draco-cp-older").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "owner.pid").write_text(str(dead_pid()))

    assert sweep_abandoned(tmp_path) == []

    assert (tmp_path / "draco-cp-older").exists()
    assert (tmp_path / "other").exists()
