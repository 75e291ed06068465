"""A test node's network namespace, its relays and its sweep, without a node's binaries.

The relays (`draco.tools.dev.netproxy`) carry the kubelet's and the pods' connections from
inside a namespace to the API server on the host's 127.0.0.1, and the API server's from the
host into the namespace that holds an address. What a node whose owner was killed left
behind (processes in its namespace and in its pods', a recorded child, mounts, the
namespace, the folder) is gone after the next node's sweep; a live node's stays.

Needs root (namespaces, mounts), as the real node does.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from draco.tools.dev.leftovers import NODE_PREFIX, NODE_ROOT, sweep_abandoned_nodes
from draco.tools.dev.netns import NetworkNamespace, namespace_inode
from tests.e2e.support import scaled, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and mounts need root"),
]

INSIDE = "10.89.250.1"


def serve(listener: socket.socket, greeting: bytes) -> None:
    """Answer every connection with `greeting`, until the listener is closed."""
    listener.listen()

    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(greeting)

    threading.Thread(target=loop, daemon=True).start()


def read_all(sock: socket.socket) -> bytes:
    sock.settimeout(scaled(10))
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


@pytest.fixture
def namespace() -> Iterator[NetworkNamespace]:
    # Not `draco-node-*`: a node's sweep must not take it for an orphan.
    netns = NetworkNamespace(f"draco-test-{secrets.token_hex(4)}").create()
    try:
        yield netns
    finally:
        netns.delete()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def relay(*args: str) -> list[str]:
    return [sys.executable, "-m", "draco.tools.dev.netproxy", *args]


def connect_via_egress(name: str, target: str) -> tuple[bytes, bytes]:
    """CONNECT `target` through the egress proxy as kube-apiserver does: (status line, then data)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(scaled(10))
        sock.connect("\0" + name)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(1)
            if not chunk:
                break
            head += chunk
        return head.split(b"\r\n", 1)[0], read_all(sock) if b" 200 " in head else b""


def test_the_relays_cross_between_the_hosts_namespace_and_a_nodes(
    namespace: NetworkNamespace, processes: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    namespace.ip("addr", "add", f"{INSIDE}/32", "dev", "lo")
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    serve(host, b"host namespace\n")
    inside = namespace.socket()
    inside.bind((INSIDE, 0))
    serve(inside, b"node namespace\n")
    host_port, inside_port = host.getsockname()[1], inside.getsockname()[1]
    try:
        # forward: listens inside (any port: the namespace is empty), connects on the host's 127.0.0.1.
        listens = ["--listen", "127.0.0.1:8443", "--listen", f"{INSIDE}:443"]
        forward = relay("forward", "--netns", str(namespace.path), *listens, "--to", f"127.0.0.1:{host_port}")
        processes.append(subprocess.Popen(forward))
        wait_for(lambda: namespace.connectable(INSIDE, 443), timeout=60, what="the forward relay")
        for address in (("127.0.0.1", 8443), (INSIDE, 443)):
            with namespace.socket() as sock:
                sock.settimeout(scaled(10))
                sock.connect(address)
                assert read_all(sock) == b"host namespace\n"

        # egress: an address a route file holds is dialled inside, any other one on the host.
        routes = tmp_path / "routes"
        routes.mkdir()
        (routes / "node.json").write_text(
            json.dumps({"netns": str(namespace.path), "cidrs": ["10.89.250.0/24"]})
        )
        name = f"draco-egress-test-{secrets.token_hex(4)}"
        processes.append(subprocess.Popen(relay("egress", "--socket", f"@{name}", "--routes", str(routes))))

        def listening() -> bool:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                return probe.connect_ex("\0" + name) == 0

        wait_for(listening, timeout=60, what="the egress proxy")
        assert connect_via_egress(name, f"{INSIDE}:{inside_port}") == (
            b"HTTP/1.1 200 Connection established",
            b"node namespace\n",
        )
        assert connect_via_egress(name, f"127.0.0.1:{host_port}")[1] == b"host namespace\n"
        # Nothing listens there inside the namespace: refused, said as a 502.
        status, _ = connect_via_egress(name, f"{INSIDE}:1")
        assert status == b"HTTP/1.1 502 Bad Gateway"
    finally:
        host.close()
        inside.close()


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def entered(process: subprocess.Popen[bytes], namespace: str | os.PathLike[str]) -> bool:
    """Whether `process` has joined the network namespace pinned at `namespace` (nsenter's
    setns happens after the process exists, so a sweep before it would find nobody inside)."""
    inode = namespace_inode(namespace)
    return (
        process.poll() is None
        and inode is not None
        and namespace_inode(f"/proc/{process.pid}/ns/net") == inode
    )


def fake_node(owner: int, processes: list[subprocess.Popen[bytes]]) -> tuple[Path, NetworkNamespace]:
    """What a node leaves when its owner is killed, without its binaries: a claimed folder,
    its namespace with a process in it, a pod's pinned namespace with a process in it, a
    recorded relay naming the folder, and a mount under the folder.

    Built owned by this (live) process and handed to `owner` only once complete: a node
    starting in another test worker sweeps too, and would otherwise clear a node with a
    dead owner while it is being built."""
    workdir = NODE_ROOT / f"{NODE_PREFIX}{secrets.token_hex(4)}"
    workdir.mkdir()
    (workdir / "owner.pid").write_text(str(os.getpid()))
    netns = NetworkNamespace(workdir.name).create()
    pin = workdir / "containerd" / "state" / "netns" / "cni-test"
    pin.parent.mkdir(parents=True)
    pin.touch()
    subprocess.run(["unshare", f"--net={pin}", "true"], check=True)
    mount = workdir / "kubelet" / "pods" / "volume"
    mount.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], check=True)
    sleep = ["sleep", "600"]
    processes.append(subprocess.Popen(netns.argv(sleep), start_new_session=True))
    processes.append(subprocess.Popen(["nsenter", f"--net={pin}", "--", *sleep], start_new_session=True))
    keeper = [sys.executable, "-c", "import time; time.sleep(600)", f"--netns={netns.path}"]
    processes.append(subprocess.Popen(keeper, start_new_session=True))
    (workdir / "api-relay.pid").write_text(str(processes[-1].pid))
    # Each process is where it should be before the sweep runs.
    in_node, in_pod, relay = processes[-3:]
    wait_for(lambda: entered(in_node, netns.path) and entered(in_pod, pin), timeout=scaled(30))
    # Between fork and exec the relay still carries pytest's command line.
    wait_for(
        lambda: str(netns.path).encode() in Path(f"/proc/{relay.pid}/cmdline").read_bytes(),
        timeout=scaled(30),
    )
    (workdir / "owner.pid").write_text(str(owner))
    return workdir, netns


def mounts_under(workdir: Path) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(workdir) in line]


def test_what_a_killed_nodes_owner_left_goes_with_the_next_sweep(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    workdir, netns = fake_node(dead_pid(), processes)
    left = list(processes)
    assert mounts_under(workdir) and netns.exists()

    # This sweep, or one a node in another test worker ran a moment before (then it is
    # gone, or on its way out).
    assert workdir.name in sweep_abandoned_nodes() or not netns.exists() or not workdir.exists()

    for process in left:
        assert process.wait(timeout=scaled(30)) == -9
    wait_for(lambda: not netns.exists() and not mounts_under(workdir) and not workdir.exists(), timeout=30)


def test_a_namespace_whose_folder_is_gone_is_swept(processes: list[subprocess.Popen[bytes]]) -> None:
    """The owner was killed while removing its node: the folder went, the namespace not."""
    name = f"{NODE_PREFIX}{secrets.token_hex(4)}"
    # The folder, owned by this live process, keeps other workers' sweeps off the namespace
    # until its process is inside; then it goes, as the killed owner's did.
    workdir = NODE_ROOT / name
    workdir.mkdir()
    (workdir / "owner.pid").write_text(str(os.getpid()))
    netns = NetworkNamespace(name).create()
    processes.append(subprocess.Popen(netns.argv(["sleep", "600"]), start_new_session=True))
    wait_for(lambda: entered(processes[-1], netns.path), timeout=scaled(30))
    (workdir / "owner.pid").unlink()
    workdir.rmdir()

    assert netns.name in sweep_abandoned_nodes() or not netns.exists()  # or another worker's sweep

    assert processes[-1].wait(timeout=scaled(30)) == -9
    wait_for(lambda: not netns.exists(), timeout=30)


def test_a_live_nodes_folder_and_namespace_stay(processes: list[subprocess.Popen[bytes]]) -> None:
    workdir, netns = fake_node(os.getpid(), processes)
    try:
        assert workdir.name not in sweep_abandoned_nodes()
        assert all(p.poll() is None for p in processes)
        assert netns.exists() and workdir.exists()
    finally:
        (workdir / "owner.pid").write_text(str(dead_pid()))
        sweep_abandoned_nodes()
    assert not workdir.exists() and not netns.exists()
