"""`/metrics` is reachable only as docs/install.md says: with the chart's flags, over HTTPS
to a caller whose token the API server accepts and who may get `/metrics` (the chart's
`<release>-metrics-reader`, bound to `metrics.readers`); 401 without a token or with a
forged one, 403 for anyone else; plain HTTP gets nothing. Without `--metrics-secure` a
process serves them on 127.0.0.1 only, and refuses a network address at start.

The processes are the operator, the webhook and the node agent, each with its chart
ServiceAccount and RBAC (the agent's token bound to a pod on its node), so the TokenReview
and SubjectAccessReview each makes are the ones the chart grants it."""

from __future__ import annotations

import secrets
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e.chartkit import (
    agent_identity,
    apply_objects,
    args_of,
    by_kind,
    create_ready_node,
    host_address,
    remove_release,
    render,
    service_account_kubeconfig,
    start_chart_webhook,
)
from tests.e2e.support import DracoProcess, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]


def scrape(url: str, *, token: str | None = None) -> tuple[int, str]:
    """GET `url` as a scraper with insecureSkipVerify would (the certificate is self-signed)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def reachable(url: str) -> bool:
    """Anything answers HTTP(S) at `url` (an error status too)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        urllib.request.urlopen(url, timeout=10, context=context)
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False
    return True


def test_metrics_answer_only_the_readers_the_chart_binds(
    kube: ControlPlane, namespace: str, draco_process: Start, tmp_path: Path
) -> None:
    release = f"m{secrets.token_hex(3)}"
    values = {
        "agent": {"nriSocket": ""},
        "deviceClasses": {},
        "metrics": {"readers": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]},
    }
    objects = render(release=release, namespace=namespace, values=values)
    # No webhook configurations: nothing here answers the admission calls they would send.
    assert (
        apply_objects(kube, [o for o in objects if "WebhookConfiguration" not in o["kind"]]).returncode == 0
    )
    for account in ("reader", "stranger"):
        kube.kubectl("create", "serviceaccount", account, "-n", namespace)
    tokens = {
        account: kube.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
        for account in ("reader", "stranger")
    }
    node = f"{release}-node"
    create_ready_node(kube, node)
    workloads = {"operator": "Deployment", "webhook": "Deployment", "agent": "DaemonSet"}
    for component, kind in workloads.items():
        chart_args = [
            a for a in args_of(objects, kind, f"{release}-{component}") if a.startswith("--metrics-")
        ]
        port = 8082 if component == "agent" else 8080
        assert chart_args == [f"--metrics-port={port}", "--metrics-secure"], component
    ports = {component: free_port() for component in workloads}
    address = host_address()
    try:
        # Each process under its own chart ServiceAccount: the reviews it asks for are the
        # ones the chart's RBAC grants it.
        (config_map,) = by_kind(objects, "ConfigMap")
        devices = tmp_path / "devices.yaml"
        devices.write_text(config_map["data"]["devices.yaml"])
        agent_token = agent_identity(
            kube, namespace=namespace, release=release, node=node, path=tmp_path / "agent.kubeconfig"
        )
        draco_process(
            "agent", "--node-name", node, "--driver", "fake", "--config", str(devices),
            "--cdi-dir", str(tmp_path / "cdi"), "--state-dir", str(tmp_path / "state"),
            "--metrics-secure", f"--metrics-port={ports['agent']}",
            env={"KUBECONFIG": str(agent_token)}, name="agent",
        )  # fmt: skip
        start_chart_webhook(
            kube, draco_process, namespace=namespace, release=release, folder=tmp_path / "webhook",
            extra=["--metrics-secure", f"--metrics-port={ports['webhook']}"],
        )  # fmt: skip
        operator_token = service_account_kubeconfig(
            kube, namespace=namespace, account=f"{release}-operator", path=tmp_path / "operator.kubeconfig"
        )
        start_operator(
            draco_process, namespace, lease=f"{release}-operator", metrics_port=ports["operator"],
            extra=["--leader-election-namespace", namespace, "--metrics-secure"],
            env={"KUBECONFIG": str(operator_token)},
        )  # fmt: skip
        for component, port in ports.items():
            url = f"https://{address}:{port}/metrics"  # from the network, as a scraper reaches the pod
            wait_for(lambda url=url: reachable(url), timeout=60, what=f"the {component}'s metrics server")
            assert scrape(url) == (401, "Unauthorized: send a bearer token the API server accepts\n"), (
                component
            )
            assert scrape(url, token="not-a-token") == (
                401,
                "Unauthorized: the API server does not accept this token\n",
            ), component
            status, text = scrape(url, token=tokens["stranger"])
            assert status == 403, (component, text)
            assert (
                f'Forbidden: user "system:serviceaccount:{namespace}:stranger" may not get /metrics' in text
            )
            status, text = scrape(url, token=tokens["reader"])
            assert status == 200, (component, text)
            assert f'draco_build_info{{component="{component}"' in text, (component, text[:500])
            # Plain HTTP on the metrics port gets nothing.
            assert not reachable(f"http://{address}:{port}/metrics"), component
    finally:
        remove_release(kube, objects, nodes=[node])


def test_without_secure_metrics_stay_on_the_loopback_address(
    kube: ControlPlane, draco_process: Start, tmp_path: Path
) -> None:
    port, address = free_port(), host_address()
    config = tmp_path / "devices.yaml"
    config.write_text("drivers:\n- name: gpu.loopback.draco.dev\n  devices:\n  - name: gpu-0\n")
    node = f"loopback-{secrets.token_hex(3)}"
    draco_process(
        "agent", "--node-name", node, "--create-nodes", "--driver", "fake", "--config", str(config),
        "--cdi-dir", str(tmp_path / "cdi"), "--state-dir", str(tmp_path / "state"), f"--metrics-port={port}",
        name="agent",
    )  # fmt: skip
    try:
        wait_for(
            lambda: reachable(f"http://127.0.0.1:{port}/metrics"), timeout=60, what="metrics on 127.0.0.1"
        )
        assert not reachable(f"http://{address}:{port}/metrics")
        refused = subprocess.run(
            [sys.executable, "-m", "draco.cli", "agent", "--node-name", node, "--driver", "fake", "--config",
             str(config), "--metrics-port", str(free_port()), "--metrics-address", "0.0.0.0"],
            capture_output=True, text=True, timeout=60, env=kube.env(), check=False,
        )  # fmt: skip
        assert refused.returncode != 0
        assert (
            "would serve metrics to the network without authentication: add --metrics-secure"
            in refused.stderr
        )
    finally:
        kube.kubectl("delete", "node", node, "--ignore-not-found", "--wait=false", check=False)
