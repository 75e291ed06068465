"""Helpers e2e tests import: processes of ours (one way to start them: `start_draco`),
`draco webhook` registered like an installer would, and polling with a clear failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from draco.api.crds import generate_crds
from draco.runtime.tls import write_webhook_certificates
from draco.tools.dev.controlplane import ControlPlane, free_port

__all__ = [
    "DracoProcess",
    "WebhookProcess",
    "json_list",
    "running_webhook",
    "selectable_fields_served",
    "start_draco",
    "start_operator",
    "wait_for",
]

#: The name `draco webhook --print-configuration` gives both configurations.
WEBHOOK_CONFIGURATION = "resource.draco.dev"


def json_list(objects: Iterable[Mapping[str, object]]) -> str:
    """`objects` as one JSON `List` for `kubectl apply -f -` (kubectl before 1.31 cannot
    read JSON documents separated by `---`; YAML would turn strings like `y` into booleans)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def selectable_fields_served(kube: ControlPlane, plural: str = "resourceclaims") -> bool:
    """Whether the API server kept the `selectableFields` of draco's CRD `plural` (a
    kube-apiserver before 1.31 drops them, and then refuses field selectors on them)."""
    out = kube.kubectl("get", "crd", f"{plural}.resource.draco.dev", "-o", "json").stdout
    return any(v.get("selectableFields") for v in json.loads(out)["spec"]["versions"])


@dataclass
class DracoProcess:
    """A `draco` subcommand running as its own process, as it would in a cluster."""

    popen: subprocess.Popen[bytes]
    log_path: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            self.popen.wait(30)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def start_draco(args: tuple[str, ...], *, env: Mapping[str, str], log_path: Path) -> DracoProcess:
    """Start `draco <args>` as its own process (own session: a kill reaches only it),
    logging to `log_path`."""
    with log_path.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "draco.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
    return DracoProcess(popen, log_path)


@dataclass
class WebhookProcess:
    """`draco webhook` serving certificate files made by the test, registered by URL."""

    process: DracoProcess
    port: int
    ca_file: Path
    cert_file: Path
    key_file: Path
    #: Its /metrics, plain HTTP on 127.0.0.1 (`--metrics-port` without `--metrics-secure`).
    metrics_port: int

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


def _refuses_broken_classes(kube: ControlPlane, process: DracoProcess) -> bool:
    assert process.popen.poll() is None, process.logs()
    probe = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "webhook-probe"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
    }
    result = kube.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False)
    return "denied the request" in result.stderr


def remove_webhook_configurations(kube: ControlPlane) -> None:
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        kube.kubectl("delete", kind, WEBHOOK_CONFIGURATION, "--ignore-not-found", check=False)


def restore_crd_conversion(kube: ControlPlane) -> None:
    """Put the generated conversion config back on the CRDs a webhook's `--patch-crds`
    changed (a later `kubectl apply` of crds/ would otherwise merge a Service into a URL)."""
    for crd in generate_crds().values():
        conversion = crd["spec"].get("conversion")
        if conversion is not None:
            patch = [{"op": "add", "path": "/spec/conversion", "value": conversion}]
            kube.kubectl(
                "patch", "crd", crd["metadata"]["name"], "--type=json", "-p", json.dumps(patch), check=False
            )


@contextmanager
def running_webhook(
    kube: ControlPlane,
    folder: Path,
    *,
    extra: tuple[str, ...] = (),
    patch_crds: bool = False,
    exempt_users: tuple[str, ...] = (),
    answered: Callable[[], bool] | None = None,
) -> Iterator[WebhookProcess]:
    """`draco webhook` as a cluster runs it: certificate and key from files (a CA and a
    serving certificate made with `draco.runtime.tls`), configurations printed by
    `--print-configuration --url ... --ca-file ...` and applied with kubectl. Yields once
    kube-apiserver gets answers from it; the configurations are removed at the end, so
    later tests of the session see no webhook. `patch_crds`: it also converts draco's
    v1beta1/v1beta2 objects (`--patch-crds`), until another webhook takes that over.
    `exempt_users`: configured as the chart configures the operator's service account;
    `answered` then tells when kube-apiserver gets answers (the test's own user may be
    exempt from the validation the default check relies on)."""
    folder.mkdir(parents=True, exist_ok=True)
    certs = write_webhook_certificates(["127.0.0.1", "localhost"], directory=folder / "tls")
    port, metrics_port = free_port(), free_port()
    url = f"https://127.0.0.1:{port}"
    printed = subprocess.run(
        [sys.executable, "-m", "draco.cli", "webhook", "--print-configuration", "--url", url,
         "--ca-file", str(certs.ca_file), *(a for u in exempt_users for a in ("--exempt-user", u))],
        capture_output=True, text=True, check=True, env=kube.env(),
    )  # fmt: skip
    process = start_draco(
        ("webhook", "--listen-address", "127.0.0.1", "--port", str(port), "--cert-file",
         str(certs.cert_file), "--key-file", str(certs.key_file), "--metrics-port", str(metrics_port),
         "--health-port", "0", *extra,
         *(("--patch-crds", "--url", url, "--ca-file", str(certs.ca_file)) if patch_crds else ())),
        env=kube.env(),
        log_path=folder / f"webhook-{port}.log",
    )  # fmt: skip
    try:
        kube.kubectl("apply", "-f", "-", input=printed.stdout)
        wait_for(
            answered or (lambda: _refuses_broken_classes(kube, process)),
            timeout=60,
            what="kube-apiserver to get answers from draco webhook",
        )
        yield WebhookProcess(process, port, certs.ca_file, certs.cert_file, certs.key_file, metrics_port)
    finally:
        process.stop()
        remove_webhook_configurations(kube)
        if patch_crds:
            restore_crd_conversion(kube)


#: Every e2e wait is multiplied by this (env `DRACO_TEST_TIMEOUT_SCALE`, default 1): a busy
#: machine gets more time without a test changing.
TIMEOUT_SCALE = float(os.environ.get("DRACO_TEST_TIMEOUT_SCALE", "1") or 1)


def scaled(seconds: float) -> float:
    """`seconds` stretched by `DRACO_TEST_TIMEOUT_SCALE`."""
    return seconds * TIMEOUT_SCALE


def wait_for(
    predicate: Callable[[], object],
    *,
    timeout: float = 30,
    interval: float = 0.2,
    what: str = "",
    explain: Callable[[], str] | None = None,
) -> object:
    """Poll until `predicate()` is truthy; returns its value or fails the test naming `what`
    (and with what `explain()` says then: logs and API state that tell why).

    `timeout` is scaled by `DRACO_TEST_TIMEOUT_SCALE`; the poll interval grows to 1 s so a
    long wait does not hammer the API server.
    """
    budget = scaled(timeout)
    deadline = time.monotonic() + budget
    last: object = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
        interval = min(interval * 1.5, 1.0)
    message = f"timed out after {budget:.0f}s waiting for {what or predicate!r} (last value: {last!r})"
    if explain is not None:
        message += "\n" + explain()
    pytest.fail(message)


def start_operator(
    draco_process: Callable[..., DracoProcess],
    *namespaces: str,
    extra: Sequence[str] = (),
    log_level: str | None = None,
    lease: str | None = None,
    metrics_port: int = 0,
    health_port: int = 0,
    env: Mapping[str, str] | None = None,
    name: str = "operator",
) -> DracoProcess:
    """`draco operator` as a process, the one way e2e tests start it.

    Served namespaces as given (none: all); no fixed ports, so runs never collide. Each
    test gets a Lease of its own (named after its first namespace, unless `lease` says
    otherwise): an operator a test SIGKILLs leaves its Lease held for 15 s, and the next
    test's operator must not wait it out.
    """
    args: list[str] = ["--log-level", log_level] if log_level else []
    args += ["operator", "--metrics-port", str(metrics_port), "--health-port", str(health_port)]
    for namespace in namespaces:
        args += ["--namespace", namespace]
    lease_name = lease or (f"draco-{namespaces[0]}"[:63] if namespaces else None)
    if lease_name:
        args += ["--leader-election-id", lease_name]
    return draco_process(*args, *extra, env=dict(env) if env else None, name=name)
