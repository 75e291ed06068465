"""kube-scheduler, kube-controller-manager and draco's operator as processes beside a ControlPlane.

Why: the harnesses that put draco next to upstream (``benchmarks/versus_upstream.py``,
the placement differential in ``tests/differential/placement``) run the same components
the same way: upstream is kube-scheduler (its DRA plugin allocates) with, where templates
are used, kube-controller-manager's resourceclaim controller; draco is ``draco operator``
with the same kube-scheduler binding what it un-gates. Each process runs in a session of
its own (its log in a file of the caller's folder, leader election off, the client's
QPS/burst at 5000 as upstream's scheduler_perf sets them) and is stopped with its whole
process group by :func:`stop`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from draco.errors import ControlPlaneError
from draco.kube.client import Resource
from draco.tools.dev.controlplane import ControlPlane, free_port

__all__ = [
    "NATIVE_CLAIMS",
    "NATIVE_CLASSES",
    "NATIVE_SLICES",
    "NATIVE_TEMPLATES",
    "Startup",
    "start_controller_manager",
    "start_operator",
    "start_scheduler",
    "stop",
]

#: Upstream's own kinds (``resource.k8s.io/v1``), which draco's mirror field for field.
NATIVE_SLICES: Final = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
NATIVE_CLASSES: Final = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)
NATIVE_CLAIMS: Final = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
NATIVE_TEMPLATES: Final = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True
)


def _insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _wait_healthy(
    process: subprocess.Popen[bytes], url: str, log_path: Path, *, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ControlPlaneError(f"{log_path.stem} exited with {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=_insecure()) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    stop(process)
    raise ControlPlaneError(f"{log_path.stem} not healthy at {url} within {timeout}s; see {log_path}")


def _spawn(argv: Sequence[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as out:
        return subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def start_scheduler(
    plane: ControlPlane,
    assets: Path,
    workdir: Path,
    *,
    config: str = "",
    args: Sequence[str] = (),
    log_name: str = "kube-scheduler.log",
) -> subprocess.Popen[bytes]:
    """kube-scheduler with its default profile; ``config`` is appended to its
    KubeSchedulerConfiguration (top-level fields, YAML), ``args`` to its command line."""
    config_path = workdir / f"{Path(log_name).stem}.yaml"
    config_path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: {plane.kubeconfig}\n  qps: 5000\n  burst: 5000\n"
        "leaderElection:\n  leaderElect: false\n" + config
    )
    port = free_port()
    log_path = workdir / log_name
    process = _spawn(
        [
            str(assets / "kube-scheduler"),
            f"--config={config_path}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            *args,
        ],
        log_path,
        plane.env(),
    )
    _wait_healthy(process, f"https://127.0.0.1:{port}/healthz", log_path)
    return process


def start_controller_manager(
    plane: ControlPlane,
    assets: Path,
    workdir: Path,
    *,
    controllers: str = "resourceclaim-controller",
) -> subprocess.Popen[bytes]:
    """kube-controller-manager running only ``controllers`` (upstream's claims from templates)."""
    port = free_port()
    log_path = workdir / "kube-controller-manager.log"
    process = _spawn(
        [
            str(assets / "kube-controller-manager"),
            f"--kubeconfig={plane.kubeconfig}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
            f"--controllers={controllers}",
            "--leader-elect=false",
            "--kube-api-qps=5000",
            "--kube-api-burst=5000",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ],
        log_path,
        plane.env(),
    )
    _wait_healthy(process, f"https://127.0.0.1:{port}/healthz", log_path)
    return process


@dataclass
class Startup:
    """How long the operator took to start: from spawning the process to its ready line
    (``wall_s``: imports, connection, every LIST, the controllers' start), and as it logs
    it itself (``Operator ready``): from its first LIST to the LISTs' end (``listed_s``)
    and to its last controller started, that is ready (``startup_s``)."""

    wall_s: float = float("nan")
    listed_s: float = float("nan")
    startup_s: float = float("nan")

    def text(self) -> str:
        return (
            f"first LIST → ready {self.startup_s:.1f}s (LISTs {self.listed_s:.1f}s; "
            f"process start → ready {self.wall_s:.1f}s)"
        )


def start_operator(
    plane: ControlPlane,
    workdir: Path,
    *,
    args: Sequence[str] = (),
    python: Sequence[str] = (sys.executable, "-m", "draco.cli"),
    wrapper: Sequence[str] = (),
    source: Path | None = None,
    log_name: str = "draco-operator.log",
    ready_timeout_s: float = 600.0,
) -> tuple[subprocess.Popen[bytes], Startup]:
    """``draco operator`` (one replica, no Lease, no metrics or health port) with ``args``,
    run by ``python`` (a command line that ends where draco's CLI arguments begin) under
    ``wrapper`` (a profiler's command line); from ``source`` (a folder holding the
    ``draco`` package, e.g. an earlier commit's ``operator/``) instead of this checkout.
    Returns once every controller has started."""
    log_path = workdir / log_name
    env = plane.env()
    if source is not None:
        env["PYTHONPATH"] = str(source)
    argv = [*wrapper, *python, "--log-level", "INFO", "operator", *args]
    argv += ["--metrics-port", "0", "--health-port", "0", "--leader-elect=false"]
    spawned = time.monotonic()
    process = _spawn(argv, log_path, env)
    # The operator is ready when every controller has started (its allocation loop last).
    deadline = spawned + ready_timeout_s
    allocation_started: float | None = None
    while True:
        text = log_path.read_text(errors="replace")
        if allocation_started is None and "Allocation started" in text:
            allocation_started = time.monotonic()
        # "Operator ready" follows at once; an older operator (an earlier commit) does not log it.
        if allocation_started is not None and (
            "Operator ready" in text or time.monotonic() - allocation_started > 5
        ):
            startup = Startup(wall_s=time.monotonic() - spawned)
            for line in text.splitlines():
                if "Operator ready" in line:
                    with contextlib.suppress(ValueError, TypeError, KeyError):
                        fields = json.loads(line)
                        startup.listed_s = float(fields["listed_s"])
                        startup.startup_s = float(fields["startup_s"])
            return process, startup
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise ControlPlaneError(f"operator did not start; see {log_path}")
        time.sleep(0.5)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop ``process`` and then what is left of its process group (its own session)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    # What the operator leaves (its CEL worker) exits by itself when its stdin ends; wait
    # for the group to empty, then kill what is left.
    deadline = time.monotonic() + 15
    with contextlib.suppress(ProcessLookupError, PermissionError):
        while time.monotonic() < deadline:
            os.killpg(process.pid, 0)
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGKILL)
