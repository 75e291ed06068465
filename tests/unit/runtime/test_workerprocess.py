"""The pipe-fed worker processes: answers in order, exceptions, death, shutdown, a light child."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from draco.errors import CELCompileError
from draco.runtime.workerprocess import WorkerProcesses

TIMEOUT = 60.0


def _fail(message: str) -> None:
    raise CELCompileError(message)


def _wait_for(path: str) -> str:
    """Block the worker until the test creates ``path``."""
    give_up = time.monotonic() + TIMEOUT
    while not Path(path).exists() and time.monotonic() < give_up:
        time.sleep(0.01)
    return path


def test_calls_are_answered_in_a_child_in_order() -> None:
    pool = WorkerProcesses(1)
    try:
        futures = [pool.submit(pow, n, 2) for n in range(50)]
        assert [f.result(TIMEOUT) for f in futures] == [n * n for n in range(50)]
        assert pool.submit(os.getpid).result(TIMEOUT) not in (os.getpid(), None)
    finally:
        pool.shutdown()


def test_an_exception_comes_back_as_raised_and_the_worker_goes_on() -> None:
    pool = WorkerProcesses(1)
    try:
        with pytest.raises(CELCompileError, match="nope"):
            pool.submit(_fail, "nope").result(TIMEOUT)
        assert pool.submit(abs, -3).result(TIMEOUT) == 3
    finally:
        pool.shutdown()


def test_a_call_that_does_not_pickle_fails_alone() -> None:
    pool = WorkerProcesses(1)
    try:
        with pytest.raises(Exception):  # noqa: B017  (pickle's own error, by type and version)
            pool.submit(lambda: 1).result(TIMEOUT)
        assert pool.submit(abs, -4).result(TIMEOUT) == 4
    finally:
        pool.shutdown()


def test_a_killed_worker_fails_its_calls_and_the_pool() -> None:
    pool = WorkerProcesses(1)
    try:
        pid = pool.submit(os.getpid).result(TIMEOUT)
        waiting = pool.submit(_wait_for, "/nonexistent/draco-never")  # blocks in the child
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):
            waiting.result(TIMEOUT)
        with pytest.raises(BrokenProcessPool):
            pool.submit(abs, 1).result(TIMEOUT)
    finally:
        pool.shutdown()


def test_shutdown_with_cancel_cancels_what_was_not_sent(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    pool = WorkerProcesses(1)
    pool.submit(os.getpid).result(TIMEOUT)
    first = pool.submit(_wait_for, str(gate))
    later = [pool.submit(abs, -n) for n in range(20)]
    give_up = time.monotonic() + TIMEOUT
    while not first.running() and time.monotonic() < give_up:  # sent to the child
        time.sleep(0.01)
    gate.touch()  # lets the first call finish
    pool.shutdown(wait=True, cancel_futures=True)
    assert first.result(TIMEOUT) == str(gate)
    for n, future in enumerate(later):  # each either ran before the shutdown or was cancelled
        with contextlib.suppress(CancelledError):
            assert future.result(TIMEOUT) == n
    with pytest.raises(RuntimeError):
        pool.submit(abs, 1)


def test_two_processes_share_the_calls(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    pool = WorkerProcesses(2)
    try:
        pid = pool.submit(os.getpid).result(TIMEOUT)
        busy = pool.submit(_wait_for, str(gate))
        other = pool.submit(os.getpid).result(TIMEOUT)  # not queued behind the busy one
        assert other != pid
        gate.touch()
        assert busy.result(TIMEOUT) == str(gate)
    finally:
        pool.shutdown()


def test_the_child_imports_only_what_its_calls_need() -> None:
    # The CEL worker's size depends on it: nothing of the parent's process comes along.
    script = (
        "import sys\n"
        "from draco.runtime.workerprocess import WorkerProcesses\n"
        "pool = WorkerProcesses(1)\n"
        "names = pool.submit(eval, 'sorted(__import__(\"sys\").modules)').result(60)\n"
        "pool.shutdown()\n"
        "print(' '.join(names))\n"
    )
    answer = subprocess.run(
        [sys.executable, "-c", "import asyncio, json, ssl\n" + script],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    modules = set(answer.stdout.split())
    assert "draco.runtime.workerprocess" in modules
    assert not modules & {"asyncio", "ssl", "aiohttp", "pydantic", "kopf", "draco.cel"}


def test_the_cel_worker_loads_no_api_model_pydantic_or_celpy() -> None:
    # What keeps the operator's CEL worker near 32 MB: evaluating selectors on devices'
    # published JSON needs the CEL layer alone.
    from draco.runtime.celworker import WARM_UP, evaluate_chunk

    pool = WorkerProcesses(1)
    try:
        done, _, _ = pool.submit(evaluate_chunk, *WARM_UP).result(TIMEOUT)
        modules = set(pool.submit(eval, 'list(__import__("sys").modules)').result(TIMEOUT))
    finally:
        pool.shutdown()
    assert done == 1
    assert "draco.cel" in modules
    assert not {m for m in modules if m.split(".")[0] in ("pydantic", "celpy", "kopf")}
    assert not {m for m in modules if m == "draco.api" or m.startswith(("draco.api.", "draco.allocator"))}
