"""charts/draco against the real kube-apiserver of the tests.

What the chart renders is accepted by the API server with every feature on and off; the
schema refuses wrong values; the installed chart's ServiceAccounts are enough for the
operator, webhook and agent to take a pod through claim, allocation, preparation and
un-gating; the webhook is reached through the chart's Service with the chart's CA; the
admission policy keeps an agent to its own node's slices; the documented uninstall order
leaves no finalizer behind.

The processes run here, not in containers (there is no container engine or kubelet for
them): each gets a kubeconfig with a token of its ServiceAccount, and the agent's token is
bound to a pod on its node, as the kubelet's would be.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.api.constants import FINALIZER
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.agent_support import CLAIMS, SLICES, pool_complete, slices_of
from tests.e2e.chartkit import (
    CHART,
    agent_identity,
    allocate_trainer,
    apply_objects,
    args_of,
    by_kind,
    create_ready_node,
    get_json,
    helm,
    kubectl_as,
    patch_as,
    remove_release,
    render,
    render_error,
    service_account_kubeconfig,
    start_chart_webhook,
)
from tests.e2e.lifecycle_support import events
from tests.e2e.support import DracoProcess, restore_crd_conversion, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")

# Each feature switched away from its default (and the defaults, first).
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "no-eviction": {"operator": {"deviceTaintEviction": False}},
    "no-extended-resources": {"operator": {"extendedResources": False}},
    "some-namespaces": {"operator": {"namespaces": ["team-*", "ml"]}},
    "no-operator": {"operator": {"enabled": False}},
    "no-webhook": {"webhook": {"enabled": False}},
    "cert-manager": {"webhook": {"certificates": {"source": "cert-manager"}}},
    "no-agent": {"agent": {"enabled": False}},
    "nvidia": {"agent": {"drivers": ["nvidia"]}},
    "fake-and-nvidia": {"agent": {"drivers": ["fake", "nvidia"]}},
    "no-nri": {"agent": {"nriSocket": ""}},
    "no-node-restriction": {"agent": {"nodeRestriction": False}},
    "no-binding-conditions": {"agent": {"bindingConditions": False}},
    "nvidia-compat-shares-mps": {
        "agent": {
            "drivers": ["nvidia"],
            "nvidiaCompat": True,
            "nvidiaShares": "memory:0,1",
            "nvidiaTaintEffect": "NoExecute",
            "nvidiaMps": True,
        }
    },
    "no-device-classes": {"deviceClasses": {}},
    "no-metrics": {"metrics": {"service": False}},
    "service-monitors": {
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "readers": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}],
        }
    },
    "plain-metrics": {"metrics": {"secure": False, "serviceMonitor": {"enabled": True}}},
}

# cert-manager's and the Prometheus Operator's CRDs are not available on these machines:
# these stand-ins (any fields accepted) let the API server check the kinds, names and
# metadata of the chart's Issuer, Certificate and ServiceMonitors, not their specs.
STAND_IN_CRDS = [
    ("cert-manager.io", "Issuer", "issuers"),
    ("cert-manager.io", "Certificate", "certificates"),
    ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
]


def stand_in_crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    version = "v1"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def stand_ins(kube: ControlPlane) -> None:
    apply_objects(kube, [stand_in_crd(*c) for c in STAND_IN_CRDS])
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                 *(f"crd/{p}.{g}" for g, _, p in STAND_IN_CRDS))  # fmt: skip


def merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, Mapping) and key in out else value
    return out


def rules_of(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    (role,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == name]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


# ---- lint, template, schema


def test_helm_lint_passes_with_every_variant() -> None:
    for name, values in VARIANTS.items():
        args = ["lint", str(CHART), "--strict"]
        for key, value in values.items():
            args += ["--set-json", f"{key}={json.dumps(value)}"]
        result = helm(*args, check=False)
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_rendered_object_is_accepted_by_the_api_server(
    kube: ControlPlane, namespace: str, stand_ins: None, variant: str
) -> None:
    release = f"r{secrets.token_hex(3)}"
    objects = render(release=release, namespace=namespace, values=VARIANTS[variant], include_crds=True)
    kinds = {o["kind"] for o in objects}
    result = apply_objects(kube, objects, dry_run=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(objects), result.stdout
    # Each switch does what it says.
    values = merged(yaml.safe_load((CHART / "values.yaml").read_text()), VARIANTS[variant])
    assert ("Deployment" in kinds) == (values["operator"]["enabled"] or values["webhook"]["enabled"])
    assert ("DaemonSet" in kinds) == values["agent"]["enabled"]
    assert ("ValidatingAdmissionPolicy" in kinds) == (
        values["agent"]["enabled"] and values["agent"]["nodeRestriction"]
    )
    assert (set(WEBHOOK_KINDS) <= kinds) == values["webhook"]["enabled"]
    assert ("Certificate" in kinds) == (
        values["webhook"]["enabled"] and values["webhook"]["certificates"]["source"] == "cert-manager"
    )
    metrics = values["metrics"]
    assert ("ServiceMonitor" in kinds) == (
        metrics["secure"] and metrics["service"] and metrics["serviceMonitor"]["enabled"]
    )
    for monitor in by_kind(objects, "ServiceMonitor"):
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["scheme"] == "https" and endpoint["bearerTokenFile"], endpoint
    readers = [
        o for o in by_kind(objects, "ClusterRoleBinding") if o["metadata"]["name"].endswith("-metrics-reader")
    ]
    assert [b["subjects"] for b in readers] == (
        [metrics["readers"]] if metrics["secure"] and metrics["readers"] else []
    )
    for workload in (*by_kind(objects, "Deployment"), *by_kind(objects, "DaemonSet")):
        args = workload["spec"]["template"]["spec"]["containers"][0]["args"]
        assert ("--metrics-secure" in args) == metrics["secure"], workload["metadata"]["name"]
    compat = values["agent"]["nvidiaCompat"] and "nvidia" in values["agent"]["drivers"]
    assert len(by_kind(objects, "DeviceClass")) == len(values["deviceClasses"]) + (2 if compat else 0)
    if compat:  # NVIDIA's classes, gpu.nvidia.com with NVIDIA's extendedResourceName
        classes = {c["metadata"]["name"]: c["spec"] for c in by_kind(objects, "DeviceClass")}
        assert classes["gpu.nvidia.com"]["extendedResourceName"] == "nvidia.com/gpu"
        assert "extendedResourceName" not in classes["mig.nvidia.com"]
    assert len(by_kind(objects, "CustomResourceDefinition")) == len(list((CHART / "crds").glob("*.yaml")))
    if values["operator"]["enabled"]:
        operator = f"{release}-operator"
        pods = next(r for r in rules_of(objects, operator) if r["resources"] == ["pods"])
        eviction = values["operator"]["deviceTaintEviction"]
        # Always: a pod kube-scheduler refused where draco pinned it is deleted (and a bare
        # one created again) to be placed again; taint evictions delete pods too.
        assert {"create", "delete"} <= set(pods["verbs"])
        assert ("--no-device-taint-eviction" in args_of(objects, "Deployment", operator)) == (not eviction)
        extended = values["operator"]["extendedResources"]
        assert any(r["resources"] == ["nodes/status"] for r in rules_of(objects, operator)) == extended
        assert ("--no-extended-resources" in args_of(objects, "Deployment", operator)) == (not extended)
    if values["agent"]["enabled"]:
        args = args_of(objects, "DaemonSet", f"{release}-agent")
        assert [a for a in args if a.startswith("--driver=")] == [
            f"--driver={d}" for d in values["agent"]["drivers"]
        ]
        assert any(a.startswith("--nri-socket=") for a in args) == bool(values["agent"]["nriSocket"])
        assert ("--binding-conditions" in args) == values["agent"]["bindingConditions"]
        assert ("ConfigMap" in kinds) == ("fake" in values["agent"]["drivers"])
        nvidia = "nvidia" in values["agent"]["drivers"]
        assert (f"--nvidia-taint-effect={values['agent']['nvidiaTaintEffect']}" in args) == nvidia
        shares = values["agent"]["nvidiaShares"]
        assert (f"--nvidia-shares={shares}" in args) == bool(nvidia and shares)
        assert any(a.startswith("--nvidia-mps-shm-dir=") for a in args) == bool(
            nvidia and values["agent"]["nvidiaMps"]
        )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"agent": {"drivers": ["cuda"]}}, "value must be one of 'fake', 'nvidia'"),
        ({"operator": {"replica": 2}}, "additional properties 'replica' not allowed"),
        ({"operator": {"replicas": 0}}, "minimum: got 0, want 1"),
        (
            {"webhook": {"certificates": {"source": "vault"}}},
            "value must be one of 'generate', 'cert-manager'",
        ),
        ({"agent": {"hostPaths": {"cdiDir": "var/run/cdi"}}}, "does not match pattern"),
    ],
)
def test_the_schema_refuses_wrong_values_with_a_clear_message(values: dict[str, Any], message: str) -> None:
    error = render_error(values=values)
    assert "values don't meet the specifications of the schema" in error, error
    assert message in error, error


def test_the_chart_webhook_configurations_are_what_draco_webhook_prints(
    namespace: str, tmp_path: Path
) -> None:
    release = "draco"
    objects = render(release=release, namespace=namespace)
    (secret,) = by_kind(objects, "Secret")
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    printed = subprocess.run(
        [sys.executable, "-m", "draco.cli", "webhook", "--print-configuration",
         "--service", f"{namespace}/{release}-webhook", "--ca-file", str(ca),
         "--exempt-user", f"system:serviceaccount:{namespace}:{release}-operator",
         "--agent-user", f"system:serviceaccount:{namespace}:{release}-agent"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    expected = {d["kind"]: d["webhooks"] for d in yaml.safe_load_all(printed.stdout)}
    for kind in WEBHOOK_KINDS:
        (rendered,) = by_kind(objects, kind)
        assert rendered["webhooks"] == expected[kind], kind


# ---- installed


def broken_class_refused(kube: ControlPlane) -> bool:
    probe = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "chart-webhook-probe"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
    }
    result = kube.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False)
    return "denied the request" in result.stderr


def slice_for(name: str, node_name: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "extra"}],
        },
    }


def cluster_state(kube: ControlPlane, processes: Mapping[str, DracoProcess], namespace: str) -> str:
    """What a failed wait of the installed chart should say: each process's state and log
    tail, and the API state a draco process depends on (slices, nodes, events, admission
    webhooks and policies, the CRDs' conversion) left by this test or an earlier one."""
    lines: list[str] = []
    for name, process in processes.items():
        code = process.popen.poll()
        lines.append(f"--- {name} ({'running' if code is None else f'exited {code}'}), log tail:")
        lines.append(process.logs()[-4000:])
    lines.append("--- ResourceSlices (name node driver pool generation/count labels owners):")
    for s in get_json(kube, SLICES).get("items", []):
        spec, meta = s.get("spec") or {}, s["metadata"]
        pool = spec.get("pool") or {}
        owners = [f"{o.get('kind')}/{o.get('name')}" for o in meta.get("ownerReferences") or []]
        lines.append(
            f"{meta['name']} {spec.get('nodeName')} {spec.get('driver')} {pool.get('name')} "
            f"{pool.get('generation')}/{pool.get('resourceSliceCount')} {meta.get('labels')} {owners}"
        )
    nodes = get_json(kube, "nodes").get("items", [])
    lines.append(f"--- Nodes: {[n['metadata']['name'] for n in nodes]}")
    lines.append("--- Events of the namespace and of slices:")
    for e in get_json(kube, "events", "-A").get("items", []):
        involved = e.get("involvedObject") or {}
        if e["metadata"]["namespace"] == namespace or involved.get("kind") == "ResourceSlice":
            lines.append(f"{e.get('type')} {e.get('reason')} {involved.get('kind')}/{involved.get('name')}: "
                         f"{e.get('message')}")  # fmt: skip
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        lines.append(f"--- {kind}:")
        for c in get_json(kube, kind).get("items", []):
            for w in c.get("webhooks") or []:
                client = w.get("clientConfig") or {}
                resources = sorted({r for rule in w.get("rules") or [] for r in rule.get("resources") or []})
                lines.append(f"{c['metadata']['name']}/{w['name']} {client.get('url') or client.get('service')} "
                             f"failurePolicy={w.get('failurePolicy')} {resources}")  # fmt: skip
    for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        lines.append(f"--- {kind}:")
        for p in get_json(kube, kind).get("items", []):
            lines.append(f"{p['metadata']['name']}: {json.dumps(p.get('spec'))[:600]}")
    lines.append("--- CRD conversion and stored versions:")
    for crd in get_json(kube, "crds").get("items", []):
        if crd["spec"]["group"] == "resource.draco.dev":
            lines.append(f"{crd['metadata']['name']}: {json.dumps(crd['spec'].get('conversion'))[:400]} "
                         f"stored={crd.get('status', {}).get('storedVersions')}")  # fmt: skip
    return "\n".join(lines)


def pod_policy_keeps_agents_to_device_health(
    kube: ControlPlane, namespace: str, agent: Path, *, node1: str
) -> None:
    """node-1's agent may write the device-health condition of a pod on node-1, nothing
    else of it, and nothing of a pod elsewhere (the gated `trainer` has no node yet)."""
    on_node = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-node-1", "namespace": namespace},
        "spec": {"nodeName": node1, "containers": [{"name": "main", "image": "registry.invalid/none"}]},
    }
    assert apply_objects(kube, [on_node]).returncode == 0

    def patch(pod: str, condition: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        body = json.dumps({"status": {"conditions": [condition]}})
        return kubectl_as(kube, agent, "patch", "pod", pod, "-n", namespace, "--subresource=status",
                          "--type=strategic", "-p", body)  # fmt: skip

    health = {
        "type": "resource.draco.dev/DevicesHealthy",
        "status": "False",
        "reason": "Unhealthy",
        "message": "x",
    }
    allowed = patch("on-node-1", health)
    assert allowed.returncode == 0, allowed.stderr
    denied = patch("on-node-1", {"type": "Ready", "status": "True"})
    assert f"the agent on node {node1} may change only the condition resource.draco.dev/DevicesHealthy" in (
        denied.stderr
    ), denied.stderr
    denied = patch("trainer", health)
    assert (
        f"may not write the status of Pod {namespace}/trainer, which is not on its node" in denied.stderr
    ), denied.stderr
    kube.kubectl("delete", "pod", "on-node-1", "-n", namespace, "--grace-period=0", "--force", check=False)


def claim_policy_keeps_agents_in_their_lane(
    kube: ControlPlane,
    namespace: str,
    release: str,
    claim: dict[str, Any],
    *,
    kubeconfigs: dict[str, Path],
    nodes: tuple[str, str],
    folder: Path,
) -> None:
    """An agent writes only `status.devices` entries of devices allocated to a claim from
    its own node's pool (its prepare flow has already run under the policy); the operator
    repairs a reservation another writer removed, and says so."""
    node1, node2 = nodes
    name = claim["metadata"]["name"]
    # node-2's agent: a token bound to a pod on node-2, as the kubelet would mint it.
    agent1 = kubeconfigs["agent"]
    agent2 = agent_identity(
        kube, namespace=namespace, release=release, node=node2, path=folder / "agent2.kubeconfig"
    )

    def patch_status(kubeconfig: Path, claim_name: str, status: dict[str, Any]) -> tuple[int, str]:
        """A merge patch of the claim's status as that user, as the agent writes it
        (`kubectl patch` would first GET the status subresource, which the agent may not)."""
        path = f"/apis/resource.draco.dev/v1/namespaces/{namespace}/resourceclaims/{claim_name}/status"
        return patch_as(kubeconfig, path, {"status": status})

    def denied(result: tuple[int, str], message: str) -> None:
        code, text = result
        assert code == 403, f"{code}: {text}"
        assert message in text, text
        assert "ValidatingAdmissionPolicy" in text, text

    (mine,) = claim["status"]["devices"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    # A claim allocated to node-2 (written by the admin here, as draco's allocator would).
    other = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "on-node-2", "namespace": namespace},
        "spec": claim["spec"],
    }
    kube.kubectl("create", "-f", "-", input=json.dumps(other))
    other_result = {**result, "pool": node2, "device": "gpu-0"}
    allocation = {
        "devices": {"results": [other_result]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node2]}]}
            ]
        },
    }
    # No reservation: nothing the operator would change meanwhile (no pod uses it).
    kube.kubectl(
        "patch", CLAIMS, "on-node-2", "-n", namespace, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"allocation": allocation, "nodeName": node2, "state": "allocated",
                               "allocatedDevices": f"{node2}/gpu-0"}}),
    )  # fmt: skip
    reservation = {"resource": "pods", "name": "elsewhere", "uid": "4d2c1b8e-0000-4000-8000-000000000002"}

    # node-1's token cannot change a claim allocated to node-2: not its reservations, not
    # a device status, not even one of node-1's pool.
    not_its_node = (
        f"the agent on node {node1} may not write the status of ResourceClaim {namespace}/on-node-2"
    )
    denied(
        patch_status(agent1, "on-node-2", {"reservedFor": [reservation]}),
        f"{not_its_node}: it is allocated to node {node2}",
    )
    entry2 = {
        "driver": other_result["driver"],
        "pool": node2,
        "device": "gpu-0",
        "conditions": mine["conditions"],
    }
    denied(patch_status(agent1, "on-node-2", {"devices": [entry2]}), not_its_node)
    denied(patch_status(agent1, "on-node-2", {"devices": [{**entry2, "pool": node1}]}), not_its_node)
    # node-2's token: its own entry for the allocated device, yes; anything else, no.
    allowed = patch_status(agent2, "on-node-2", {"devices": [entry2]})
    assert allowed[0] == 200, allowed
    denied(
        patch_status(agent2, "on-node-2", {"devices": [entry2, {**entry2, "device": "gpu-1"}]}),
        f"the agent on node {node2} may write status.devices entries only for devices allocated to "
        f"ResourceClaim {namespace}/on-node-2 from its node's pool",
    )
    only_devices = (
        f"the agent on node {node2} may change only status.devices of ResourceClaim {namespace}/on-node-2"
    )
    denied(patch_status(agent2, "on-node-2", {"reservedFor": [reservation]}), only_devices)
    denied(patch_status(agent2, "on-node-2", {"state": "pending"}), only_devices)
    denied(patch_status(agent2, "on-node-2", {"allocation": None}), only_devices)
    # ... nor the trainer's claim on node-1, whose agent may not touch node-2's entries either.
    denied(
        patch_status(agent2, name, {"devices": [mine, entry2]}),
        f"the agent on node {node2} may not write the status of ResourceClaim {namespace}/{name}: "
        f"it is allocated to node {node1}",
    )
    denied(
        patch_status(agent1, "on-node-2", {"devices": []}),
        f"{not_its_node}: it is allocated to node {node2}",
    )
    denied(
        patch_status(agent1, name, {"reservedFor": None}),
        f"the agent on node {node1} may change only status.devices",
    )
    # Removing its own node's entries is always allowed (what unprepare does).
    assert patch_status(agent2, "on-node-2", {"devices": None})[0] == 200
    kube.kubectl("delete", CLAIMS, "on-node-2", "-n", namespace)

    # Another writer (the admin here, as node-1's token could before the policy) empties the
    # trainer's reservation: the operator, which knows the pod uses the claim, puts it back.
    pod_uid = get_json(kube, "pod", "-n", namespace, "trainer")["metadata"]["uid"]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod_uid]
    kube.kubectl(
        "patch", CLAIMS, name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"reservedFor": None}}),
    )  # fmt: skip

    def repaired() -> list[dict[str, Any]]:
        return [e for e in events(kube, namespace=namespace, reason="ResourceClaimStatusRepaired")
                if e["involvedObject"]["name"] == name]  # fmt: skip

    wait_for(repaired, timeout=60, what="the operator to repair the claim's reservation")
    (event,) = repaired()
    assert event["type"] == "Warning"
    assert event["message"] == (
        "Repaired the status another writer changed: reservedFor lacked pod trainer that uses the claim"
    )
    status = get_json(kube, CLAIMS, "-n", namespace, name)["status"]
    assert [r["uid"] for r in status["reservedFor"]] == [pod_uid]
    assert status["state"] == "allocated,reserved"
    assert status["allocation"] == claim["status"]["allocation"]


def test_the_installed_chart_runs_draco_with_its_own_service_accounts(
    kube: ControlPlane, namespace: str, draco_process: Start, tmp_path: Path
) -> None:
    release = f"d{secrets.token_hex(3)}"
    driver = f"gpu.{release}.draco.dev"
    device_class = f"{release}-gpu"
    values = {
        # No container runtime beside these processes.
        "agent": {
            "nriSocket": "",
            "fakeDevices": {
                "drivers": [
                    {"name": driver, "cdiClass": "gpu", "devices": [{"name": "gpu-{index}", "count": 2}]}
                ]
            },
        },
        "deviceClasses": {
            device_class: {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
        },
    }
    objects = render(release=release, namespace=namespace, values=values)
    webhook_configurations = [o for o in objects if o["kind"] in WEBHOOK_KINDS]
    # Everything but the webhook configurations: those go in once the webhook serves.
    result = apply_objects(kube, [o for o in objects if o["kind"] not in WEBHOOK_KINDS])
    assert result.returncode == 0, result.stderr
    node1, node2 = f"{release}-node-1", f"{release}-node-2"
    for name in (node1, node2):
        create_ready_node(kube, name)
    kubeconfigs = {
        "operator": service_account_kubeconfig(
            kube, namespace=namespace, account=f"{release}-operator", path=tmp_path / "operator.kubeconfig"
        ),
        "agent": agent_identity(
            kube, namespace=namespace, release=release, node=node1, path=tmp_path / "agent.kubeconfig"
        ),
    }
    processes: dict[str, DracoProcess] = {}
    try:
        # The webhook with the chart's certificate, reached through the chart's Service.
        secret = get_json(kube, "secret", "-n", namespace, f"{release}-webhook-tls")
        for configuration in webhook_configurations:
            for webhook in configuration["webhooks"]:
                assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
                assert webhook["clientConfig"]["service"]["name"] == f"{release}-webhook"
        processes["webhook"] = start_chart_webhook(
            kube, draco_process, namespace=namespace, release=release, folder=tmp_path / "webhook",
            extra=[a for a in args_of(objects, "Deployment", f"{release}-webhook")
                   if a.startswith(("--patch-crds", "--service="))],
        )  # fmt: skip
        assert apply_objects(kube, webhook_configurations).returncode == 0
        wait_for(
            lambda: broken_class_refused(kube), timeout=60, what="the webhook to answer through its Service"
        )
        # With the chart's ServiceAccount it pointed the CRDs' conversion at its Service, with
        # the chart's CA: a v1beta1 manifest goes in and reads back as v1.
        beta = {"apiVersion": "resource.draco.dev/v1beta1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "beta-gpu", "namespace": namespace},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": device_class}]}}}}  # fmt: skip
        wait_for(
            lambda: kube.kubectl("create", "-f", "-", input=json.dumps(beta), check=False).returncode == 0,
            timeout=60,
            what="a v1beta1 template converted through the chart's Service",
        )
        stored = get_json(kube, "resourceclaimtemplates.v1.resource.draco.dev", "-n", namespace, "beta-gpu")
        assert stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == device_class

        # The agent on node-1, with the chart's device file.
        (config_map,) = by_kind(objects, "ConfigMap")
        devices = tmp_path / "devices.yaml"
        devices.write_text(config_map["data"]["devices.yaml"])
        processes["agent"] = draco_process(
            "agent", "--node-name", node1, "--driver", "fake", "--config", str(devices),
            "--binding-conditions", "--cdi-dir", str(tmp_path / "cdi"), "--state-dir", str(tmp_path / "state"),
            env={"KUBECONFIG": str(kubeconfigs["agent"])}, name="agent",
        )  # fmt: skip
        wait_for(
            lambda: pool_complete(slices_of(kube, node1)),
            timeout=90,
            what="node-1's slices",
            explain=lambda: cluster_state(kube, processes, namespace),
        )

        # The operator with the chart's Lease.
        processes["operator"] = start_operator(
            draco_process,
            namespace,
            lease=f"{release}-operator",
            extra=["--leader-election-namespace", namespace],
            env={"KUBECONFIG": str(kubeconfigs["operator"])},
        )

        claim = allocate_trainer(
            kube,
            namespace=namespace,
            device_class=device_class,
            node=node1,
            explain=lambda: cluster_state(kube, processes, namespace),
        )
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == driver
        assert result["device"] in {d["name"] for s in slices_of(kube, node1) for d in s["spec"]["devices"]}
        (entry,) = claim["status"]["devices"]
        assert {c["type"]: c["status"] for c in entry["conditions"]}["draco.dev/prepared"] == "True"
        assert FINALIZER in claim["metadata"]["finalizers"]

        # The policy: node-1's agent may write node-1's slices, not node-2's.
        agent = kubeconfigs["agent"]
        denied = kubectl_as(
            kube, agent, "create", "-f", "-", input=json.dumps(slice_for(f"{release}-n2", node2, driver))
        )
        assert denied.returncode != 0
        assert f"the agent on node {node1} may not write ResourceSlices of node {node2}" in denied.stderr, (
            denied.stderr
        )
        assert "ValidatingAdmissionPolicy" in denied.stderr, denied.stderr
        allowed = kubectl_as(
            kube, agent, "create", "-f", "-", input=json.dumps(slice_for(f"{release}-n1", node1, driver))
        )
        assert allowed.returncode == 0, allowed.stderr
        # ... nor delete node-2's (made by the admin here), nor write a slice of no node.
        kube.kubectl("create", "-f", "-", input=json.dumps(slice_for(f"{release}-n2", node2, driver)))
        denied = kubectl_as(kube, agent, "delete", SLICES, f"{release}-n2")
        assert "may not write ResourceSlices of node" in denied.stderr, denied.stderr
        assert kubectl_as(kube, agent, "delete", SLICES, f"{release}-n1").returncode == 0
        for name in (f"{release}-n1", f"{release}-n2"):
            kube.kubectl("delete", SLICES, name, "--ignore-not-found")
        claim_policy_keeps_agents_in_their_lane(
            kube, namespace, release, claim, kubeconfigs=kubeconfigs, nodes=(node1, node2), folder=tmp_path
        )
        pod_policy_keeps_agents_to_device_health(kube, namespace, kubeconfigs["agent"], node1=node1)
        # The operator's writes are not the agent's: the policy does not match them.
        for name, process in processes.items():
            assert "orbidden" not in process.logs(), f"{name}: {process.logs()[-3000:]}"

        # Uninstall in the documented order: workloads, then claims, then the release.
        kube.kubectl("delete", "pod", "trainer", "-n", namespace, "--grace-period=0", "--force")
        kube.kubectl("delete", CLAIMS, "--all", "-n", namespace, "--wait=false")
        wait_for(
            lambda: not get_json(kube, CLAIMS, "-n", namespace).get("items"), timeout=90, what="claims gone"
        )
    finally:
        for process in processes.values():
            process.stop()
        restore_crd_conversion(kube)  # the webhook pointed the CRDs at this release's Service
        remove_release(kube, objects, nodes=(node1, node2))
    for kind, name in (("validatingwebhookconfiguration", f"{release}.resource.draco.dev"),
                       ("validatingadmissionpolicy", f"{release}-agent.resource.draco.dev"),
                       ("clusterrole", f"{release}-operator")):  # fmt: skip
        assert not get_json(kube, kind, name), f"{kind} {name} left after uninstall"
    leftover = [
        c for c in get_json(kube, CLAIMS, "-A").get("items", []) if c["metadata"]["namespace"] == namespace
    ]
    assert leftover == [], "claims left after uninstall"
