"""The Helm chart in e2e tests: `helm` (built by hack/helm.sh into the cache), rendering
charts/draco, applying what it renders, and kubeconfigs that carry tokens of the chart's
own ServiceAccounts (minted with the TokenRequest API, as the kubelet would for a pod)."""

from __future__ import annotations

import base64
import functools
import json
import os
import socket
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e.support import DracoProcess, json_list, wait_for

__all__ = [
    "CHART",
    "agent_identity",
    "allocate_trainer",
    "apply_objects",
    "args_of",
    "by_kind",
    "create_ready_node",
    "get_json",
    "helm",
    "helm_binary",
    "host_address",
    "kubectl_as",
    "operator_credentials",
    "patch_as",
    "remove_release",
    "render",
    "render_error",
    "request_as",
    "route_service",
    "service_account_kubeconfig",
    "start_chart_webhook",
]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "draco"


@functools.cache
def helm_binary() -> Path:
    """`HELM` when set (what `make test` exports), else what `hack/helm.sh` prints (it
    builds helm once into ~/.cache/draco, minutes the first time)."""
    given = os.environ.get("HELM")
    if given and os.access(given, os.X_OK):
        return Path(given)
    out = subprocess.run(
        [str(ROOT / "hack" / "helm.sh")], capture_output=True, text=True, check=True, timeout=3600
    )
    return Path(out.stdout.strip().splitlines()[-1])


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def _values_args(values: Mapping[str, Any] | None, folder: Path) -> list[str]:
    if not values:
        return []
    path = folder / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return ["--values", str(path)]


def render(
    *,
    release: str,
    namespace: str,
    values: Mapping[str, Any] | None = None,
    include_crds: bool = False,
) -> list[dict[str, Any]]:
    """`helm template` of the chart: the objects it would install."""
    with tempfile.TemporaryDirectory() as folder:
        args = ["template", release, str(CHART), "--namespace", namespace]
        args += _values_args(values, Path(folder))
        if include_crds:
            args.append("--include-crds")
        out = helm(*args)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def render_error(*, values: Mapping[str, Any]) -> str:
    """What `helm template` says when it refuses `values`."""
    with tempfile.TemporaryDirectory() as folder:
        result = helm("template", "x", str(CHART), *_values_args(values, Path(folder)), check=False)
    assert result.returncode != 0, f"helm accepted {values}"
    return result.stderr


def apply_objects(
    kube: ControlPlane, objects: Iterable[Mapping[str, Any]], *, dry_run: bool = False
) -> subprocess.CompletedProcess[str]:
    """Server-side apply, as `helm install` would create them (field manager `helm`).
    Conflicts are forced: the session applied the CRDs before, as another manager, and a
    kube-apiserver before 1.31 stored them without their selectableFields, so the chart's
    copy differs from what is stored (a fresh cluster has no such owner)."""
    args = ["apply", "--server-side", "--force-conflicts", "--field-manager=helm", "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    return kube.kubectl(*args, input=json_list(objects), check=False)


def service_account_kubeconfig(
    kube: ControlPlane, *, namespace: str, account: str, path: Path, pod: str | None = None
) -> Path:
    """A kubeconfig whose user is `account`'s token (TokenRequest API); `pod` binds the
    token to that pod, which puts the pod's node name into it."""
    args = ["create", "token", account, "-n", namespace, "--duration=1h"]
    if pod:
        args += ["--bound-object-kind=Pod", f"--bound-object-name={pod}"]
    token = kube.kubectl(*args).stdout.strip()
    cluster = yaml.safe_load(kube.kubeconfig.read_text())["clusters"][0]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": account}}],
                "current-context": account,
            }
        )
    )
    path.chmod(0o600)
    return path


def kubectl_as(
    kube: ControlPlane, kubeconfig: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl with another user's kubeconfig (never raises: callers look at the result)."""
    return subprocess.run(
        [str(kube.binaries / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def by_kind(objects: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def operator_credentials(kube: ControlPlane, *, namespace: str, folder: Path) -> tuple[Path, str]:
    """The chart's operator ServiceAccount and RBAC installed in `namespace` (release
    named after it, so cluster-scoped names are per test): a kubeconfig with its token and
    the name of the one Lease it may hold (in `namespace`: pass
    `--leader-election-namespace`)."""
    release = f"o{namespace[-6:]}"
    objects = render(
        release=release,
        namespace=namespace,
        values={"webhook": {"enabled": False}, "agent": {"enabled": False}, "deviceClasses": {}},
    )
    result = apply_objects(kube, [o for o in objects if o["kind"] in RBAC_KINDS])
    assert result.returncode == 0, result.stderr
    kubeconfig = service_account_kubeconfig(
        kube, namespace=namespace, account=f"{release}-operator", path=folder / "operator.kubeconfig"
    )
    return kubeconfig, f"{release}-operator"


def host_address() -> str:
    """A non-loopback address of this machine (Endpoints refuse loopback addresses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))  # no packet is sent: this only picks the route
            address = str(s.getsockname()[0])
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        pytest.skip("no non-loopback IPv4 address to put into the webhook Service's endpoints")
    return address


def route_service(kube: ControlPlane, namespace: str, service: str, address: str, port: int) -> None:
    """What the endpoints controller would write for the webhook's pods: the Service's
    `https` port at `address:port` (both APIs: kube-apiserver resolves with one of them)."""
    objects = [
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-test",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": service},
            },
            "addressType": "IPv4",
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        },
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": service, "namespace": namespace},
            "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port}]}],
        },
    ]
    result = apply_objects(kube, objects)
    assert result.returncode == 0, result.stderr


def create_ready_node(kube: ControlPlane, name: str) -> None:
    """A Node as a kubelet would report it: its allocatable resources (kube-scheduler's
    NodeResourcesFit, which draco runs too, admits no pod on a node without them), Ready,
    without the not-ready taint that admission puts on a new Node."""
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }
    kube.kubectl("create", "-f", "-", input=json.dumps(body))
    status = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
    kube.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    kube.kubectl("patch", "node", name, "--type=merge", "-p", '{"spec": {"taints": null}}')


def request_as(
    kubeconfig: Path, method: str, path: str, body: Mapping[str, Any] | None = None, *, patch: str = "merge"
) -> tuple[int, str]:
    """One API request to `path` with the token and CA of `kubeconfig`, as that user's
    client sends it (no GET first, as `kubectl patch` makes): (HTTP status, the body, whose
    `message` says why a request was refused). A PATCH is a JSON merge patch, or a
    strategic one with `patch="strategic-merge"`."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    content_type = f"application/{patch}-patch+json" if method == "PATCH" else "application/json"
    request = urllib.request.Request(
        cluster["server"] + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={
            "Authorization": f"Bearer {config['users'][0]['user']['token']}",
            "Content-Type": content_type,
        },
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def patch_as(kubeconfig: Path, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """A JSON merge patch to `path` as the user of `kubeconfig` (`request_as`)."""
    return request_as(kubeconfig, "PATCH", path, body)


def get_json(kube: ControlPlane, *args: str) -> dict[str, Any]:
    out = kube.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def args_of(objects: list[dict[str, Any]], kind: str, name: str) -> list[str]:
    (workload,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    args: list[str] = workload["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def agent_identity(kube: ControlPlane, *, namespace: str, release: str, node: str, path: Path) -> Path:
    """The chart's agent ServiceAccount as the agent of `node` holds it: a pod of that
    account on the node (the one the kubelet would run), and a kubeconfig at `path` with a
    token bound to that pod, which carries the node's name."""
    name = f"{release}-agent-{node}"[:63].rstrip("-")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "serviceAccountName": f"{release}-agent",
            "containers": [{"name": "agent", "image": "registry.invalid/draco"}],
        },
    }
    assert apply_objects(kube, [pod]).returncode == 0
    return service_account_kubeconfig(
        kube, namespace=namespace, account=f"{release}-agent", path=path, pod=name
    )


def start_chart_webhook(
    kube: ControlPlane,
    draco_process: Callable[..., DracoProcess],
    *,
    namespace: str,
    release: str,
    folder: Path,
    extra: Sequence[str] = (),
) -> DracoProcess:
    """`draco webhook` as the chart's Deployment runs it: the certificate of the chart's
    Secret, a token of the chart's ServiceAccount, reached through the chart's Service
    (its endpoints routed to a process here)."""
    secret = get_json(kube, "secret", "-n", namespace, f"{release}-webhook-tls")
    tls = folder / "tls"
    tls.mkdir(parents=True)
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (tls / key).write_bytes(base64.b64decode(secret["data"][key]))
    token = service_account_kubeconfig(
        kube, namespace=namespace, account=f"{release}-webhook", path=folder / "webhook.kubeconfig"
    )
    address, port = host_address(), free_port()
    route_service(kube, namespace, f"{release}-webhook", address, port)
    return draco_process(
        "webhook", "--listen-address", address, "--port", str(port),
        "--cert-file", str(tls / "tls.crt"), "--key-file", str(tls / "tls.key"), "--ca-file", str(tls / "ca.crt"),
        "--metrics-port", "0", "--health-port", "0", *extra,
        env={"KUBECONFIG": str(token)}, name="webhook",
    )  # fmt: skip


def remove_release(
    kube: ControlPlane, objects: Sequence[Mapping[str, Any]], *, nodes: Sequence[str] = ()
) -> None:
    """What a test installed, and its nodes with their slices (they must not attract later
    tests' pods). Slices picked here, not by a field selector: 1.30 serves none on
    spec.nodeName."""
    kube.kubectl(
        "delete", "-f", "-", "--ignore-not-found", "--wait=false", input=json_list(objects), check=False
    )
    for item in get_json(kube, "resourceslices.resource.draco.dev").get("items", []):
        if item.get("spec", {}).get("nodeName") in nodes:
            kube.kubectl("delete", "resourceslices.resource.draco.dev", item["metadata"]["name"],
                         "--ignore-not-found", "--wait=false", check=False)  # fmt: skip
    for node in nodes:
        kube.kubectl("delete", "node", node, "--ignore-not-found", "--wait=false", check=False)


def allocate_trainer(
    kube: ControlPlane,
    *,
    namespace: str,
    device_class: str,
    node: str,
    explain: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """A gated pod `trainer` on `node` whose claim comes from a template of one device of
    `device_class`; waits until draco allocated, prepared and un-gated it, and returns the
    claim (pod -> claim -> allocation -> prepare -> un-gate)."""
    template = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer",
            "namespace": namespace,
            "annotations": {
                CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
            },
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": "registry.invalid/none"}],
        },
    }
    kube.kubectl("create", "-f", "-", input=json.dumps(template))
    kube.kubectl("create", "-f", "-", input=json.dumps(pod))

    def ungated() -> bool:
        spec = get_json(kube, "pod", "-n", namespace, "trainer").get("spec", {})
        return not any(g["name"] == SCHEDULING_GATE for g in spec.get("schedulingGates") or [])

    wait_for(ungated, timeout=120, what="the pod allocated, prepared and un-gated", explain=explain)
    (claim,) = get_json(kube, "resourceclaims.resource.draco.dev", "-n", namespace)["items"]
    return dict(claim)
