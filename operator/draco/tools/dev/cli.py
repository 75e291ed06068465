"""`draco dev controlplane` and `draco dev cluster`: a local cluster until interrupted.

`controlplane` is the e2e tests' etcd + kube-apiserver: handy for poking at the operator by
hand. `cluster` is the whole test cluster (`draco.tools.dev.cluster`: the control plane,
kube-controller-manager and a real node) that the chart can be installed into, with
images imported into the node's containerd. Each prints `export` lines (the kubeconfig;
for `cluster` also the command that imports an image, for Tilt's cluster mode), installs
the CRDs from a folder when asked, and stops everything on Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

import yaml

from draco.errors import ControlPlaneError
from draco.runtime.files import write_private
from draco.tools.dev.cluster import Cluster
from draco.tools.dev.controlplane import ControlPlane, find_binaries
from draco.tools.dev.node import find_node_assets

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
    whole = sub.add_parser(
        "cluster", help="start the control plane, kube-controller-manager and a node, and wait"
    )
    whole.add_argument(
        "--bin-dir",
        help="folder with etcd, kube-apiserver, kubectl, kube-controller-manager (default: $KUBEBUILDER_ASSETS)",
    )
    whole.add_argument("--node-assets", help="what hack/node.sh printed (default: $DRACO_NODE_ASSETS)")
    whole.add_argument("--crds", type=Path, help="apply every YAML file of this folder once the API is up")
    whole.add_argument("--kubeconfig-out", type=Path, help="also copy the kubeconfig here")
    whole.add_argument(
        "--image",
        type=Path,
        action="append",
        default=[],
        help="import this OCI tarball into the node (repeat)",
    )
    args = parser.parse_args(argv)
    cluster: Cluster | None = None
    try:
        if args.action == "cluster":
            cluster = Cluster(
                binaries=find_binaries(args.bin_dir), node_assets=find_node_assets(args.node_assets)
            ).start()
            assert cluster.plane is not None and cluster.node is not None
            plane = cluster.plane
            for image in args.image:
                cluster.node.import_image(image)
        else:
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
            # The admin's credentials: readable by the one who ran this, nobody else.
            write_private(args.kubeconfig_out, plane.kubeconfig.read_bytes())
        print(f"export KUBECONFIG={args.kubeconfig_out or plane.kubeconfig}", flush=True)
        if cluster is not None and cluster.node is not None:
            node = cluster.node
            if node.netns is not None:
                print(
                    f"# node {node.name}, {node.address}, in network namespace {node.netns.name} "
                    f"(ip -n {node.netns.name} addr); folders {cluster.workdir} {node.workdir}",
                    flush=True,
                )
            ctr = f"{node.assets / 'bin' / 'ctr'} --address {node.containerd_socket} -n k8s.io"
            print(f"export DRACO_IMAGE_LOAD='{ctr} images import'", flush=True)
            # The chart's values for this node: its NRI socket, host folders of its own.
            assert cluster.workdir is not None
            values = cluster.workdir / "values.yaml"
            values.write_text(
                yaml.safe_dump(
                    {
                        "agent": {
                            "nriSocket": str(node.nri_socket),
                            "hostPaths": {
                                "cdiDir": str(cluster.workdir / "cdi"),
                                "stateDir": str(cluster.workdir / "agent-state"),
                            },
                        }
                    }
                )
            )
            print(f"export DRACO_CHART_VALUES={values}", flush=True)
        stop.wait()
    finally:
        (cluster or plane).stop()
    return 0
