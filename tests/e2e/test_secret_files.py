"""The development control plane's credentials are its owner's only: the admin kubeconfig
`draco dev controlplane --kubeconfig-out` copies out, and the kubeconfig and keys of the
control plane itself (the one this session runs on), whatever the umask."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.support import scaled

pytestmark = pytest.mark.e2e


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_sessions_control_plane_keeps_its_credentials_private(kube: ControlPlane) -> None:
    assert kube.certs is not None
    for secret in (kube.kubeconfig, kube.certs.admin_key, kube.certs.serving_key, kube.certs.sa_key):
        assert mode(secret) == 0o600, secret


def test_kubeconfig_out_is_written_for_its_owner_only(tmp_path: Path) -> None:
    out = tmp_path / "admin.kubeconfig"
    # A wide-open umask: what a plain write would make readable by everyone.
    process = subprocess.Popen(
        [sys.executable, "-m", "draco.cli", "dev", "controlplane", "--kubeconfig-out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        umask=0,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the kubeconfig is written
        assert line.strip() == f"export KUBECONFIG={out}", (line, process.stderr and process.stderr.read())
        assert mode(out) == 0o600
        assert "client-key-data" in out.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=scaled(60))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
