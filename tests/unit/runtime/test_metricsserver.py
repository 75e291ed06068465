"""`/metrics` is served to the network only over HTTPS, to callers the authorizer lets
in; without `--metrics-secure` only on the loopback address, and a non-loopback address
is refused at start."""

from __future__ import annotations

import argparse
import ssl
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from draco.runtime.metricsserver import (
    MetricsServing,
    Verdict,
    add_metrics_arguments,
    metrics_serving,
    serve_metrics,
)
from draco.runtime.tls import write_self_signed
from draco.tools.dev.controlplane import free_port

TOKENS = {"reader": Verdict(200), "stranger": Verdict(403, 'Forbidden: user "stranger" may not get /metrics')}


class Authorizer:
    """Readers by token, as the API server's reviews would answer; remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str | None, str, str]] = []
        self.closed = threading.Event()

    async def authorize(self, token: str | None, *, path: str, verb: str) -> Verdict:
        self.asked.append((token, path, verb))
        if token is None:
            return Verdict(401, "Unauthorized: send a bearer token the API server accepts")
        return TOKENS.get(token, Verdict(401, "Unauthorized: the API server does not accept this token"))

    async def close(self) -> None:
        self.closed.set()


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_metrics_arguments(parser, port=8080)
    return parser.parse_args(list(argv))


def test_without_secure_metrics_stay_on_the_loopback_address() -> None:
    assert metrics_serving(parse(), prog="draco x") == MetricsServing(port=8080, address="127.0.0.1")
    with pytest.raises(SystemExit, match="would serve metrics to the network without authentication"):
        metrics_serving(parse("--metrics-address", "0.0.0.0"), prog="draco x")
    with pytest.raises(SystemExit, match="--metrics-cert-file needs --metrics-secure"):
        metrics_serving(parse("--metrics-cert-file", "c", "--metrics-key-file", "k"), prog="draco x")
    secure = metrics_serving(parse("--metrics-secure"), prog="draco x")
    assert (secure.address, secure.secure) == ("0.0.0.0", True)


def get(url: str, *, token: str | None = None, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_plain_metrics_answer_on_loopback() -> None:
    port = free_port()
    serve_metrics(MetricsServing(port=port), component="test")
    status, body = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and "workqueue_depth" in body


def test_secure_metrics_answer_only_callers_the_authorizer_lets_in(tmp_path: Path) -> None:
    made = write_self_signed(["127.0.0.1"], directory=tmp_path)
    port = free_port()
    authorizer = Authorizer()

    async def make() -> Authorizer:
        return authorizer

    serving = MetricsServing(
        port=port, address="127.0.0.1", secure=True, cert_file=made.certfile, key_file=made.pkeyfile
    )
    assert serve_metrics(serving, component="test", authorizer=make) is not None
    trusted = ssl.create_default_context(cafile=str(made.certfile))
    url = f"https://127.0.0.1:{port}/metrics"
    assert get(url, context=trusted) == (401, "Unauthorized: send a bearer token the API server accepts\n")
    assert get(url, token="forged", context=trusted)[0] == 401
    assert get(url, token="stranger", context=trusted) == (
        403,
        'Forbidden: user "stranger" may not get /metrics\n',
    )
    status, body = get(url, token="reader", context=trusted)
    assert status == 200 and "# TYPE" in body
    assert ("reader", "/metrics", "get") in authorizer.asked
    # Plain HTTP on that port gets no metrics.
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)


def test_secure_metrics_make_their_own_certificate_without_files() -> None:
    port = free_port()
    authorizer = Authorizer()

    async def make() -> Authorizer:
        return authorizer

    serve_metrics(
        MetricsServing(port=port, address="127.0.0.1", secure=True), component="test", authorizer=make
    )
    anything = ssl.create_default_context()
    anything.check_hostname = False
    anything.verify_mode = ssl.CERT_NONE  # a scraper's insecureSkipVerify: the token still decides
    assert get(f"https://127.0.0.1:{port}/metrics", token="reader", context=anything)[0] == 200
    assert get(f"https://127.0.0.1:{port}/metrics", context=anything)[0] == 401
