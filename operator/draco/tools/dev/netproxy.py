"""The relays between the host's network namespace and a test node's (`draco.tools.dev.netns`).

A test node lives in a network namespace of its own, the API server in the host's on
127.0.0.1. Two things cross, each in a process of its own (a child of the control plane or
of the node, stopped with it and swept with its folder when its owner was killed):

- `egress`: the API server's way to the nodes. kube-apiserver sends what it dials in the
  `cluster` network context (a kubelet for `kubectl logs` and `exec`, a webhook or an
  aggregated API called at its Service's endpoints) through an HTTP CONNECT proxy on a
  unix socket (`--egress-selector-config-file`, what Konnectivity serves in production).
  This one connects from inside the namespace whose route file (`ROUTES/*.json`: the
  namespace's pin and the CIDRs that live in it) holds the address, from the host's
  namespace otherwise.
- `forward`: a node's way to the API server. It listens inside the node's namespace (on
  127.0.0.1 at the API server's port, so the kubelet uses the admin kubeconfig unchanged;
  on the `kubernetes` Service's address and port, where the kubelet tells pods the API
  server is) and connects to the API server on the host's 127.0.0.1.

`python -m draco.tools.dev.netproxy egress --socket @NAME --routes DIR` or
`... forward --netns PIN --listen ADDR:PORT [--listen ...] --to ADDR:PORT`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import socket
import sys
from pathlib import Path

from draco.logs import configure_logging, get_logger
from draco.tools.dev.netns import entered

__all__ = ["main", "route_for"]

log = get_logger(__name__)

#: The longest CONNECT request head accepted (kube-apiserver sends three short lines).
_MAX_HEAD = 8192
_CONNECT_TIMEOUT = 10.0


def route_for(routes: Path, host: str) -> str | None:
    """The namespace pin whose route file holds `host`, or None (the host's namespace)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    for path in sorted(routes.glob("*.json")):
        try:
            route = json.loads(path.read_text())
            if any(address in ipaddress.ip_network(cidr) for cidr in route["cidrs"]):
                return str(route["netns"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _relay(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    try:
        await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))
    finally:
        for writer in (a[1], b[1]):
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def _connect(
    host: str, port: int, netns: str | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection to `host:port` from the namespace pinned at `netns` (None: here)."""
    if netns is None:
        return await asyncio.wait_for(asyncio.open_connection(host, port), _CONNECT_TIMEOUT)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Made by a worker thread: the main thread, whose namespace /proc/PID/ns/net shows,
    # never enters a node's (a node's teardown kills every process that shows its own).
    sock = await asyncio.get_running_loop().run_in_executor(None, _socket_in, netns, family)
    try:
        sock.setblocking(False)
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (host, port)), _CONNECT_TIMEOUT)
        return await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise


def _socket_in(netns: str, family: int) -> socket.socket:
    with entered(netns):
        return socket.socket(family, socket.SOCK_STREAM)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def _serve_egress(socket_name: str, routes: Path) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        words = head.split(b"\r\n", 1)[0].split()
        if len(words) < 2 or words[0] != b"CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            writer.close()
            return
        target = words[1].decode(errors="replace")
        host, port = _split(target)
        netns = route_for(routes, host)
        try:
            upstream = await _connect(host, port, netns)
        except (OSError, TimeoutError) as exc:
            log.warning("Egress connection failed", target=target, netns=netns, error=str(exc))
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _relay((reader, writer), upstream)

    # An abstract socket name (`@...`): nothing on disk to remove, gone with the process.
    path = "\0" + socket_name[1:] if socket_name.startswith("@") else socket_name
    server = await asyncio.start_unix_server(handle, path=path, limit=_MAX_HEAD)
    log.info("Egress proxy listening", socket=socket_name, routes=str(routes))
    async with server:
        await server.serve_forever()


async def _serve_forward(netns: str, listens: list[str], to: str) -> None:
    host, port = _split(to)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await _connect(host, port, None)
        except (OSError, TimeoutError) as exc:
            log.warning("Forward connection failed", to=to, error=str(exc))
            writer.close()
            return
        await _relay((reader, writer), upstream)

    servers = []
    for listen in listens:
        address = _split(listen)
        with entered(netns):
            sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        servers.append(await asyncio.start_server(handle, sock=sock))
    log.info("Forwarding into the host's namespace", netns=netns, listen=listens, to=to)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m draco.tools.dev.netproxy", description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    egress = sub.add_parser("egress", help="kube-apiserver's CONNECT proxy for the cluster network")
    egress.add_argument("--socket", required=True, help="unix socket (`@name`: abstract)")
    egress.add_argument("--routes", type=Path, required=True, help="folder of route files")
    forward = sub.add_parser("forward", help="listen inside a namespace, connect from the host's")
    forward.add_argument("--netns", required=True, help="the namespace's pin (/run/netns/NAME)")
    forward.add_argument("--listen", action="append", required=True, help="ADDR:PORT inside (repeat)")
    forward.add_argument("--to", required=True, help="ADDR:PORT in the host's namespace")
    args = parser.parse_args(argv)
    configure_logging(fmt="text", level="INFO")
    if args.mode == "egress":
        asyncio.run(_serve_egress(args.socket, args.routes))
    else:
        asyncio.run(_serve_forward(args.netns, args.listen, args.to))
    return 0


if __name__ == "__main__":
    sys.exit(main())
