"""A real kube-scheduler beside the test control plane, for the placement tests.

The session's control plane has no scheduler: most e2e tests check what draco does to a
gated pod (pinned, un-gated) and nothing binds it. The placement tests need kube-scheduler
to bind what draco un-gates, exactly as users run it, without binding other tests' pods:
each scheduler here runs one profile of the default plugins under a scheduler name of its
own, and only pods that name it (``spec.schedulerName``) are its. The binary is the one
`hack/node.sh` builds (``DRACO_NODE_ASSETS``).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane, free_port
from draco.tools.dev.node import NODE_ASSETS_ENV
from tests.e2e.support import scaled

__all__ = ["KubeScheduler", "scheduler_binary"]


def scheduler_binary() -> Path | None:
    """kube-scheduler from the node's assets, or None when they are not built."""
    folder = os.environ.get(NODE_ASSETS_ENV)
    if not folder:
        return None
    path = Path(folder) / "bin" / "kube-scheduler"
    return path if os.access(path, os.X_OK) else None


#: For a test module whose tests run a kube-scheduler of their own.
NEEDS_KUBE_SCHEDULER = pytest.mark.skipif(
    scheduler_binary() is None, reason="needs kube-scheduler (hack/node.sh, DRACO_NODE_ASSETS)"
)


class KubeScheduler:
    """One kube-scheduler process serving the profile ``name`` (its scheduler name)."""

    def __init__(self, kube: ControlPlane, workdir: Path, name: str) -> None:
        binary = scheduler_binary()
        if binary is None:
            raise RuntimeError(f"kube-scheduler is not built: run hack/node.sh and set {NODE_ASSETS_ENV}")
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / f"{name}.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection:\n  kubeconfig: {kube.kubeconfig}\n"
            "leaderElection:\n  leaderElect: false\n"
            f"profiles:\n- schedulerName: {name}\n"
        )
        self.name = name
        self.log_path = workdir / f"{name}.log"
        port = free_port()
        with self.log_path.open("wb") as out:
            self.popen = subprocess.Popen(
                [
                    str(binary),
                    f"--config={config}",
                    f"--authentication-kubeconfig={kube.kubeconfig}",
                    f"--authorization-kubeconfig={kube.kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_healthy(f"https://127.0.0.1:{port}/healthz")

    def _wait_healthy(self, url: str) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + scaled(90)
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"kube-scheduler exited: {self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"kube-scheduler was not healthy in time: {self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
