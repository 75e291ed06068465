"""A network namespace of a test node's own, made and removed by the run that uses it.

The rule of the machines we test on: servers a test runs are reached on loopback, or on
addresses inside network namespaces the test itself created; the host's own namespace gets
no address, no route and no device from a run. So a test node's containerd, kubelet and
kube-scheduler run in a namespace of the node's own, and with them everything a node
serves on: its address, the pods' bridge and their gateway, the `kubernetes` Service's
address pods dial. `draco.tools.dev.netproxy` relays what has to cross between the host's
namespace and the node's.

- `NetworkNamespace.create()`: `ip netns add` (pinned under /run/netns, so `ip netns list`
  shows it and `ip -n NAME addr` reads it), loopback up.
- `argv(...)`: a command line that runs inside: `nsenter --net` enters only the network
  namespace, so mounts, pids, users and cgroups stay the host's (the node's folders, its
  sockets and its containers' cgroups are where they always were).
- `socket(...)`: a socket of this process made inside the namespace. A socket belongs to
  the namespace it was created in, whatever thread uses it afterwards: that is how a health
  check here, or the relay process, reaches what listens only inside.
- `kill_processes()`, `delete()`: what a stop, or a sweep after a SIGKILLed run, does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from draco.errors import ControlPlaneError

__all__ = ["NETNS_ROOT", "NetworkNamespace", "entered", "kill_in_namespaces", "namespace_inode"]

#: Where `ip netns add` pins a named namespace.
NETNS_ROOT: Final = Path("/run/netns")
_CLONE_NEWNET: Final = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextlib.contextmanager
def entered(path: str | os.PathLike[str]) -> Iterator[None]:
    """The calling thread inside the network namespace pinned at `path`, back on exit
    (a thread's namespace is its own: other threads of the process stay where they are)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


def namespace_inode(path: str | os.PathLike[str]) -> int | None:
    """The identity of the network namespace at `path` (a pin, or /proc/PID/ns/net)."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _pids_in(inodes: set[int]) -> list[int]:
    me = os.getpid()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me and namespace_inode(entry / "ns" / "net") in inodes:
            pids.append(int(entry.name))
    return pids


def kill_in_namespaces(inodes: Iterable[int], *, timeout: float = 15) -> int:
    """SIGKILL every process whose network namespace is one of `inodes` (a node's and its
    pods'), again until none is left or `timeout` passes; how many were killed."""
    wanted = set(inodes)
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while wanted:
        pids = _pids_in(wanted)
        # Zombies are dead already; their parent (or init) reaps them.
        pids = [p for p in pids if _state(p) not in ("Z", "X", "")]
        if not pids or time.monotonic() > deadline:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.1)
    return len(killed)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0]


@dataclass(frozen=True)
class NetworkNamespace:
    """A named network namespace (`ip netns`); `create()` it, then run things in it."""

    name: str

    @property
    def path(self) -> Path:
        return NETNS_ROOT / self.name

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> NetworkNamespace:
        self._ip_netns("add", self.name)
        self.ip("link", "set", "lo", "up")
        return self

    def ip(self, *args: str) -> str:
        """`ip -n NAME ARGS...` (its output); raises on failure."""
        return self._run(["ip", "-n", self.name, *args])

    def argv(self, command: Iterable[str]) -> list[str]:
        """`command` run inside this namespace (only the network namespace changes)."""
        return ["nsenter", f"--net={self.path}", "--", *command]

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket of this process that lives in this namespace."""
        with entered(self.path):
            return socket.socket(family, kind)

    def connectable(self, host: str, port: int, *, timeout: float = 2) -> bool:
        """Whether something accepts TCP connections on `host:port` inside."""
        with contextlib.closing(self.socket()) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect((host, port))
            except OSError:
                return False
            return True

    def http_ok(self, url: str, *, timeout: float = 2) -> bool:
        """Whether `GET url` inside answers 200 (https: any certificate, as a health check)."""
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
        raw = self.socket()
        raw.settimeout(timeout)
        conn: socket.socket = raw
        try:
            raw.connect((host, port))
            if parts.scheme == "https":
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                conn = context.wrap_socket(raw, server_hostname=host)
            conn.sendall(f"GET {parts.path or '/'} HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode())
            status = conn.recv(64).split(b" ", 2)
            return len(status) > 1 and status[1] == b"200"
        except OSError:
            return False
        finally:
            conn.close()

    def addresses(self) -> str:
        """`ip -4 addr show` inside (what a failure report shows)."""
        return self._run(["ip", "-n", self.name, "-4", "addr", "show"], check=False)

    def inode(self) -> int | None:
        return namespace_inode(self.path)

    def delete(self) -> None:
        """Remove the pin (the namespace goes once no process and no socket holds it)."""
        if self.exists():
            self._ip_netns("delete", self.name, check=False)

    def _ip_netns(self, *args: str, check: bool = True) -> str:
        return self._run(["ip", "netns", *args], check=check)

    @staticmethod
    def _run(argv: list[str], *, check: bool = True) -> str:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if check and result.returncode != 0:
            raise ControlPlaneError(f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}")
        return result.stdout
