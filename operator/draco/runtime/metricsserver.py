"""Serving `/metrics` the way Kubernetes components do: to the network only over HTTPS, to
callers the API server vouches for.

Two ways, chosen on every process's command line (`add_metrics_arguments`):

- **secure** (``--metrics-secure``, what the chart runs): HTTPS on every address (or
  ``--metrics-address``); each request carries a bearer token, which the API server
  authenticates (a TokenReview) and authorizes for ``get`` on the non-resource path
  ``/metrics`` (a SubjectAccessReview), as kube-controller-manager's and kube-scheduler's
  delegated authentication and authorization do; answers are kept 10 s (their default
  cache lifetime). No token or a token the API server does not accept: 401; a user not
  allowed: 403; the API server not answering: 503. The certificate comes from
  ``--metrics-cert-file``/``--metrics-key-file`` (reloaded when they change), or is made
  at start, self-signed, as those components make theirs without ``--tls-cert-file``;
  its key stays in memory (the files it is loaded from are removed at once).
- **plain** (the default): HTTP bound to the loopback address only, for development,
  tests and a proxy in the same pod. A non-loopback ``--metrics-address`` without
  ``--metrics-secure`` is refused at start: metrics are never served to the network
  without authentication.

The server runs in a thread of its own (a loop of its own in the secure case), so a busy
process's event loop never delays a scrape; the checks are made by whatever
`RequestAuthorizer` the process hands over (`draco.kube.delegated`: the runtime knows
nothing of the API).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import shutil
import socket
import ssl
import tempfile
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import aiohttp.web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest, start_http_server

from draco import __version__
from draco.logs import get_logger
from draco.runtime.metrics import BUILD_INFO, REGISTRY
from draco.runtime.tls import ReloadingServerContext, write_self_signed

__all__ = [
    "METRICS_PATH",
    "AuthorizerFactory",
    "MetricsServing",
    "RequestAuthorizer",
    "Verdict",
    "add_metrics_arguments",
    "metrics_serving",
    "serve_metrics",
]

log = get_logger(__name__)

METRICS_PATH: Final = "/metrics"
_LOOPBACK: Final = "127.0.0.1"
_ANY: Final = "0.0.0.0"
#: How often a certificate given as files is checked for a change.
_RELOAD_SECONDS: Final = 60.0
#: How long `serve_metrics` waits for the secure server to bind its port.
_START_SECONDS: Final = 60.0


@dataclass(frozen=True)
class MetricsServing:
    """Where and how a process serves `/metrics` (port 0: not at all)."""

    port: int = 0
    address: str = _LOOPBACK
    secure: bool = False
    cert_file: Path | None = None
    key_file: Path | None = None


@dataclass(frozen=True)
class Verdict:
    """A request's answer: 200 (serve it), 401, 403 or 503, and why, in words."""

    status: int
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


class RequestAuthorizer(Protocol):
    """Who may read: the bearer token of a request (None: none sent) for `verb` on `path`."""

    async def authorize(self, token: str | None, *, path: str, verb: str) -> Verdict: ...

    async def close(self) -> None: ...


#: Builds the authorizer inside the metrics server's own event loop.
AuthorizerFactory = Callable[[], Awaitable[RequestAuthorizer]]


def add_metrics_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, port: int) -> None:
    """The metrics flags every draco process takes (`port`: the default of ``--metrics-port``)."""
    parser.add_argument(
        "--metrics-port", type=int, default=port, help=f"Prometheus /metrics port (0: off; default {port})"
    )
    parser.add_argument(
        "--metrics-secure",
        action="store_true",
        help="serve /metrics over HTTPS to callers whose bearer token the API server authenticates and "
        "authorizes for get on /metrics (TokenReview, SubjectAccessReview); without it: plain HTTP on "
        "127.0.0.1 only",
    )
    parser.add_argument(
        "--metrics-address",
        default=None,
        help=f"address to bind (default {_ANY} with --metrics-secure, else {_LOOPBACK}; "
        "a non-loopback address needs --metrics-secure)",
    )
    parser.add_argument(
        "--metrics-cert-file",
        type=Path,
        help="with --metrics-secure: serving certificate (default: self-signed)",
    )
    parser.add_argument("--metrics-key-file", type=Path, help="its private key (PEM)")


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def metrics_serving(args: argparse.Namespace, *, prog: str) -> MetricsServing:
    """The flags of `add_metrics_arguments`, checked; exits saying what is wrong."""
    secure = bool(args.metrics_secure)
    address = args.metrics_address or (_ANY if secure else _LOOPBACK)
    if args.metrics_port and not secure and not _is_loopback(address):
        raise SystemExit(
            f"{prog}: --metrics-address {address} would serve metrics to the network without "
            "authentication: add --metrics-secure (HTTPS, callers authorized by the API server), "
            f"or serve them on {_LOOPBACK} behind a proxy of your own"
        )
    if (args.metrics_cert_file is None) != (args.metrics_key_file is None):
        raise SystemExit(f"{prog}: --metrics-cert-file and --metrics-key-file go together")
    if args.metrics_cert_file is not None and not secure:
        raise SystemExit(f"{prog}: --metrics-cert-file needs --metrics-secure")
    return MetricsServing(
        port=int(args.metrics_port),
        address=address,
        secure=secure,
        cert_file=args.metrics_cert_file,
        key_file=args.metrics_key_file,
    )


def serve_metrics(
    serving: MetricsServing, *, component: str, authorizer: AuthorizerFactory | None = None
) -> threading.Thread | None:
    """Serve `REGISTRY` as `serving` says, in a daemon thread (None when the port is 0);
    `component` names the process in ``draco_build_info``. The secure server needs
    `authorizer`; returns once its port is bound (or raises)."""
    BUILD_INFO.labels(component=component, version=__version__).set(1)
    if serving.port == 0:
        return None
    if not serving.secure:
        _server, thread = start_http_server(serving.port, addr=serving.address, registry=REGISTRY)
        log.info("Serving metrics", address=serving.address, port=serving.port, scheme="http")
        return thread
    if authorizer is None:
        raise ValueError("secure metrics need an authorizer")
    server = _SecureServer(serving, authorizer)
    thread = threading.Thread(target=server.run, name="draco-metrics", daemon=True)
    thread.start()
    if not server.started.wait(_START_SECONDS) or server.error is not None:
        raise RuntimeError(f"metrics server did not start on port {serving.port}: {server.error!r}")
    log.info("Serving metrics", address=serving.address, port=serving.port, scheme="https")
    return thread


def _self_signed_context() -> ssl.SSLContext:
    """A context with a certificate made now; its files exist only while they are loaded."""
    folder = Path(tempfile.mkdtemp(prefix="draco-metrics-"))  # 0700; the key 0600 inside
    try:
        made = write_self_signed([socket.gethostname(), "localhost", _LOOPBACK], directory=folder)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(made.certfile, made.pkeyfile)
        return context
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, else None."""
    scheme, _, token = (header or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class _SecureServer:
    def __init__(self, serving: MetricsServing, authorizer: AuthorizerFactory) -> None:
        self.serving = serving
        self.make_authorizer = authorizer
        self.started = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to serve_metrics, or logged
            if not self.started.is_set():
                self.error = exc
                self.started.set()
            else:
                log.error("Metrics server stopped", error=repr(exc))

    async def _serve(self) -> None:
        serving = self.serving
        reloading: ReloadingServerContext | None = None
        if serving.cert_file is not None and serving.key_file is not None:
            reloading = ReloadingServerContext(cert_file=serving.cert_file, key_file=serving.key_file)
            context = reloading.context
        else:
            context = _self_signed_context()
        authorizer = await self.make_authorizer()

        async def metrics(request: aiohttp.web.Request) -> aiohttp.web.Response:
            token = bearer_token(request.headers.get("Authorization"))
            verdict = await authorizer.authorize(token, path=METRICS_PATH, verb="get")
            if not verdict.allowed:
                return aiohttp.web.Response(status=verdict.status, text=verdict.reason + "\n")
            return aiohttp.web.Response(
                body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
            )

        app = aiohttp.web.Application()
        app.add_routes([aiohttp.web.get(METRICS_PATH, metrics)])
        runner = aiohttp.web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            await aiohttp.web.TCPSite(runner, serving.address, serving.port, ssl_context=context).start()
            self.started.set()
            while True:
                await asyncio.sleep(_RELOAD_SECONDS)
                if reloading is not None:
                    with contextlib.suppress(OSError, ssl.SSLError):
                        if reloading.check():
                            log.info("Reloaded the metrics certificate", cert_file=str(serving.cert_file))
        finally:
            await runner.cleanup()
            await authorizer.close()
