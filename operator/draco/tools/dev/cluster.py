"""A whole test cluster on one machine: control plane, kube-controller-manager, a real node.

The e2e control plane has no controllers and its node's pods live on a network nothing
routes to: enough to run draco as processes, not to install it as users do. `Cluster`
adds what a `helm install` needs, so Deployments, ReplicaSets and DaemonSets make pods and
those pods talk to the API server the way they do in any cluster:

- kube-apiserver listens on its own `kubernetes` Service's address, port 443: the first
  address of a /24 service range of its own (free on this machine), added to the loopback
  device. The kubelet tells pods to use exactly that (`KUBERNETES_SERVICE_HOST`/`_PORT`), so
  in-cluster configuration works without a kube-proxy; the serving certificate names it.
- The ServiceAccount admission plugin is on (pods get their projected token volume), and
  kube-controller-manager runs with every default controller: the service-account and
  root-CA publishers (`kube-root-ca.crt`) those tokens need, Deployments, ReplicaSets,
  DaemonSets, EndpointSlices, garbage collection, namespace deletion. Leader election off.
- The node's pod bridge is a gateway (`Node.gateway`): pods reach the API server through
  it, and the API server reaches pod IPs: a webhook registered through its Service is
  called at the Service's endpoints (`--enable-aggregator-routing`), as there is no
  kube-proxy to turn the Service's ClusterIP into a pod.

`stop()` stops the node (its pods first), kube-controller-manager, the control plane, and
removes the address from the loopback device.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
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

from draco.errors import ControlPlaneError
from draco.logs import get_logger
from draco.tools.dev.controlplane import ChildProcess, ControlPlane, find_binaries, free_port
from draco.tools.dev.node import Node, find_node_assets

__all__ = ["Cluster"]

log = get_logger(__name__)


def _used_addresses() -> list[ipaddress.IPv4Network]:
    """Every IPv4 route and address of this machine (to keep a new range clear of them)."""
    used: list[ipaddress.IPv4Network] = []
    for argv in (["ip", "-4", "route", "show", "table", "all"], ["ip", "-4", "-o", "addr", "show"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        for word in out.split():
            with contextlib.suppress(ValueError):
                net = ipaddress.ip_network(word if "/" in word else f"{word}/32", strict=False)
                if isinstance(net, ipaddress.IPv4Network):
                    used.append(net)
    return used


def _free_service_range() -> ipaddress.IPv4Network:
    used = _used_addresses()
    choices = list(range(256))
    random.shuffle(choices)
    for third in choices:
        net = ipaddress.IPv4Network(f"10.90.{third}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen >= 8):
            return net
    raise ControlPlaneError("no free 10.90.x.0/24 for the cluster's Services")


@dataclass
class Cluster:
    """Control plane + kube-controller-manager + a node; `start()`, `stop()` (or `with`)."""

    #: etcd, kube-apiserver, kubectl and kube-controller-manager
    #: (`hack/controlplane.sh kube-controller-manager`).
    binaries: Path = field(default_factory=find_binaries)
    node_assets: Path = field(default_factory=find_node_assets)
    workdir: Path | None = None
    start_timeout: float = 180.0
    #: After start.
    plane: ControlPlane | None = None
    node: Node | None = None
    service_ip: str = ""
    _kcm: ChildProcess | None = None
    _own_workdir: bool = False

    def start(self) -> Cluster:
        if not (self.binaries / "kube-controller-manager").exists():
            raise ControlPlaneError(
                f"{self.binaries} lacks kube-controller-manager: run "
                "`hack/controlplane.sh kube-controller-manager` and use the folder it prints"
            )
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="draco-cluster-"))
            self._own_workdir = True
        started = time.monotonic()
        try:
            services = _free_service_range()
            self.service_ip = str(services[1])
            subprocess.run(
                ["ip", "addr", "add", f"{self.service_ip}/32", "dev", "lo"],
                check=True,
                capture_output=True,
                text=True,
            )
            self.plane = ControlPlane(
                binaries=self.binaries,
                workdir=self.workdir / "controlplane",
                bind_address=self.service_ip,
                secure_port=443,
                service_cidr=str(services),
                service_account_admission=True,
            ).start()
            self._start_controller_manager()
            self.node = Node(
                plane=self.plane, assets=self.node_assets, gateway=True, start_timeout=self.start_timeout
            ).start()
        except BaseException:
            self.stop()
            raise
        log.info(
            "Cluster ready",
            server=self.plane.server,
            kubeconfig=str(self.plane.kubeconfig),
            node=self.node.name,
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
        if self.service_ip:
            subprocess.run(
                ["ip", "addr", "del", f"{self.service_ip}/32", "dev", "lo"], capture_output=True, check=False
            )
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

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
