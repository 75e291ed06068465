"""Helpers e2e tests import: processes of ours, and polling with a clear failure."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["DracoProcess", "wait_for"]


@dataclass
class DracoProcess:
    """A `draco` subcommand running as its own process, as it would in a cluster."""

    popen: subprocess.Popen[bytes]
    log_path: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            self.popen.wait(30)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def wait_for(
    predicate: Callable[[], object], *, timeout: float = 30, interval: float = 0.2, what: str = ""
) -> object:
    """Poll until `predicate()` is truthy; returns its value or fails the test naming `what`."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what or predicate!r} (last value: {last!r})")
