"""`draco dev controlplane`: run the local control plane of the tests until interrupted.

Handy for poking at the operator by hand: it prints the kubeconfig path and an `export`
line, installs the CRDs from a folder when asked, and stops everything on Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from draco.errors import ControlPlaneError
from draco.tools.dev.controlplane import ControlPlane, find_binaries

__all__ = ["main"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="draco dev", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    cp = sub.add_parser("controlplane", help="start etcd + kube-apiserver and wait")
    cp.add_argument(
        "--bin-dir", help="folder with etcd, kube-apiserver, kubectl (default: $KUBEBUILDER_ASSETS)"
    )
    cp.add_argument("--crds", type=Path, help="apply every YAML file of this folder once the API is up")
    cp.add_argument("--kubeconfig-out", type=Path, help="also copy the kubeconfig here")
    args = parser.parse_args(argv)
    try:
        plane = ControlPlane(binaries=find_binaries(args.bin_dir)).start()
    except ControlPlaneError as exc:
        print(f"draco dev: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        if args.crds:
            plane.kubectl("apply", "--server-side", "-f", str(args.crds))
            plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        if args.kubeconfig_out:
            args.kubeconfig_out.write_bytes(plane.kubeconfig.read_bytes())
        print(f"export KUBECONFIG={args.kubeconfig_out or plane.kubeconfig}", flush=True)
        stop.wait()
    finally:
        plane.stop()
    return 0
