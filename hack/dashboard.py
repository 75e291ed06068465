#!/usr/bin/env python3
"""Write draco's Grafana dashboard, charts/draco/dashboards/draco.json, from the panels
listed here (the chart ships it as a ConfigMap for Grafana's sidecar; users import the
file). Rows go from the cluster to the container: overview, nodes, allocation, waiting
pods and groups, the devices each container holds. Every query is checked against a real
Prometheus scraping a test cluster (tests/e2e/test_observability.py).

    hack/dashboard.py           # rewrite the file
    hack/dashboard.py --check   # exit 1 when it is stale (a test runs it)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "charts" / "draco" / "dashboards" / "draco.json"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: A draco process's series, told from other components' of the same name.
DRACO = "and on (job, instance) draco_build_info"
NODE = 'node=~"$node"'
CLASS = 'deviceclass=~"$deviceclass"'


@dataclass
class Panel:
    title: str
    kind: str  # stat | timeseries | table | bargauge
    queries: list[tuple[str, str]]  # (expr, legend)
    description: str = ""
    width: int = 6
    height: int = 6
    unit: str = "short"
    instant: bool = False
    options: dict[str, Any] = field(default_factory=dict)


ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Overview",
        [
            Panel(
                "Devices",
                "stat",
                [("sum(draco_resourcepool_devices)", "")],
                "Devices the pools publish.",
                4,
                4,
            ),
            Panel(
                "Allocated",
                "stat",
                [("sum(draco_resourcepool_allocated_devices)", "")],
                "Devices an allocated claim holds.",
                4,
                4,
            ),
            Panel(
                "Available",
                "stat",
                [("sum(draco_resourcepool_available_devices)", "")],
                "Devices neither allocated nor tainted.",
                4,
                4,
            ),
            Panel(
                "Unavailable",
                "stat",
                [("sum(draco_resourcepool_unavailable_devices)", "")],
                "Devices tainted NoSchedule or NoExecute (unhealthy ones among them).",
                4,
                4,
            ),
            Panel(
                "Pending pods", "stat", [("sum(draco_pending_pods)", "")], "Gated pods not placed yet.", 4, 4
            ),
            Panel(
                "Pending groups",
                "stat",
                [("sum(draco_pending_groups)", "")],
                "Groups of pods that wait to be placed whole.",
                4,
                4,
            ),
            Panel(
                "Unhealthy",
                "stat",
                [("sum(draco_resourcepool_unhealthy_devices)", "")],
                "Devices their node agent reports unhealthy (draco top lists which).",
                4,
                4,
            ),
            Panel(
                "Processes",
                "stat",
                [("count by (component) (draco_build_info)", "{{component}}")],
                "draco processes scraped, by component.",
                6,
                4,
            ),
            Panel(
                "Operator leader",
                "stat",
                [
                    (
                        f'max by (name) (leader_election_master_status {DRACO}{{component="operator"}})',
                        "{{name}}",
                    )
                ],
                "1 while an operator holds the Lease.",
                4,
                4,
            ),
            Panel(
                "Webhook certificate expires in",
                "stat",
                [("min(draco_webhook_certificate_expiration_timestamp_seconds) - time()", "")],
                "Time left on the webhook's serving certificate.",
                5,
                4,
                unit="s",
            ),
            Panel(
                "Event loop lag",
                "stat",
                [("max(draco_event_loop_lag_seconds)", "")],
                "How long a callback waits for the operator's event loop.",
                5,
                4,
                unit="s",
            ),
        ],
    ),
    (
        "Nodes",
        [
            Panel(
                "Devices per node",
                "table",
                [
                    (f"sum by (node) (draco_resourcepool_devices{{{NODE}}})", "devices"),
                    (f"sum by (node) (draco_resourcepool_allocated_devices{{{NODE}}})", "allocated"),
                    (f"sum by (node) (draco_resourcepool_available_devices{{{NODE}}})", "available"),
                    (f"sum by (node) (draco_resourcepool_unavailable_devices{{{NODE}}})", "unavailable"),
                    (f"sum by (node) (draco_resourcepool_unhealthy_devices{{{NODE}}})", "unhealthy"),
                ],
                "Per node, its pools' devices: published, allocated, free, tainted, unhealthy.",
                12,
                8,
                instant=True,
            ),
            Panel(
                "Allocated devices per node",
                "timeseries",
                [(f"sum by (node) (draco_resourcepool_allocated_devices{{{NODE}}})", "{{node}}")],
                "",
                12,
                8,
            ),
            Panel(
                "Partitions that still fit",
                "table",
                [
                    (
                        'max by (pool, attribute, type) (draco_resourcepool_partition_allocatable_devices{pool=~"$node"})',
                        "",
                    )
                ],
                "Per pool and partition type (a MIG profile): how many more fit the counters left. "
                "The types are alternatives, not to be added up.",
                12,
                8,
                instant=True,
            ),
            Panel(
                "Shared capacity left",
                "bargauge",
                [
                    (
                        '1 - sum by (pool, capacity) (draco_resourcepool_shareable_capacity_consumed{pool=~"$node"})'
                        ' / sum by (pool, capacity) (draco_resourcepool_shareable_capacity{pool=~"$node"})',
                        "{{pool}} {{capacity}}",
                    )
                ],
                "Of a pool's shareable devices (shared GPUs), the part of each capacity (memory) that shares "
                "do not consume.",
                12,
                8,
                unit="percentunit",
            ),
        ],
    ),
    (
        "Allocation",
        [
            Panel(
                "Allocation attempts",
                "timeseries",
                [("sum by (result) (rate(draco_allocation_attempts_total[$__rate_interval]))", "{{result}}")],
                "Attempts per second by result.",
                8,
                8,
                unit="ops",
            ),
            Panel(
                "Allocation attempt duration",
                "timeseries",
                [
                    (
                        "histogram_quantile(0.5, sum by (le) (rate(draco_allocation_duration_seconds_bucket[$__rate_interval])))",
                        "p50",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le) (rate(draco_allocation_duration_seconds_bucket[$__rate_interval])))",
                        "p99",
                    ),
                ],
                "",
                8,
                8,
                unit="s",
            ),
            Panel(
                "DeviceClasses",
                "table",
                [
                    (f"max by (deviceclass) (draco_deviceclass_selected_devices{{{CLASS}}})", "selected"),
                    (f"max by (deviceclass) (draco_deviceclass_allocated_devices{{{CLASS}}})", "allocated"),
                ],
                "Devices each class selects, and how many of those are allocated.",
                8,
                8,
                instant=True,
            ),
            Panel(
                "Device quota",
                "table",
                [
                    (
                        'max by (namespace, resourcequota, deviceclass) (draco_resourcequota{type="used"})',
                        "used",
                    ),
                    (
                        'max by (namespace, resourcequota, deviceclass) (draco_resourcequota{type="hard"})',
                        "hard",
                    ),
                ],
                "draco's entries of ResourceQuotas: used and hard, per namespace and class.",
                8,
                8,
                instant=True,
            ),
            Panel(
                "Prepares on nodes",
                "timeseries",
                [
                    (
                        "sum by (result) (rate(draco_agent_prepare_claims_total[$__rate_interval]))",
                        "{{result}}",
                    )
                ],
                "Claims the node agents prepared per second, by result.",
                8,
                8,
                unit="ops",
            ),
            Panel(
                "Prepare duration",
                "timeseries",
                [
                    (
                        "histogram_quantile(0.99, sum by (le) (rate(draco_agent_prepare_claim_duration_seconds_bucket[$__rate_interval])))",
                        "p99",
                    )
                ],
                "",
                8,
                8,
                unit="s",
            ),
            Panel(
                "Work queues",
                "timeseries",
                [(f"max by (name) (workqueue_depth {DRACO})", "{{name}}")],
                "Items waiting on each of draco's work queues.",
                8,
                8,
            ),
            Panel(
                "Webhook requests",
                "timeseries",
                [
                    (
                        "sum by (webhook, verdict) (rate(draco_webhook_requests_total[$__rate_interval]))",
                        "{{webhook}} {{verdict}}",
                    )
                ],
                "Admission reviews answered per second.",
                8,
                8,
                unit="reqps",
            ),
            Panel(
                "NRI",
                "stat",
                [("min by (instance) (draco_agent_nri_connected)", "{{instance}}")],
                "1 while a node agent is registered with its runtime's NRI.",
                8,
                8,
            ),
        ],
    ),
    (
        "Waiting pods and groups",
        [
            Panel(
                "Pending pods by queue",
                "timeseries",
                [("sum by (queue) (draco_pending_pods)", "{{queue}}")],
                "active: to be tried; backoff: failed, backing off; unschedulable: waiting for a change.",
                8,
                8,
            ),
            Panel(
                "Pending pods by reason",
                "timeseries",
                [("sum by (reason) (draco_pending_pods)", "{{reason}}")],
                "The last attempt's result (untried: not tried yet).",
                8,
                8,
            ),
            Panel(
                "Longest wait",
                "timeseries",
                [
                    ("max by (reason) (draco_pending_pod_max_wait_seconds)", "pod {{reason}}"),
                    ("max by (reason) (draco_pending_group_max_wait_seconds)", "group {{reason}}"),
                ],
                "How long the longest-waiting pod and group have waited since their creation.",
                8,
                8,
                unit="s",
            ),
            Panel(
                "Time to devices",
                "timeseries",
                [
                    (
                        "histogram_quantile(0.5, sum by (le, until) (rate(draco_pod_wait_seconds_bucket[$__rate_interval])))",
                        "p50 {{until}}",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le, until) (rate(draco_pod_wait_seconds_bucket[$__rate_interval])))",
                        "p99 {{until}}",
                    ),
                ],
                "From a pod's creation until draco allocated it and until it was bound.",
                8,
                8,
                unit="s",
            ),
            Panel(
                "Pending groups",
                "timeseries",
                [("sum by (reason) (draco_pending_groups)", "{{reason}}")],
                "Groups placed all or nothing that wait whole, by their last attempt's result.",
                8,
                8,
            ),
            Panel(
                "Pods waiting per DeviceClass",
                "bargauge",
                [
                    (
                        f"max by (deviceclass) (draco_pending_pod_deviceclass_requests{{{CLASS}}})",
                        "{{deviceclass}}",
                    )
                ],
                "Pending pods whose unallocated claims ask for the class.",
                8,
                8,
            ),
        ],
    ),
    (
        "Devices per container",
        [
            Panel(
                "Who holds what",
                "table",
                [
                    (
                        f"max by (node, namespace, pod, container, claim, driver, device, uuid) (draco_device_allocation{{{NODE}}})",
                        "",
                    )
                ],
                "Each device the node agents prepared, and the container holding it (draco_device_allocation).",
                16,
                10,
                instant=True,
            ),
            Panel(
                "Devices per namespace",
                "bargauge",
                [(f"count by (namespace) (draco_device_allocation{{{NODE}}})", "{{namespace}}")],
                "",
                8,
                10,
            ),
        ],
    ),
]


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [
        {
            "datasource": DATASOURCE,
            "expr": expr,
            "legendFormat": legend or "__auto",
            "refId": chr(ord("A") + i),
            **({"instant": True, "range": False, "format": "table"} if panel.instant else {}),
        }
        for i, (expr, legend) in enumerate(panel.queries)
    ]
    out: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": panel.options,
        "targets": targets,
    }
    if panel.kind == "table" and len(targets) > 1:
        out["transformations"] = [{"id": "merge", "options": {}}]
    return out


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": name},
        "definition": query,
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "current": {"text": "All", "value": "$__all"},
        "refresh": 2,
        "sort": 1,
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    panel_id, y = 1, 0
    for title, row in ROWS:
        panels.append({"id": panel_id, "type": "row", "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})  # fmt: skip
        panel_id, y, x, line = panel_id + 1, y + 1, 0, 0
        for panel in row:
            if x + panel.width > 24:
                x, y, line = 0, y + line, 0
            panels.append(_panel(panel, panel_id, x, y))
            panel_id, x, line = panel_id + 1, x + panel.width, max(line, panel.height)
        y += line
    return {
        "uid": "draco",
        "title": "draco",
        "description": "Dynamic Resource Allocation with draco: devices, allocation, waiting pods and groups, "
        "and the devices each container holds (docs/observability.md).",
        "tags": ["draco", "dra", "devices"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                _variable("node", "Node", "label_values(draco_resourcepool_devices, node)"),
                _variable(
                    "deviceclass",
                    "DeviceClass",
                    "label_values(draco_deviceclass_selected_devices, deviceclass)",
                ),
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run `make dashboard`", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
