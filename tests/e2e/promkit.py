"""Prometheus in tests: `prometheus` and `promtool` (Debian's package, unpacked into the
cache by hack/prometheus.sh), the chart's alert rules rendered with helm, the dashboard's
queries, and a real Prometheus on loopback scraping draco's processes.

How a target is scraped is one place (:class:`Target`): as the chart's ServiceMonitors
scrape draco (docs/install.md#metrics), HTTPS with a reader's bearer token and the
self-signed certificate not verified (:func:`chart_scrape`), or plain HTTP for a process
serving on loopback without ``--metrics-secure``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e.chartkit import apply_objects, render
from tests.e2e.support import json_list

__all__ = [
    "DASHBOARD",
    "Prometheus",
    "Query",
    "Target",
    "alert_rules",
    "chart_targets",
    "dashboard_queries",
    "metrics_reader",
    "prometheus_assets",
    "running_prometheus",
]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "draco" / "dashboards" / "draco.json"


@functools.cache
def prometheus_assets() -> Path:
    """`PROMETHEUS_ASSETS` when set (what `make test` exports), else what
    `hack/prometheus.sh` prints (Debian's package, unpacked once into ~/.cache/draco)."""
    given = os.environ.get("PROMETHEUS_ASSETS")
    if given and (Path(given) / "promtool").exists():
        return Path(given)
    out = subprocess.run(
        [str(ROOT / "hack" / "prometheus.sh")], capture_output=True, text=True, check=True, timeout=900
    )
    return Path(out.stdout.strip().splitlines()[-1])


def alert_rules(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The chart's PrometheusRule rendered with `values` (on top of turning it on), as a
    Prometheus rule file (``{"groups": [...]}``)."""
    rule_values = {"enabled": True, **dict((values or {}).get("prometheusRule") or {})}
    objects = render(
        release="draco", namespace="draco-system", values={"metrics": {"prometheusRule": rule_values}}
    )
    (rule,) = [o for o in objects if o.get("kind") == "PrometheusRule"]
    return {"groups": rule["spec"]["groups"]}


def alert_names(rules: Mapping[str, Any]) -> list[str]:
    return [r["alert"] for group in rules["groups"] for r in group["rules"] if "alert" in r]


#: Grafana's variables in the dashboard's queries, and what a test queries them as (rates
#: over 5 minutes: what happened at a test's start still counts at its end).
_VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "15s",
    "$__range": "5m",
    "$node": ".*",
    "$deviceclass": ".*",
    "$driver": ".*",
    "$namespace": ".*",
}


@dataclass(frozen=True)
class Query:
    """One target of a dashboard panel: the panel's title, its PromQL with Grafana's
    variables filled in, and the labels its legend names (``{{node}}``)."""

    title: str
    expr: str
    legend_labels: tuple[str, ...]


def dashboard_queries() -> list[Query]:
    """Every target of every panel of the dashboard, rows' panels included."""
    dashboard = json.loads(DASHBOARD.read_text())
    found: list[Query] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            walk(panel.get("panels") or [])
            for target in panel.get("targets") or []:
                expr = str(target.get("expr") or "")
                for name, value in sorted(_VARIABLES.items(), key=lambda kv: -len(kv[0])):
                    expr = expr.replace(name, value)
                legend = tuple(re.findall(r"\{\{\s*(\w+)\s*\}\}", str(target.get("legendFormat") or "")))
                found.append(Query(str(panel.get("title")), expr, legend))

    walk(dashboard["panels"])
    return found


_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset"})


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left of its identifiers once
    strings, label matchers, ranges, grouping clauses and function calls are taken away."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    return {n for n in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", text) if n not in _KEYWORDS}


@dataclass(frozen=True)
class Target:
    """One process Prometheus scrapes: job name and ``host:port`` (`/metrics`), and how."""

    job: str
    address: str
    scheme: str = "http"
    ca_file: Path | None = None
    #: The chart's ServiceMonitors' ``insecureSkipVerify``: each process makes its
    #: certificate at start, the token is what is checked.
    insecure_skip_verify: bool = False
    bearer_token_file: Path | None = None

    def scrape_config(self, interval: str) -> dict[str, Any]:
        config: dict[str, Any] = {
            "job_name": self.job,
            "scrape_interval": interval,
            "scheme": self.scheme,
            "static_configs": [{"targets": [self.address]}],
        }
        if self.ca_file is not None:
            config["tls_config"] = {"ca_file": str(self.ca_file)}
        elif self.insecure_skip_verify:
            config["tls_config"] = {"insecure_skip_verify": True}
        if self.bearer_token_file is not None:
            config["authorization"] = {"credentials_file": str(self.bearer_token_file)}
        return config


def chart_targets(addresses: Mapping[str, str], *, token_file: Path) -> list[Target]:
    """Each job's ``host:port`` scraped as the chart's ServiceMonitors scrape it: HTTPS,
    the certificate not verified, the bearer token in `token_file` (a reader's)."""
    return [
        Target(job, address, scheme="https", insecure_skip_verify=True, bearer_token_file=token_file)
        for job, address in addresses.items()
    ]


@contextmanager
def metrics_reader(kube: ControlPlane, *, namespace: str, folder: Path) -> Iterator[Path]:
    """A token file of the ServiceAccount `prometheus` in `namespace`, bound to the chart's
    ClusterRole ``<release>-metrics-reader`` as `metrics.readers` binds it (get on /metrics):
    what Prometheus presents to a process serving with ``--metrics-secure``. The cluster's
    objects are gone at the end."""
    account = {"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}
    rendered = render(
        release=f"{namespace}-p"[:53], namespace=namespace, values={"metrics": {"readers": [account]}}
    )
    reader = [o for o in rendered if o["kind"] in ("ClusterRole", "ClusterRoleBinding")
              and o["metadata"]["name"].endswith("-metrics-reader")]  # fmt: skip
    assert len(reader) == 2, [o["metadata"]["name"] for o in reader]
    kube.kubectl("create", "serviceaccount", "prometheus", "-n", namespace)
    assert apply_objects(kube, reader).returncode == 0
    try:
        token = kube.kubectl("create", "token", "prometheus", "-n", namespace, "--duration=2h").stdout.strip()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "prometheus.token"
        path.write_text(token)
        path.chmod(0o600)
        yield path
    finally:
        kube.kubectl(
            "delete", "-f", "-", "--ignore-not-found", "--wait=false", input=json_list(reader), check=False
        )


@dataclass
class Prometheus:
    """A running Prometheus and its HTTP API."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    rules: dict[str, Any] = field(default_factory=dict)

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as reply:
            body = json.loads(reply.read())
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's series (`[]` for none); a PromQL error fails."""
        try:
            data = self.get("/api/v1/query", query=expr)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{expr!r}: {exc.read().decode(errors='replace')}") from exc
        return list(data["result"]) if data["resultType"] == "vector" else [data]

    def targets_up(self) -> dict[str, bool]:
        active = self.get("/api/v1/targets")["activeTargets"]
        return {t["labels"]["job"]: t["health"] == "up" for t in active}

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/alerts")["alerts"])

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def running_prometheus(
    folder: Path, targets: list[Target], *, rules: dict[str, Any] | None = None, interval: str = "1s"
) -> Iterator[Prometheus]:
    """Prometheus on 127.0.0.1 scraping `targets` every `interval`, evaluating `rules` as
    often; stopped (and its data gone with `folder`) at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [t.scrape_config(interval) for t in targets],
    }
    if rules is not None:
        (folder / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        config["rule_files"] = [str(folder / "rules.yaml")]
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log_path = folder / "prometheus.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                str(prometheus_assets() / "prometheus"),
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    prometheus = Prometheus(f"http://127.0.0.1:{port}", process, log_path, rules or {})
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, prometheus.logs()
            try:
                with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"Prometheus not ready:\n{prometheus.logs()}"
            time.sleep(0.2)
        yield prometheus
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
