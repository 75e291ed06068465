"""A real etcd + kube-apiserver on loopback, for the test session and `make demo`.

The binaries come from `hack/controlplane.sh` (built from the Go module proxy and cached
outside the clone) or from `KUBEBUILDER_ASSETS`. They are started the way envtest starts
them: free loopback ports, a throwaway PKI, an admin client certificate in
`system:masters`, RBAC on, no ServiceAccount admission (there is no controller-manager to
mint tokens; tests mint them with the TokenRequest API), and Services routed to their
endpoints by kube-apiserver itself (`--enable-aggregator-routing`: no kube-proxy). The
native DRA API (`resource.k8s.io/v1`, DeviceTaintRule included) is served; the flag set is
kept per Kubernetes minor, because an unknown feature gate stops kube-apiserver from
starting.

kube-apiserver listens on 127.0.0.1 only. What it dials in the cluster's network (a
kubelet for logs and exec, a webhook at its Service's endpoints) goes through an egress
proxy of its own (`draco.tools.dev.netproxy egress`), which connects from inside a test
node's network namespace when a route file of that node holds the address, from the host's
namespace otherwise.

There is no scheduler, kubelet or controller-manager: pods stay Pending unless a test
changes their status or starts a real node beside it (`draco.tools.dev.node`), namespaces
never finish terminating, and nothing garbage-collects by owner references — which is
exactly what lets tests prove the operator does its own cleanup.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import yaml

from draco.errors import ControlPlaneError
from draco.logs import get_logger
from draco.runtime.files import write_private
from draco.tools.dev.certs import ControlPlaneCerts, write_certs

__all__ = [
    "ChildProcess",
    "ControlPlane",
    "abandoned",
    "claim_workdir",
    "find_binaries",
    "free_port",
    "stop_recorded_children",
    "sweep_abandoned",
]

log = get_logger(__name__)

BINARIES = ("etcd", "kube-apiserver", "kubectl")

# Feature gates beyond the defaults, per minor (an unknown gate stops kube-apiserver, so
# each minor lists only its own). 1.30-1.33 run with their defaults, as most such clusters
# do: no native DRA API is needed, and 1.30 does not serve CRD selectableFields (its
# CustomResourceFieldSelectors gate is alpha, off), which is what tests draco's fallback to
# labels there. 1.37 serves DeviceTaintRule in resource.k8s.io/v1 by default; list-typed
# attributes are still alpha; v1beta1 and v1beta2 are turned on (off by default since
# 1.34), so draco's conversion and verdicts in those versions are compared with upstream's.
_EXTRA_FLAGS: dict[str, list[str]] = {
    "1.30": [],
    "1.31": [],
    "1.32": [],
    "1.33": [],
    # Not run by the project (`make compat` runs 1.30-1.33 and 1.37): their defaults.
    "1.34": [],
    "1.35": [],
    "1.36": [
        "--feature-gates=DRADeviceTaintRules=true,DRAListTypeAttributes=true",
        "--runtime-config=resource.k8s.io/v1beta2=true",
    ],
    "1.37": [
        "--feature-gates=DRAListTypeAttributes=true",
        "--runtime-config=resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true",
    ],
}


def find_binaries(directory: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding etcd, kube-apiserver and kubectl: `directory`, else
    `KUBEBUILDER_ASSETS`. Raises `ControlPlaneError` saying how to get them."""
    candidate = directory or os.environ.get("KUBEBUILDER_ASSETS")
    if not candidate:
        raise ControlPlaneError(
            "no control-plane binaries: run `hack/controlplane.sh` (it builds them once into a "
            "cache) and set KUBEBUILDER_ASSETS to the folder it prints, or use `make test`"
        )
    path = Path(candidate)
    missing = [b for b in BINARIES if not os.access(path / b, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{path} lacks {', '.join(missing)}: run `hack/controlplane.sh`")
    return path


#: The ports `free_port` handed out in this process: the kernel may give a port just released
#: to the next probe, so two calls before either port is bound (one process's metrics and
#: another's health port) could otherwise return the same one.
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port that was free a moment ago and that this process was not given before
    (callers retry if another process took it since)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def _tmp_root() -> str | None:
    # etcd writes a lot for nothing: keep its data in memory when the machine has tmpfs.
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


_OWNER_FILE = "owner.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim_workdir(workdir: Path) -> None:
    """Mark `workdir` as this process's: `sweep_abandoned` removes it once this process is gone."""
    (workdir / _OWNER_FILE).write_text(str(os.getpid()))


def abandoned(workdir: Path) -> bool:
    """Whether `workdir` names an owner (`claim_workdir`) that is no longer alive."""
    try:
        owner = int((workdir / _OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return not _alive(owner)


def stop_recorded_children(workdir: Path, *, needle: str = "") -> None:
    """SIGKILL the process group of every `*.pid` file under `workdir` whose process still
    names the folder (or `needle`) on its command line (a reused pid is left alone). The
    files of a sub-folder count too (a whole cluster's control plane is one)."""
    for pid_file in [*workdir.glob("*.pid"), *workdir.glob("*/*.pid")]:
        if pid_file.name == _OWNER_FILE:
            continue
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if (needle or str(workdir)).encode() in cmdline:
                os.killpg(pid, signal.SIGKILL)


def sweep_abandoned(root: str | os.PathLike[str] | None = None, pattern: str = "draco-cp-*") -> list[Path]:
    """Remove the work folders (`pattern` under `root`) of control planes whose owner died
    without stopping them (a test session or benchmark killed with SIGKILL), and stop the
    processes still running there (etcd, kube-apiserver, the egress proxy; for a whole
    cluster's folder also kube-controller-manager). In /dev/shm each such folder holds an
    etcd's data in memory.

    A folder is abandoned when its `owner.pid` names no live process. Its children are
    stopped only if their command line still names the folder (a reused pid is left
    alone). Folders without an owner file (older layouts, other tools) are kept."""
    base = Path(root if root is not None else (_tmp_root() or tempfile.gettempdir()))
    removed: list[Path] = []
    for workdir in sorted(base.glob(pattern)):
        if not abandoned(workdir):
            continue
        stop_recorded_children(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
        removed.append(workdir)
    if removed:
        log.info("Removed abandoned control planes", folders=[str(w) for w in removed])
    return removed


@dataclass
class ChildProcess:
    """A started binary of the local cluster, its output in `log_path`."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, *, timeout: float = 20) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)


@dataclass
class ControlPlane:
    """etcd + kube-apiserver, started by `start()` (or `with`), stopped by `stop()`.

    After start: `server` is the API URL, `kubeconfig` a file with admin credentials,
    `kubectl(...)` runs the matching kubectl against it.
    """

    binaries: Path = field(default_factory=find_binaries)
    workdir: Path | None = None
    start_timeout: float = 90.0
    #: The Services' range. Its first address, the `kubernetes` Service's, is named by the
    #: serving certificate: a test node forwards it to the API server inside its network
    #: namespace, where pods dial it (`draco.tools.dev.node`).
    service_cidr: str = "10.0.0.0/24"
    #: The ServiceAccount admission plugin (a pod's token volume, its account must exist):
    #: off unless a kube-controller-manager makes the accounts and publishes the CA.
    service_account_admission: bool = False
    server: str = ""
    kubeconfig: Path = Path()
    certs: ControlPlaneCerts | None = None
    #: The abstract unix socket of the egress proxy (`@draco-egress-...`) and the folder of
    #: the route files that send an address into a node's network namespace.
    egress_socket: str = ""
    _processes: list[ChildProcess] = field(default_factory=list)
    _own_workdir: bool = False
    _etcd_url: str = ""

    # ---- lifecycle

    def start(self) -> ControlPlane:
        if self.workdir is None:
            sweep_abandoned()
            self.workdir = Path(tempfile.mkdtemp(prefix="draco-cp-", dir=_tmp_root()))
            claim_workdir(self.workdir)
            self._own_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            self.certs = write_certs(self.workdir / "pki", hosts=(self.service_address,))
            self._start_egress_proxy()
            etcd_url = self._start_etcd()
            self._start_apiserver(etcd_url)
            self.kubeconfig = self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        log.info(
            "Control plane ready",
            server=self.server,
            kubeconfig=str(self.kubeconfig),
            version=self.version(),
            seconds=round(time.monotonic() - started, 2),
        )
        return self

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- helpers for callers

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane; raises on failure unless `check=False`."""
        result = subprocess.run(
            [str(self.binaries / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def version(self) -> str:
        out = subprocess.run(
            [str(self.binaries / "kube-apiserver"), "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip().removeprefix("Kubernetes ")

    @property
    def service_address(self) -> str:
        """The `kubernetes` Service's ClusterIP: the first address of the Services' range."""
        return str(ipaddress.ip_network(self.service_cidr)[1])

    @property
    def port(self) -> int:
        """The API server's port on 127.0.0.1."""
        return int(self.server.rsplit(":", 1)[1])

    def route_to_namespace(self, name: str, *, netns: Path, cidrs: Sequence[str]) -> None:
        """Have the API server dial `cidrs` (a node's address, its pods') from inside the
        network namespace pinned at `netns`, through the egress proxy; `unroute(name)` ends it."""
        assert self.workdir is not None
        routes = self.workdir / "egress"
        routes.mkdir(exist_ok=True)
        temporary = routes / f".{name}.tmp"
        temporary.write_text(json.dumps({"netns": str(netns), "cidrs": list(cidrs)}))
        temporary.rename(routes / f"{name}.json")

    def unroute(self, name: str) -> None:
        if self.workdir is not None:
            (self.workdir / "egress" / f"{name}.json").unlink(missing_ok=True)

    def routed_cidrs(self) -> list[str]:
        """Every CIDR a route file sends into a namespace (a new node picks another)."""
        cidrs: list[str] = []
        for path in (self.workdir / "egress").glob("*.json") if self.workdir else ():
            with contextlib.suppress(OSError, ValueError, KeyError):
                cidrs += json.loads(path.read_text())["cidrs"]
        return cidrs

    def env(self) -> dict[str, str]:
        """Environment for child processes (operator, agent) that should use this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBEBUILDER_ASSETS": str(self.binaries)}

    # ---- internals

    def _spawn(self, name: str, argv: Sequence[str]) -> ChildProcess:
        assert self.workdir is not None
        log_path = self.workdir / f"{name}.log"
        with log_path.open("wb") as out:
            popen = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        # A session of its own (the pgid is the pid): so `sweep_abandoned` can stop it.
        (self.workdir / f"{name}.pid").write_text(str(popen.pid))
        process = ChildProcess(name, popen, log_path)
        self._processes.append(process)
        return process

    def _wait_ready(self, process: ChildProcess, url: str, *, context: ssl.SSLContext | None = None) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{process.name} exited with code {process.popen.returncode} while starting:\n{process.tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise ControlPlaneError(
            f"{process.name} was not ready at {url} within {self.start_timeout}s ({last}):\n{process.tail()}"
        )

    def _start_egress_proxy(self) -> None:
        """The `cluster` egress of kube-apiserver (`draco.tools.dev.netproxy egress`): how it
        reaches a test node's kubelet and pods, which live in network namespaces of their own."""
        assert self.workdir is not None
        (self.workdir / "egress").mkdir(exist_ok=True)
        self.egress_socket = f"@draco-egress-{secrets.token_hex(8)}"
        (self.workdir / "egress.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "apiserver.k8s.io/v1beta1",
                    "kind": "EgressSelectorConfiguration",
                    "egressSelections": [
                        {
                            "name": "cluster",
                            "connection": {
                                "proxyProtocol": "HTTPConnect",
                                "transport": {"uds": {"udsName": self.egress_socket}},
                            },
                        }
                    ],
                }
            )
        )
        process = self._spawn(
            "egress-proxy",
            [
                sys.executable,
                "-m",
                "draco.tools.dev.netproxy",
                "egress",
                "--socket",
                self.egress_socket,
                "--routes",
                str(self.workdir / "egress"),
            ],
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                break
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect("\0" + self.egress_socket[1:])
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise ControlPlaneError(f"the egress proxy did not listen on {self.egress_socket}:\n{process.tail()}")

    def _start_etcd(self) -> str:
        assert self.workdir is not None
        for _attempt in range(3):
            client, peer = free_port(), free_port()
            url = f"http://127.0.0.1:{client}"
            process = self._spawn(
                "etcd",
                [
                    str(self.binaries / "etcd"),
                    f"--data-dir={self.workdir / 'etcd'}",
                    f"--listen-client-urls={url}",
                    f"--advertise-client-urls={url}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-cluster=default=http://127.0.0.1:{peer}",
                    "--unsafe-no-fsync=true",
                    "--quota-backend-bytes=4294967296",
                    "--log-level=warn",
                ],
            )
            try:
                self._wait_ready(process, f"{url}/health")
                return url
            except ControlPlaneError:
                if "address already in use" not in process.tail():
                    raise
                process.stop()
                self._processes.remove(process)
        raise ControlPlaneError("etcd could not find a free port in three attempts")

    def _minor(self) -> str:
        version = self.version().lstrip("v")
        return ".".join(version.split(".")[:2])

    def _start_apiserver(self, etcd_url: str) -> None:
        self._etcd_url = etcd_url
        _, self.server = self._spawn_apiserver("kube-apiserver", issuer=None)

    def start_apiserver(self, name: str) -> tuple[ChildProcess, str]:
        """Another kube-apiserver over this control plane's etcd, ready, and its URL: the
        same data, a watch cache of its own (a client moved from one such server to a
        newer one sees what a restarted API server shows it: a watch from before is too
        old, 410). Stop it with its ``stop()``; `stop()` of the control plane does anyway."""
        return self._spawn_apiserver(name, issuer=self.server)

    def child(self, name: str) -> ChildProcess:
        """The running binary `name` of this control plane (`etcd`, `kube-apiserver`): fault
        injection pauses etcd with SIGSTOP/SIGCONT on its `popen`."""
        for process in self._processes:
            if process.name == name:
                return process
        raise ControlPlaneError(f"the control plane runs no {name}")

    def restart_apiserver(self) -> None:
        """Stop the control plane's kube-apiserver (SIGTERM) and start it again on the same
        address, ready: clients keep their kubeconfig and see what a restarted API server
        shows them (connections dropped, watches ended, a watch cache rebuilt from etcd)."""
        old = self.child("kube-apiserver")
        old.stop()
        self._processes.remove(old)
        port = self.port
        context = ssl.create_default_context(cafile=str(self.certs.ca_cert)) if self.certs else None
        deadline = time.monotonic() + self.start_timeout
        while True:
            process = self._spawn("kube-apiserver", self._apiserver_argv(port, issuer=self.server))
            try:
                self._wait_ready(process, f"{self.server}/readyz", context=context)
                return
            except ControlPlaneError:
                # The old listener's port may still be held a moment after it exited.
                process.stop()
                self._processes.remove(process)
                if "address already in use" not in process.tail() or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _spawn_apiserver(self, name: str, *, issuer: str | None) -> tuple[ChildProcess, str]:
        assert self.workdir is not None and self.certs is not None
        minor = self._minor()
        if minor not in _EXTRA_FLAGS:
            known = ", ".join(sorted(_EXTRA_FLAGS, key=lambda v: tuple(map(int, v.split(".")))))
            raise ControlPlaneError(
                f"kube-apiserver {self.version()}: the dev control plane knows the flags of "
                f"Kubernetes {known} only (draco needs 1.30 or newer); add this minor to "
                "_EXTRA_FLAGS in draco.tools.dev.controlplane"
            )
        certs = self.certs
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        for _attempt in range(3):
            port = free_port()
            server = f"https://127.0.0.1:{port}"
            process = self._spawn(name, self._apiserver_argv(port, issuer=issuer or server))
            try:
                self._wait_ready(process, f"{server}/readyz", context=context)
                return process, server
            except ControlPlaneError:
                if "address already in use" not in process.tail():
                    raise
                process.stop()
                self._processes.remove(process)
        raise ControlPlaneError(f"{name} could not find a free port in three attempts")

    def _apiserver_argv(self, port: int, *, issuer: str) -> list[str]:
        assert self.workdir is not None and self.certs is not None
        certs, etcd_url = self.certs, self._etcd_url
        return [
            str(self.binaries / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--cert-dir={self.workdir / 'pki'}",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
            f"--client-ca-file={certs.ca_cert}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--allow-privileged=true",
            *([] if self.service_account_admission else ["--disable-admission-plugins=ServiceAccount"]),
            "--authorization-mode=RBAC",
            f"--service-account-issuer={issuer}/",
            f"--service-account-key-file={certs.sa_pub}",
            f"--service-account-signing-key-file={certs.sa_key}",
            # For a kubelet of the test node (hack/node.sh): logs and exec go
            # through it with the admin's certificate, to the node's IP.
            f"--kubelet-client-certificate={certs.admin_cert}",
            f"--kubelet-client-key={certs.admin_key}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            "--enable-priority-and-fairness=false",
            # Webhooks referenced by Service go straight to the Service's endpoints
            # (there is no kube-proxy): the chart's test points them at a process.
            "--enable-aggregator-routing=true",
            # What it dials in the cluster's network (kubelets, endpoints) goes through
            # the egress proxy, which reaches into the test nodes' network namespaces.
            f"--egress-selector-config-file={self.workdir / 'egress.yaml'}",
            *_EXTRA_FLAGS[self._minor()],
        ]

    def _write_kubeconfig(self) -> Path:
        assert self.workdir is not None and self.certs is not None

        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "draco-dev",
                    "cluster": {"server": self.server, "certificate-authority-data": b64(self.certs.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64(self.certs.admin_cert),
                        "client-key-data": b64(self.certs.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "draco-dev", "context": {"cluster": "draco-dev", "user": "admin"}}],
            "current-context": "draco-dev",
        }
        # The admin's client key: owner-only from its first byte.
        return write_private(self.workdir / "kubeconfig", yaml.safe_dump(config).encode(), sync=False)


@contextlib.contextmanager
def running(binaries: Path | None = None) -> Iterator[ControlPlane]:
    """`with running() as cp:` — a started control plane, stopped on exit."""
    plane = ControlPlane(binaries=binaries or find_binaries())
    with plane:
        yield plane
