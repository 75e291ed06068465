"""A real node beside the local control plane: containerd with NRI, a kubelet, kube-scheduler.

The binaries and the image come from `hack/node.sh` (built from the Go module proxy and
Debian, cached outside the clone) through `DRACO_NODE_ASSETS`. `Node.start()` gives the
test session, or `make demo`, what a cluster node has:

- a network namespace of its own, `draco-node-<id>` (`draco.tools.dev.netns`), made at
  start and deleted at stop: containerd, the kubelet and kube-scheduler run in it, and
  everything the node serves on is there and nowhere else: the node's address (the
  gateway of its pods' /24 on the bridge `draco0`), the pods' bridge and routes, the
  kubelet's ports. The host's namespace gets no address, route or device from a node. A
  relay (`draco.tools.dev.netproxy forward`) listens inside on 127.0.0.1 at the API
  server's port (so the kubelet and kube-scheduler use the admin kubeconfig unchanged) and
  on the `kubernetes` Service's address, port 443 (where the kubelet tells pods the API
  server is), and connects to the API server on the host's 127.0.0.1. The API server
  reaches the kubelet (`kubectl logs`, `exec`) and pod IPs through its egress proxy, to
  which the node gives a route into its namespace (`ControlPlane.route_to_namespace`);
- containerd 2.x with its own root, state, sockets and NRI socket in a temporary folder,
  the CRI plugin on, CDI off (draco injects devices over NRI, not through the runtime's
  CDI support), NRI's default validator on (a pod annotated
  `required-plugins.noderesource.dev: '["draco"]'` gets no container while no draco
  agent is connected), runc with cgroupfs, the pods' network-namespace pins under its
  state folder, and the local busybox and pause images imported;
- pod networking from the CNI bridge and host-local plugins on the bridge and a /24 of
  the node's own, the bridge the pods' gateway (no masquerading: the namespace routes
  nowhere else);
- a kubelet registered as Node `name` with the admin's credentials (the control plane
  runs RBAC only, without the Node authorizer), serving its API with client-certificate
  and webhook authentication so `kubectl logs` works through the API server;
- kube-scheduler binding pods (`with_scheduler`, or `start_scheduler()` and
  `stop_scheduler()` for a caller that wants it only at times), leader election off.

There is no kube-controller-manager (its garbage collection and namespace deletion would
change what the other e2e tests prove), so `start()` does the one thing its node
lifecycle controller would for a healthy node: it removes the
`node.kubernetes.io/not-ready` taint the kubelet registers the node with, once the node
is Ready.

What this sandbox-like machine needs from the kubelet's configuration, and why:

- `failCgroupV1: false`: the machines have cgroup v1 (hybrid) hierarchies, which
  kubelet 1.35+ refuses by default;
- `cgroupsPerQOS: false`, `enforceNodeAllocatable: []`: no `kubepods` hierarchy is made
  beside the machine's own cgroups; pods are still limited by their own cgroups;
- `failSwapOn: false`, eviction thresholds at 1%: a shared machine is not a
  production node, and pods must not be evicted because of neighbours;
- without CAP_SYS_RESOURCE (missing from the bounding set of our sandboxes) a process
  cannot lower an OOM score, which runc is asked to do for every pod sandbox (-998): then
  containerd's `restrict_oom_score_adj` keeps containers at or above its own score and
  the kubelet's `oomScoreAdj` is 0;
- the kubelet sets the kernel tunables it insists on (`vm.overcommit_memory=1`,
  `kernel.panic=10`, `kernel.panic_on_oops=1`, ...) at start; the values it found are
  recorded first and put back at stop.

`stop()` deletes the node's pods through the API and waits for the kubelet to stop them
(so CNI tears down each pod's network), then stops the kubelet and the scheduler, kills
what is left in containerd, stops it, and removes everything else
(`draco.tools.dev.leftovers`): what still runs in the node's namespace or its pods', the
mounts under the folder, the namespace, the containers' cgroups, the folder. A node whose
owner was killed (SIGKILL) is removed the same way by the next node's `start()`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final

import yaml

from draco.errors import ControlPlaneError
from draco.logs import get_logger
from draco.tools.dev.controlplane import ChildProcess, ControlPlane, claim_workdir
from draco.tools.dev.leftovers import (
    NODE_PREFIX,
    NODE_ROOT,
    TUNABLES_FILE,
    read_sysctl,
    remove_node_leftovers,
    sweep_abandoned_nodes,
)
from draco.tools.dev.netns import NetworkNamespace

__all__ = [
    "IMAGE",
    "NODE_ASSETS_ENV",
    "PAUSE_IMAGE",
    "Node",
    "find_node_assets",
    "node_problems",
]

log = get_logger(__name__)

NODE_ASSETS_ENV: Final = "DRACO_NODE_ASSETS"
#: The workload image `hack/node.sh` builds from Debian's busybox-static.
IMAGE: Final = "draco.invalid/busybox:local"
#: The sandbox ("pause") image made from the same layer.
PAUSE_IMAGE: Final = "draco.invalid/pause:local"
BINARIES: Final = ("kubelet", "kube-scheduler", "containerd", "containerd-shim-runc-v2", "ctr", "runc")
CNI_PLUGINS: Final = ("bridge", "host-local", "loopback")
CRI_NAMESPACE: Final = "k8s.io"
#: The taint a kubelet registers its node with until the node lifecycle controller sees it Ready.
_NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"
#: What the kubelet sets at start (`setupKernelTunables`); restored by `stop()`.
_KERNEL_TUNABLES: Final = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
#: The ports of the node's processes: their defaults, free in a namespace of the node's own.
KUBELET_PORT: Final = 10250
KUBELET_HEALTHZ_PORT: Final = 10248
SCHEDULER_PORT: Final = 10259
#: The pods' bridge, inside the node's namespace.
BRIDGE: Final = "draco0"


def find_node_assets(directory: str | os.PathLike[str] | None = None) -> Path:
    """The folder `hack/node.sh` printed: `directory`, else `DRACO_NODE_ASSETS`."""
    candidate = directory or os.environ.get(NODE_ASSETS_ENV)
    if not candidate:
        raise ControlPlaneError(
            f"no node binaries: run `hack/node.sh` (it builds them once into a cache) and set "
            f"{NODE_ASSETS_ENV} to the folder it prints, or use `make test`"
        )
    path = Path(candidate)
    missing = [f"bin/{b}" for b in BINARIES if not os.access(path / "bin" / b, os.X_OK)]
    missing += [f"cni/{p}" for p in CNI_PLUGINS if not os.access(path / "cni" / p, os.X_OK)]
    if not (path / "images" / "images.tar").is_file():
        missing.append("images/images.tar")
    if missing:
        raise ControlPlaneError(f"{path} lacks {', '.join(missing)}: run `hack/node.sh`")
    return path


def node_problems() -> list[str]:
    """Why this machine cannot run the node (empty when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("containerd and the kubelet need root")
    cgroup = Path("/sys/fs/cgroup")
    if not (cgroup / "cgroup.controllers").exists() and not all(
        (cgroup / c).is_dir() for c in ("cpu", "memory", "pids", "devices")
    ):
        problems.append(
            "no usable cgroup hierarchy under /sys/fs/cgroup (v2, or v1 with cpu, memory, pids, devices)"
        )
    for tool, package in (("ip", "iproute2"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            problems.append(f"no `{tool}` ({package}): the node runs in a network namespace of its own")
    try:
        if "overlay" not in Path("/proc/filesystems").read_text():
            problems.append("the kernel has no overlay filesystem (containerd's snapshotter)")
    except OSError:
        problems.append("cannot read /proc/filesystems")
    return problems


def _has_sys_resource() -> bool:
    """Whether this process holds CAP_SYS_RESOURCE (bit 24 of the effective set)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> 24 & 1)
    except (OSError, ValueError):
        pass
    return False


def _pod_subnet(taken: Sequence[str]) -> ipaddress.IPv4Network:
    """A 10.89.x.0/24 for the node's pods and its own address (the first), apart from the
    ones other nodes of the same control plane route (its egress proxy tells them apart)."""
    used = [ipaddress.ip_network(c) for c in taken]
    choices = list(range(256))
    random.shuffle(choices)
    for third in choices:
        net = ipaddress.IPv4Network(f"10.89.{third}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise ControlPlaneError("no free 10.89.x.0/24 for the node's pods")


@dataclass
class Node:
    """containerd + kubelet (+ kube-scheduler) registered with `plane`, in a network
    namespace of their own; `start()`, `stop()` (or `with`)."""

    plane: ControlPlane
    assets: Path = field(default_factory=find_node_assets)
    name: str = "draco-node"
    with_scheduler: bool = True
    start_timeout: float = 180.0
    #: Without CAP_SYS_RESOURCE (as on our sandboxed machines) no process may lower its OOM
    #: score: containerd then keeps every container at or above its own, and the kubelet
    #: leaves its own alone (both would otherwise ask for negative scores and fail).
    restrict_oom_score_adj: bool = field(default_factory=lambda: not _has_sys_resource())
    #: After start: the folder (`/tmp/draco-node-<id>`), the network namespace (the same
    #: name), the pods' /24 and the node's address in it, the CRI socket, the NRI socket
    #: an agent registers with.
    workdir: Path | None = field(default=None, init=False)
    netns: NetworkNamespace | None = field(default=None, init=False)
    subnet: str = field(default="", init=False)
    address: str = field(default="", init=False)
    containerd_socket: Path = field(default=Path(), init=False)
    nri_socket: Path = field(default=Path(), init=False)
    _processes: dict[str, ChildProcess] = field(default_factory=dict, init=False)

    # ---- lifecycle

    def start(self) -> Node:
        problems = node_problems()
        if problems:
            raise ControlPlaneError("this machine cannot run a test node: " + "; ".join(problems))
        sweep_abandoned_nodes()
        # The folder first, claimed, then the namespace of the same name: a sweep by
        # another run's start never takes a live node's namespace for an orphan.
        self.workdir = Path(tempfile.mkdtemp(prefix=NODE_PREFIX, dir=NODE_ROOT))
        claim_workdir(self.workdir)
        self.containerd_socket = self.workdir / "containerd.sock"
        # In a folder of its own: the folder a chart's agent mounts (agent.nriSocket).
        self.nri_socket = self.workdir / "nri" / "nri.sock"
        self.nri_socket.parent.mkdir(exist_ok=True)
        started = time.monotonic()
        try:
            self._make_network()
            self._write_cni()
            self._start_containerd()
            self._import_images()
            self._start_kubelet()
            self._wait_node_ready()
            self._untaint()
            if self.with_scheduler:
                self.start_scheduler()
        except BaseException:
            self.stop()
            raise
        log.info(
            "Node ready",
            node=self.name,
            netns=self.netns.name if self.netns else "",
            address=self.address,
            containerd=str(self.containerd_socket),
            nri=str(self.nri_socket),
            seconds=round(time.monotonic() - started, 2),
        )
        return self

    def stop(self) -> None:
        if "kubelet" in self._processes:
            self._drain()
        self.stop_scheduler()
        process = self._processes.pop("kubelet", None)
        if process is not None:
            process.stop()
        if "containerd" in self._processes:
            self._kill_leftover_tasks()
            self._processes.pop("containerd").stop()
        for process in self._processes.values():
            process.stop()
        self._processes.clear()
        if self.netns is not None:
            self.plane.unroute(self.netns.name)
        if self.workdir is not None or self.netns is not None:
            # The shims outlive containerd by design; they and anything else still in the
            # node's namespaces go here.
            killed = remove_node_leftovers(self.workdir, self.netns)
            log.info("Node removed", node=self.name, killed=killed)
        self.workdir = self.netns = None

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- helpers for callers

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run `ctr` against this node's containerd, in the CRI namespace."""
        result = subprocess.run(
            [
                str(self.assets / "bin" / "ctr"),
                "--address",
                str(self.containerd_socket),
                "-n",
                CRI_NAMESPACE,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def import_image(self, tarball: Path) -> None:
        """Import an OCI image tarball (`hack/image.sh`'s) into the CRI's image store, where
        the kubelet finds it without a registry (`imagePullPolicy: IfNotPresent`)."""
        self.ctr("images", "import", "--platform", "linux/amd64", str(tarball), timeout=600)

    def logs(self, name: str, lines: int = 40) -> str:
        """The last lines of a node process's log (containerd, kubelet, kube-scheduler)."""
        process = self._processes.get(name)
        return process.tail(lines) if process else ""

    # ---- internals

    def _spawn(
        self, name: str, argv: Sequence[str], *, env: dict[str, str] | None = None, inside: bool = True
    ) -> ChildProcess:
        """Start a process of the node, in its network namespace unless `inside` is off."""
        assert self.workdir is not None and self.netns is not None
        log_path = self.workdir / f"{name}.log"
        with log_path.open("wb") as out:
            popen = subprocess.Popen(
                self.netns.argv(argv) if inside else list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        (self.workdir / f"{name}.pid").write_text(str(popen.pid))
        process = ChildProcess(name, popen, log_path)
        self._processes[name] = process
        return process

    def _wait(
        self, process: ChildProcess, ready: Callable[[], bool], what: str, *, timeout: float | None = None
    ) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{process.name} exited with code {process.popen.returncode} while starting:\n{process.tail()}"
                )
            if ready():
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"{what} within {timeout or self.start_timeout}s:\n{process.tail()}")

    def _make_network(self) -> None:
        """The node's namespace: the bridge with the node's address (the pods' gateway), the
        `kubernetes` Service's address on loopback, the relay to the API server, and the API
        server's route into it."""
        assert self.workdir is not None
        subnet = _pod_subnet(self.plane.routed_cidrs())
        self.subnet, self.address = str(subnet), str(subnet[1])
        # Known before it is made: a failed start (or stop) removes what was made of it.
        self.netns = NetworkNamespace(self.workdir.name)
        self.netns.create()
        self.netns.ip("link", "add", BRIDGE, "type", "bridge")
        self.netns.ip("addr", "add", f"{self.address}/{subnet.prefixlen}", "dev", BRIDGE)
        self.netns.ip("link", "set", BRIDGE, "up")
        service = self.plane.service_address
        self.netns.ip("addr", "add", f"{service}/32", "dev", "lo")
        port = self.plane.port
        relay_argv = [
            sys.executable,
            "-m",
            "draco.tools.dev.netproxy",
            "forward",
            "--netns",
            str(self.netns.path),
        ]
        relay_argv += [
            "--listen",
            f"127.0.0.1:{port}",
            "--listen",
            f"{service}:443",
            "--to",
            f"127.0.0.1:{port}",
        ]
        relay = self._spawn("api-relay", relay_argv, inside=False)
        netns = self.netns
        self._wait(
            relay,
            lambda: netns.connectable("127.0.0.1", port) and netns.connectable(service, 443),
            "the relay to the API server did not listen in the node's namespace",
            timeout=60,
        )
        self.plane.route_to_namespace(netns.name, netns=netns.path, cidrs=[self.subnet])

    def _write_cni(self) -> None:
        assert self.workdir is not None
        conf_dir = self.workdir / "cni" / "net.d"
        conf_dir.mkdir(parents=True)
        conflist = {
            "cniVersion": "1.0.0",
            "name": "draco-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    # The bridge already has the gateway (the node's address); pods route
                    # through it to the node's namespace and nowhere else.
                    "isGateway": True,
                    "isDefaultGateway": True,
                    "ipMasq": False,
                    "hairpinMode": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.subnet, "gateway": self.address}]],
                        "dataDir": str(self.workdir / "cni" / "ipam"),
                    },
                }
            ],
        }
        (conf_dir / "10-draco-node.conflist").write_text(json.dumps(conflist, indent=2))

    def _containerd_config(self) -> str:
        assert self.workdir is not None
        w, a = self.workdir, self.assets
        return f"""version = 3
root = "{w}/containerd/root"
state = "{w}/containerd/state"

[grpc]
  address = "{self.containerd_socket}"

[ttrpc]
  address = "{self.containerd_socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{w}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = false
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = {str(self.restrict_oom_score_adj).lower()}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{a}/cni"]
    conf_dir = "{w}/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{a}/bin/runc"
        Root = "{w}/runc"
        SystemdCgroup = false

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{self.nri_socket}"
  plugin_path = "{w}/nri/plugins"
  plugin_config_path = "{w}/nri/conf.d"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"
  [plugins."io.containerd.nri.v1.nri".default_validator]
    enable = true
"""

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.assets / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def _start_containerd(self) -> None:
        assert self.workdir is not None
        config = self.workdir / "containerd.toml"
        config.write_text(self._containerd_config())
        process = self._spawn(
            "containerd",
            [str(self.assets / "bin" / "containerd"), "--config", str(config), "--log-level", "info"],
            env=self._env(),
        )

        def ready() -> bool:
            return (
                self.containerd_socket.exists()
                and self.ctr("version", check=False, timeout=10).returncode == 0
            )

        self._wait(process, ready, "containerd did not answer on its socket")

    def _import_images(self) -> None:
        self.ctr(
            "images",
            "import",
            "--platform",
            "linux/amd64",
            str(self.assets / "images" / "images.tar"),
            timeout=120,
        )

    def _kubelet_config(self) -> dict[str, object]:
        assert self.workdir is not None and self.plane.certs is not None
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # Every address of the node's namespace: the node's, its loopback.
            "address": "0.0.0.0",
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": KUBELET_HEALTHZ_PORT,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "failCgroupV1": False,
            "podLogsDir": str(self.workdir / "pod-logs"),
            "volumePluginDir": str(self.workdir / "kubelet" / "volume-plugins"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.plane.certs.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "nodeStatusUpdateFrequency": "4s",
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "rotateCertificates": False,
            "oomScoreAdj": 0 if self.restrict_oom_score_adj else -999,
        }

    def _start_kubelet(self) -> None:
        assert self.workdir is not None and self.netns is not None
        found = {name: value for name in _KERNEL_TUNABLES if (value := read_sysctl(name)) is not None}
        (self.workdir / TUNABLES_FILE).write_text(json.dumps(found))
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config()))
        process = self._spawn(
            "kubelet",
            [
                str(self.assets / "bin" / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={self.plane.kubeconfig}",
                f"--root-dir={self.workdir / 'kubelet'}",
                f"--cert-dir={self.workdir / 'kubelet' / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.address}",
                "--v=2",
            ],
            env=self._env(),
        )
        netns = self.netns
        self._wait(
            process,
            lambda: netns.http_ok(f"http://127.0.0.1:{KUBELET_HEALTHZ_PORT}/healthz"),
            "the kubelet was not healthy",
        )

    def _wait_node_ready(self) -> None:
        def ready() -> bool:
            out = self.plane.kubectl("get", "node", self.name, "-o", "json", check=False)
            if out.returncode != 0:
                return False
            conditions = json.loads(out.stdout).get("status", {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        self._wait(self._processes["kubelet"], ready, f"node {self.name} was not Ready")

    def _untaint(self) -> None:
        """Remove the taint the kubelet registers with: the node lifecycle controller of
        kube-controller-manager would once the node is Ready, and none runs here."""
        out = self.plane.kubectl("get", "node", self.name, "-o", "json")
        taints = json.loads(out.stdout).get("spec", {}).get("taints") or []
        for taint in taints:
            if taint.get("key") == _NOT_READY_TAINT:
                self.plane.kubectl("taint", "node", self.name, f"{_NOT_READY_TAINT}:{taint['effect']}-")

    def start_scheduler(self) -> None:
        """Start kube-scheduler (the default profile: it binds every pod that names no
        other scheduler, anywhere in the cluster); no-op while it runs."""
        assert self.netns is not None, "start the node first"
        if "kube-scheduler" in self._processes:
            return
        kubeconfig = str(self.plane.kubeconfig)
        process = self._spawn(
            "kube-scheduler",
            [
                str(self.assets / "bin" / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={SCHEDULER_PORT}",
            ],
        )
        netns = self.netns
        self._wait(
            process,
            lambda: netns.http_ok(f"https://127.0.0.1:{SCHEDULER_PORT}/healthz"),
            "kube-scheduler was not healthy",
            timeout=90,
        )

    def stop_scheduler(self) -> None:
        """Stop kube-scheduler; pods it bound stay bound (the kubelet runs them)."""
        process = self._processes.pop("kube-scheduler", None)
        if process is not None:
            process.stop()

    # ---- teardown

    def _tasks(self) -> list[str]:
        if not self.containerd_socket.exists():
            return []
        out = self.ctr("tasks", "list", "-q", check=False, timeout=20)
        return (
            [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []
        )

    def _drain(self) -> None:
        """Delete the node's pods and let the kubelet stop them (CNI teardown included)."""
        result = self.plane.kubectl(
            "delete",
            "pods",
            "--all-namespaces",
            f"--field-selector=spec.nodeName={self.name}",
            "--grace-period=1",
            "--wait=false",
            check=False,
            timeout=30,
        )
        if result.returncode != 0:
            log.warning("Could not delete the node's pods", error=result.stderr.strip())
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self._tasks():
            time.sleep(0.5)

    def _kill_leftover_tasks(self) -> None:
        tasks = self._tasks()
        for task in tasks:
            self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task, check=False, timeout=20)
        for task in tasks:
            for _ in range(20):
                if self.ctr("tasks", "delete", task, check=False, timeout=20).returncode == 0:
                    break
                time.sleep(0.25)
        if tasks:
            log.warning("Killed containers the kubelet left behind", count=len(tasks))
