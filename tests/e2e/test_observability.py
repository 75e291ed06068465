"""draco at work, seen by a real Prometheus: the operator, the webhook and a node agent of
a running test cluster are scraped (Debian's Prometheus, on loopback, every second) while
pods hold devices (whole, shared, beside MIG-like partitions and an unhealthy device), a pod
waits for a class with no devices, a group waits whole and a namespace is at its device
quota. Every query of the chart's Grafana dashboard returns series (no empty panel),
every alert expression evaluates and every metric it names exists, and the alerts whose
conditions were provoked fire, with the chart's rules as installed (thresholds turned down).
A ResourcePoolStatusRequest is answered with the same pools `kubectl get` shows.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draco.api.constants import POD_GROUP_LABEL, SCHEDULER_NAME, SCHEDULING_API_VERSION
from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e import schedkit as k
from tests.e2e.agent_support import start_agent
from tests.e2e.promkit import (
    Prometheus,
    alert_names,
    alert_rules,
    chart_targets,
    dashboard_queries,
    metric_names,
    metrics_reader,
    running_prometheus,
)
from tests.e2e.support import DracoProcess, running_webhook, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]
Obj = dict[str, Any]
V1 = "resource.draco.dev/v1"


def devices_yaml(driver: str) -> str:
    """Two whole devices, two partitions of one counter set (profile 1g), a device shared
    by memory, and one unhealthy device."""
    return f"""
name: {driver}
cdiClass: gpu
sharedCounters:
- name: mig
  counters: {{slices: "2"}}
partitionTypeAttribute: profile
devices:
- name: gpu-{{index}}
  count: 2
  attributes: {{kind: whole}}
- name: part-{{index}}
  count: 2
  attributes: {{kind: part, profile: 1g}}
  consumesCounters: [{{counterSet: mig, counters: {{slices: "1"}}}}]
- name: shared-0
  allowMultipleAllocations: true
  attributes: {{kind: shared}}
  capacity:
    memory: {{value: 80Gi, requestPolicy: {{default: 10Gi, validRange: {{min: 1Gi, step: 1Gi}}}}}}
- name: broken-0
  healthy: false
  attributes: {{kind: broken}}
"""


def device_class(name: str, driver: str, kind: str) -> Obj:
    expression = f'device.driver == "{driver}" && device.attributes["{driver}"].kind == "{kind}"'
    return {
        "apiVersion": V1,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def template(namespace: str, name: str, device_class: str, *, count: int = 1) -> Obj:
    request: Obj = {"name": "dev", "exactly": {"deviceClassName": device_class, "count": count}}
    return {
        "apiVersion": V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def draco_pod(
    namespace: str, name: str, template_name: str, node: str, *, labels: dict[str, str] | None = None
) -> Obj:
    """A pod draco places and binds itself (no kube-scheduler needed), on the agent's node."""
    body = k.pod(
        namespace, name, [{"name": "dev", "resourceClaimTemplateName": template_name}], labels=labels
    )
    body["spec"].pop("schedulingGates")
    body["spec"].update(schedulerName=SCHEDULER_NAME, nodeSelector={"kubernetes.io/hostname": node})
    return body


def setup(kube: ControlPlane, namespace: str, node: str) -> dict[str, str]:
    driver = k.driver_of(namespace)
    classes = {kind: f"{namespace}-{kind}" for kind in ("whole", "shared", "none")}
    k.apply(
        kube,
        [
            device_class(classes["whole"], driver, "whole"),
            device_class(classes["shared"], driver, "shared"),
            device_class(classes["none"], f"none.{driver}", "whole"),
            template(namespace, "whole", classes["whole"]),
            template(namespace, "shared", classes["shared"]),
            template(namespace, "none", classes["none"]),
            template(namespace, "pair", classes["whole"], count=2),
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "devices", "namespace": namespace},
                "spec": {"hard": {f"{classes['shared']}.deviceclass.resource.draco.dev/devices": "1"}},
            },
            {
                "apiVersion": SCHEDULING_API_VERSION,
                "kind": "PodGroup",
                "metadata": {"name": "gang", "namespace": namespace},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            },
        ],
    )
    k.create(
        kube,
        [
            draco_pod(namespace, "held", "whole", node),
            draco_pod(namespace, "sharer", "shared", node),
            draco_pod(namespace, "waiter", "none", node),
            # Two pods of two devices each, placed whole: one whole device is left.
            *(
                draco_pod(namespace, f"gang-{i}", "pair", node, labels={POD_GROUP_LABEL: "gang"})
                for i in range(2)
            ),
        ],
    )
    return classes


def _series(prometheus: Prometheus, expr: str) -> int:
    return len(prometheus.query(expr))


@pytest.mark.timeout(900)  # its waits, scaled on a busy machine, add up to more than the default 300 s
def test_prometheus_sees_every_panel_and_alert_and_the_provoked_alerts_fire(
    kube: ControlPlane, namespace: str, draco_process: Start, tmp_path: Path
) -> None:
    node = f"{namespace}-node"
    agent_port, operator_port, webhook_port = free_port(), free_port(), free_port()
    # Served as the chart serves them (HTTPS, every caller's token checked by the API server),
    # on loopback here; Prometheus scrapes as the chart's ServiceMonitors do, with a token of
    # the chart's metrics reader.
    secure = ("--metrics-secure", "--metrics-address", "127.0.0.1")
    with (
        metrics_reader(kube, namespace=namespace, folder=tmp_path / "reader") as token_file,
        running_webhook(kube, tmp_path / "webhook", extra=("--metrics-port", str(webhook_port), *secure)),
    ):
        start_agent(
            draco_process,
            tmp_path,
            devices_yaml=devices_yaml(k.driver_of(namespace)),
            node=node,
            extra=(
                "--metrics-port",
                str(agent_port),
                *secure,
                "--nri-socket",
                str(tmp_path / "no-runtime.sock"),
            ),
        )
        # Every namespace: the DeviceClass counts are kept only by an operator that sees them all.
        operator = start_operator(
            draco_process, lease=f"draco-{namespace}"[:63], metrics_port=operator_port, extra=secure
        )
        targets = chart_targets(
            {job: f"127.0.0.1:{port}" for job, port in
             (("operator", operator_port), ("webhook", webhook_port), ("agent", agent_port))},
            token_file=token_file,
        )  # fmt: skip
        rules = alert_rules({"prometheusRule": {"for": "0s", "podWaitMinutes": 0, "groupWaitMinutes": 0}})
        with running_prometheus(tmp_path / "prometheus", targets, rules=rules) as prometheus:
            wait_for(
                lambda: all(prometheus.targets_up().values()) and len(prometheus.targets_up()) == 3,
                timeout=60,
                what="Prometheus scraping the operator, the webhook and the agent",
                explain=lambda: json.dumps(prometheus.targets_up()) + operator.logs()[-3000:],
            )
            # Made once Prometheus scrapes: what happens to them is seen happening (a
            # histogram's rate is over the observations between two scrapes).
            classes = setup(kube, namespace, node)
            _every_panel_has_data(prometheus)
            _every_alert_expression_is_known(prometheus)
            _provoked_alerts_fire(prometheus, namespace, classes)
            _the_pool_status_request_is_answered(kube, namespace, prometheus)
            _draco_top_shows_the_same(kube, namespace, classes, prometheus, tmp_path)


def _every_panel_has_data(prometheus: Prometheus) -> None:
    queries = dashboard_queries()
    assert len(queries) > 30

    def wrong() -> list[str]:
        """What is not as the panel shows it: no series, a value that is not a number, a
        label the legend names that the series lack."""
        found: list[str] = []
        for query in queries:
            series = prometheus.query(query.expr)
            if not series:
                found.append(f"{query.title}: no series of {query.expr}")
            for one in series:
                value = float(one["value"][1])
                if not math.isfinite(value):
                    found.append(f"{query.title}: {value} in {one['metric']} of {query.expr}")
                if missing := set(query.legend_labels) - set(one["metric"]):
                    found.append(f"{query.title}: {one['metric']} lacks {sorted(missing)} (its legend)")
        return found

    # Rates need two samples, the pool counts the inventory, the pods their placement.
    wait_for(
        lambda: not wrong(),
        timeout=120,
        what="every panel with data of the shape it shows",
        explain=lambda: "\n".join(wrong()),
    )


def _every_alert_expression_is_known(prometheus: Prometheus) -> None:
    for group in prometheus.rules["groups"]:
        for rule in group["rules"]:
            prometheus.query(rule["expr"])  # evaluates (a PromQL error fails)
            for name in metric_names(rule["expr"]):
                assert _series(prometheus, name), f"{rule['alert']}: no series of {name}"


def _provoked_alerts_fire(prometheus: Prometheus, namespace: str, classes: dict[str, str]) -> None:
    wanted = {
        ("DracoPodsWaitingForDevices", "reason", "unschedulable"),
        ("DracoGroupWaitingWhole", "reason", "unschedulable"),
        ("DracoDeviceClassExhausted", "deviceclass", classes["none"]),
        ("DracoDeviceQuotaExhausted", "deviceclass", classes["shared"]),
        ("DracoNRIDisconnected", "job", "agent"),
        ("DracoDevicesUnhealthy", "node", f"{namespace}-node"),
    }
    assert {name for name, _, _ in wanted} <= set(alert_names(prometheus.rules))

    def firing() -> set[tuple[str, str, str]]:
        return {
            (a["labels"]["alertname"], key, value)
            for a in prometheus.alerts()
            if a["state"] == "firing"
            for _, key, value in wanted
            if a["labels"].get(key) == value
        }

    wait_for(
        lambda: wanted <= firing(),
        timeout=120,
        what="the provoked alerts firing",
        explain=lambda: (
            f"missing {sorted(wanted - firing())}; alerts: {json.dumps(prometheus.alerts())[:3000]}"
        ),
    )
    # Every label an alert's words name is there when it fires.
    words = {
        r["alert"]: " ".join((r.get("annotations") or {}).values())
        for group in prometheus.rules["groups"]
        for r in group["rules"]
    }
    for alert in prometheus.alerts():
        named = set(re.findall(r"\$labels\.(\w+)", words[alert["labels"]["alertname"]]))
        assert named <= set(alert["labels"]), (
            f"{alert['labels']} lacks {sorted(named - set(alert['labels']))}"
        )
    # What was not provoked does not fire.
    quiet = {
        "DracoAllocationErrors",
        "DracoPrepareFailures",
        "DracoOperatorNoLeader",
        "DracoWebhookCertificateExpiring",
    }
    assert not quiet & {a["labels"]["alertname"] for a in prometheus.alerts()}


def _the_pool_status_request_is_answered(kube: ControlPlane, namespace: str, prometheus: Prometheus) -> None:
    name = f"{namespace}-pools"
    wait_for(
        lambda: all(
            (k.get(kube, "pod", p, namespace=namespace) or {}).get("spec", {}).get("nodeName")
            for p in ("held", "sharer")
        ),
        timeout=60,
        what="the holders bound",
    )
    # Asked now: a request is answered once, with what holds at that moment.
    request = {
        "apiVersion": "resource.draco.dev/v1alpha3",
        "kind": "ResourcePoolStatusRequest",
        "metadata": {"name": name},
        "spec": {"driver": k.driver_of(namespace)},
    }
    k.create(kube, [request])
    found = wait_for(
        lambda: (
            (obj := k.get(kube, "resourcepoolstatusrequests.resource.draco.dev", name))
            and obj.get("status")
            and obj
        ),
        timeout=60,
        what="the ResourcePoolStatusRequest answered",
    )
    assert isinstance(found, dict)
    status = found["status"]
    (pool,) = status["pools"]
    assert (pool["poolName"], pool["totalDevices"], pool["unavailableDevices"]) == (f"{namespace}-node", 6, 1)
    assert [(p["type"], p["total"]) for p in pool["partitionSummary"]] == [("1g", 2)]
    assert pool["shareableSummary"]["partiallyAvailableDevices"] == 1
    # The same pool in the metrics.
    (series,) = prometheus.query(f'draco_resourcepool_devices{{pool="{namespace}-node"}}')
    assert float(series["value"][1]) == 6
    table = kube.kubectl("get", "resourcepoolstatusrequests.resource.draco.dev", name).stdout
    header, row = table.splitlines()
    assert header.split()[:4] == ["NAME", "DRIVER", "TOTAL", "AVAILABLE"]
    assert row.split()[:3] == [name, k.driver_of(namespace), "6"]


def _draco_top_shows_the_same(
    kube: ControlPlane, namespace: str, classes: dict[str, str], prometheus: Prometheus, tmp_path: Path
) -> None:
    """`draco top`, run as a user runs it (its own process, the kubeconfig named by flag:
    no $KUBECONFIG, no ~/.kube/config), shows the pool the metrics count, who holds what
    and the pods that wait, with why."""
    node = f"{namespace}-node"
    env = {**{k: v for k, v in os.environ.items() if k != "KUBECONFIG"}, "HOME": str(tmp_path / "home")}

    def top(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "draco.cli", "top", "--kubeconfig", str(kube.kubeconfig), *args],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    document = json.loads(top("-n", namespace, "--node", node, "-o", "json"))
    (shown,) = document["nodes"]
    (pool,) = shown["pools"]
    assert (pool["poolName"], pool["totalDevices"], pool["allocatedDevices"]) == (node, 6, 2)
    assert (pool["unavailableDevices"], pool["unhealthyDevices"], pool["availableDevices"]) == (1, 1, 3)
    for field, metric in (
        ("allocatedDevices", "allocated_devices"),
        ("unhealthyDevices", "unhealthy_devices"),
    ):
        (series,) = prometheus.query(f'draco_resourcepool_{metric}{{pool="{node}"}}')
        assert float(series["value"][1]) == pool[field], field
    devices = {d["device"]: d for d in shown["devices"]}
    assert devices["broken-0"]["unhealthy"] and devices["broken-0"]["state"] == "free"
    (share,) = devices["shared-0"]["holders"]
    assert share["reservedFor"] == [{"name": f"{namespace}/sharer", "containers": ["main"]}]
    assert share["consumedCapacity"] == {"memory": "10Gi"}
    held = [d for d in shown["devices"] if d["state"] == "allocated"]
    assert [h["reservedFor"][0]["name"] for d in held for h in d["holders"]] == [f"{namespace}/held"]
    waiting = {w["pod"]: w for w in document["waitingPods"]}
    waiter = waiting[f"{namespace}/waiter"]
    assert (waiter["deviceClasses"], waiter["reason"]) == ([classes["none"]], "FailedScheduling")
    assert waiter["message"], waiter
    for member in ("gang-0", "gang-1"):
        assert waiting[f"{namespace}/{member}"]["group"] == f"PodGroup {namespace}/gang"
    by_class = {c["name"]: c for c in document["deviceClasses"]}
    assert by_class[classes["none"]]["waitingPods"] == 1
    assert (by_class[classes["whole"]]["selectedDevices"], by_class[classes["whole"]]["waitingPods"]) == (
        2,
        2,
    )
    # The tables, for people.
    text = top("-n", namespace)
    assert text.splitlines()[0].split()[:4] == ["NODE", "DRIVER", "POOL", "DEVICES"]
    line = next(x for x in text.splitlines() if x.startswith(f"{namespace}/waiter "))
    assert classes["none"] in line and "FailedScheduling:" in line
