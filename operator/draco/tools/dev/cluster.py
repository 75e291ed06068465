"""A whole test cluster on one machine: control plane, kube-controller-manager, a real node.

The e2e control plane has no controllers: enough to run draco as processes, not to
install it as users do. `Cluster` adds what a `helm install` needs, so Deployments,
ReplicaSets and DaemonSets make pods and those pods talk to the API server the way they
do in any cluster:

- The node (`draco.tools.dev.node`) lives in a network namespace of its own, with every
  address the cluster serves on: the node's, the pods' bridge and gateway, and the
  `kubernetes` Service's ClusterIP (the first address of the Services' range
  `SERVICE_CIDR`), where a relay listens on port 443 and connects to kube-apiserver on
  the host's 127.0.0.1. The kubelet tells pods exactly that address
  (`KUBERNETES_SERVICE_HOST`/`_PORT`), so in-cluster configuration works without a
  kube-proxy; the serving certificate names it. From the host, kubectl, helm, Tilt and
  the tests use 127.0.0.1 as with any control plane of the tests. The host's network
  namespace gets no address and no route.
- The ServiceAccount admission plugin is on (pods get their projected token volume), and
  kube-controller-manager runs with every default controller: the service-account and
  root-CA publishers (`kube-root-ca.crt`) those tokens need, Deployments, ReplicaSets,
  DaemonSets, EndpointSlices, garbage collection, namespace deletion. Leader election off.
- The API server reaches pod IPs (a webhook registered through its Service is called at
  the Service's endpoints, `--enable-aggregator-routing`, as there is no kube-proxy) and
  the kubelet through its egress proxy, which connects from inside the node's namespace.

Everything lives in `/tmp/draco-cluster-<id>` (the control plane's folder is in it) and the
node's own folder and namespace. `stop()` stops the node (its pods first),
kube-controller-manager and the control plane, and removes them; when the owner of a
cluster was killed (SIGKILL), the next cluster's `start()` does (`sweep_abandoned`, and
the node's own sweep).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final

from draco.errors import ControlPlaneError
from draco.logs import get_logger
from draco.tools.dev.controlplane import (
    ChildProcess,
    ControlPlane,
    claim_workdir,
    find_binaries,
    free_port,
    sweep_abandoned,
)
from draco.tools.dev.node import Node, find_node_assets

__all__ = ["CLUSTER_PREFIX", "SERVICE_CIDR", "Cluster"]

log = get_logger(__name__)

#: The Services' range: it lives only in the node's namespace, so any range does.
SERVICE_CIDR: Final = "10.90.0.0/24"
#: A cluster's folder is `<tmp>/CLUSTER_PREFIX<id>`.
CLUSTER_PREFIX: Final = "draco-cluster-"


@dataclass
class Cluster:
    """Control plane + kube-controller-manager + a node; `start()`, `stop()` (or `with`)."""

    #: etcd, kube-apiserver, kubectl and kube-controller-manager
    #: (`hack/controlplane.sh kube-controller-manager`).
    binaries: Path = field(default_factory=find_binaries)
    node_assets: Path = field(default_factory=find_node_assets)
    start_timeout: float = 180.0
    #: After start.
    workdir: Path | None = field(default=None, init=False)
    plane: ControlPlane | None = field(default=None, init=False)
    node: Node | None = field(default=None, init=False)
    _kcm: ChildProcess | None = field(default=None, init=False)

    def start(self) -> Cluster:
        if not (self.binaries / "kube-controller-manager").exists():
            raise ControlPlaneError(
                f"{self.binaries} lacks kube-controller-manager: run "
                "`hack/controlplane.sh kube-controller-manager` and use the folder it prints"
            )
        sweep_abandoned(tempfile.gettempdir(), f"{CLUSTER_PREFIX}*")
        self.workdir = Path(tempfile.mkdtemp(prefix=CLUSTER_PREFIX))
        claim_workdir(self.workdir)
        started = time.monotonic()
        try:
            self.plane = ControlPlane(
                binaries=self.binaries,
                workdir=self.workdir / "controlplane",
                service_cidr=SERVICE_CIDR,
                service_account_admission=True,
            ).start()
            self._start_controller_manager()
            self.node = Node(
                plane=self.plane, assets=self.node_assets, start_timeout=self.start_timeout
            ).start()
        except BaseException:
            self.stop()
            raise
        log.info(
            "Cluster ready",
            server=self.plane.server,
            kubeconfig=str(self.plane.kubeconfig),
            node=self.node.name,
            netns=self.node.netns.name if self.node.netns else "",
            seconds=round(time.monotonic() - started, 2),
        )
        return self

    def stop(self) -> None:
        if self.node is not None:
            self.node.stop()
        if self._kcm is not None:
            self._kcm.stop()
            self._kcm = None
        if self.plane is not None:
            self.plane.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()

    def controller_manager_logs(self, lines: int = 40) -> str:
        return self._kcm.tail(lines) if self._kcm else ""

    def _start_controller_manager(self) -> None:
        assert self.plane is not None and self.plane.certs is not None and self.workdir is not None
        kubeconfig = str(self.plane.kubeconfig)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        for _attempt in range(3):
            port = free_port()
            log_path = self.workdir / "kube-controller-manager.log"
            with log_path.open("wb") as out:
                popen = subprocess.Popen(
                    [
                        str(self.binaries / "kube-controller-manager"),
                        f"--kubeconfig={kubeconfig}",
                        f"--authentication-kubeconfig={kubeconfig}",
                        f"--authorization-kubeconfig={kubeconfig}",
                        # Tokens of service accounts, and the CA pods trust the API with.
                        f"--service-account-private-key-file={self.plane.certs.sa_key}",
                        f"--root-ca-file={self.plane.certs.ca_cert}",
                        f"--service-cluster-ip-range={self.plane.service_cidr}",
                        "--leader-elect=false",
                        "--bind-address=127.0.0.1",
                        f"--secure-port={port}",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            (self.workdir / "kube-controller-manager.pid").write_text(str(popen.pid))
            process = ChildProcess("kube-controller-manager", popen, log_path)
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline:
                if popen.poll() is not None:
                    break
                try:
                    url = f"https://127.0.0.1:{port}/healthz"
                    with urllib.request.urlopen(url, timeout=2, context=context) as response:
                        if response.status == 200:
                            self._kcm = process
                            return
                except (urllib.error.URLError, OSError):
                    pass
                time.sleep(0.5)
            process.stop()
            if "address already in use" not in process.tail(80):
                raise ControlPlaneError(f"kube-controller-manager did not become healthy:\n{process.tail()}")
        raise ControlPlaneError("kube-controller-manager could not find a free port in three attempts")
