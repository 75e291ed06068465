"""A TCP proxy in front of a test API server that a test can cut, point at another API
server and restore, so that a process's watches break (as when an apiserver restarts)
while the test changes the cluster directly.

Bytes are relayed untouched (TLS end to end: the server's certificate names 127.0.0.1,
which the proxy's address is too); :meth:`TcpProxy.cut` closes every relayed connection
and refuses new ones until :meth:`TcpProxy.restore`.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from pathlib import Path
from types import TracebackType

__all__ = ["TcpProxy", "proxied_kubeconfig"]


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def cut(self) -> None:
        """Close every relayed connection; refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
            sockets, self._open = self._open, set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def retarget(self, host: str, port: int) -> None:
        """Relay new connections to another server (one that replaced the first)."""
        with self._lock:
            self.target = (host, port)

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused, target = self._cut, self.target
            if refused:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def proxied_kubeconfig(kubeconfig: Path, proxy: TcpProxy, into: Path) -> Path:
    """A copy of ``kubeconfig`` whose server is the proxy (same host, credentials and CA)."""
    text = re.sub(r"(server:\s*https://127\.0\.0\.1:)\d+", rf"\g<1>{proxy.port}", kubeconfig.read_text())
    into.write_text(text)
    return into
