"""draco installed as users install it: `helm install` of charts/draco with the image built
here, on the whole test cluster. The chart's pods run on the real node: the operator's two
replicas (one leader), the webhook's two (the API server calls them through their
Service), the agent's DaemonSet (its CDI folder and the node containerd's NRI socket).
Then a user's pod with a claim runs and its container sees its device; the leader is
killed and the other replica takes over; the agent's pod is replaced and keeps what was
prepared; `helm upgrade` rolls a changed value out; `helm uninstall` leaves nothing.

The tests run in file order on one release (each step starts where the last one ended).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.cluster import SERVICE_CIDR, Cluster
from draco.tools.dev.node import BRIDGE, IMAGE
from tests.e2e.hostnet import HostNetwork, host_network_leaks
from tests.e2e.support import scaled, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "draco"
RELEASE = "draco"
NAMESPACE = "draco-system"
USERS = "team-a"
SLICES = "resourceslices.resource.draco.dev"
CLAIMS = "resourceclaims.resource.draco.dev"
#: What the fake driver's devices put into a container: an env var and a device node.
DEVICES = {
    "drivers": [
        {
            "name": "gpu.draco.dev",
            "cdiClass": "gpu",
            "devices": [
                {
                    "name": "gpu-{index}",
                    "count": 2,
                    "attributes": {"model": "A100", "index": {"int": "{index}"}},
                    "capacity": {"memory": "80Gi"},
                    "env": {"GPU_DEVICE": "gpu-{index}"},
                    "deviceNodes": [{"path": "/dev/fake-gpu{index}", "hostPath": "/dev/zero"}],
                }
            ],
        }
    ]
}
SHOW = (
    'echo "GPU_DEVICE=${GPU_DEVICE:-none}"; for d in /dev/fake-gpu*; do [ -c "$d" ] && echo "DEVICE $d"; done; '
    'echo "---- end"; exec sleep 3600'
)


class Release:
    """The helm release and what the tests read of it."""

    def __init__(self, cluster: Cluster, helm: str, image: tuple[Path, str], workdir: Path) -> None:
        assert cluster.plane is not None and cluster.node is not None
        self.cluster = cluster
        self.plane = cluster.plane
        self.node = cluster.node
        self.helm_bin = helm
        repository, _, tag = image[1].rpartition(":")
        self.values: dict[str, Any] = {
            "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
            "agent": {
                "nriSocket": str(self.node.nri_socket),
                "hostPaths": {"cdiDir": str(workdir / "cdi"), "stateDir": str(workdir / "state")},
                "fakeDevices": DEVICES,
            },
        }
        self.workdir = workdir

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(*args, check=check, input=input, timeout=scaled(120))

    def get(self, *args: str) -> Any:
        out = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def helm(self, *args: str, values: dict[str, Any] | None = None) -> str:
        argv = [self.helm_bin, f"--kubeconfig={self.plane.kubeconfig}", *args]
        if values is not None:
            path = self.workdir / "values.yaml"
            path.write_text(yaml.safe_dump(values))
            argv += ["-f", str(path)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=scaled(600), check=False)
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}\n{self.diagnose()}"
        return result.stdout

    def pods(self, component: str) -> list[dict[str, Any]]:
        items = self.get("pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name=draco-{component}")
        return [p for p in items.get("items", []) if not p["metadata"].get("deletionTimestamp")]

    def ready_pods(self, component: str) -> list[str]:
        ready = []
        for pod in self.pods(component):
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                ready.append(pod["metadata"]["name"])
        return sorted(ready)

    def wait_ready(self, component: str, count: int, *, timeout: float = 600) -> list[str]:
        wait_for(
            lambda: len(self.ready_pods(component)) == count and len(self.pods(component)) == count,
            timeout=timeout,
            interval=1,
            what=f"{count} ready {component} pods ({self.diagnose()})",
        )
        return self.ready_pods(component)

    def leader(self) -> str:
        """The operator pod holding the Lease (its identity is `<pod>_<random>`)."""
        lease = self.get("lease", "-n", NAMESPACE, f"{RELEASE}-operator")
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        return holder.rsplit("_", 1)[0] if holder else ""

    def diagnose(self) -> str:
        """Pods, their states and the namespace's last events: what a failed wait shows."""
        lines = []
        for pod in self.get("pods", "-A").get("items", []):
            status = pod.get("status") or {}
            states = [
                f"{c['name']}:{next(iter(c.get('state') or {'?': 0}))}(restarts {c.get('restartCount')})"
                for c in status.get("containerStatuses") or []
            ]
            lines.append(
                f"{pod['metadata']['namespace']}/{pod['metadata']['name']} {status.get('phase')} {states}"
            )
        events = self.get("events", "-A").get("items", [])[-12:]
        lines += [f"event {e.get('reason')}: {e.get('message')}" for e in events]
        return "\n".join(lines)

    def logs(self, pod: str, namespace: str = NAMESPACE, *extra: str) -> str:
        return self.kubectl("logs", "-n", namespace, pod, *extra, check=False).stdout


@pytest.fixture(scope="module")
def release(
    cluster: Cluster, helm: str, image: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> Release:
    return Release(cluster, helm, image, tmp_path_factory.mktemp("release"))


def user_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": USERS,
            "annotations": {
                CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
            },
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", SHOW]}
            ],
        },
    }


def test_the_image_runs_draco_as_its_non_root_user(release: Release, image: tuple[Path, str]) -> None:
    """The image alone, as the Dockerfile's final stage makes it: ENTRYPOINT draco, uid 65532."""
    release.kubectl("create", "namespace", "image-check")
    wait_for(
        lambda: release.get("serviceaccount", "-n", "image-check", "default"), timeout=60, what="default"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "version", "namespace": "image-check"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "draco", "image": image[1], "imagePullPolicy": "Never", "args": ["--version"]}
            ],
        },
    }
    release.kubectl("create", "-f", "-", input=json.dumps(pod))
    wait_for(
        lambda: (
            release.get("pod", "-n", "image-check", "version").get("status", {}).get("phase") == "Succeeded"
        ),
        timeout=180,
        what=f"`draco --version` in the image ({release.diagnose()})",
    )
    assert release.logs("version", "image-check").strip() == f"draco {image[1].rsplit(':', 1)[1]}"
    status = release.get("pod", "-n", "image-check", "version")["status"]["containerStatuses"][0]
    assert status["user"]["linux"]["uid"] == 65532, status
    release.kubectl("delete", "namespace", "image-check", "--wait=false")


def test_helm_install_runs_draco_as_pods_and_a_users_pod_gets_its_device(release: Release) -> None:
    release.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", values=release.values)

    operators = release.wait_ready("operator", 2)
    release.wait_ready("webhook", 2)
    release.wait_ready("agent", 1)
    wait_for(lambda: release.leader() in operators, timeout=120, what="one operator to hold the Lease")

    # The agent published the node's devices; it reached the NRI socket of the node's containerd.
    wait_for(
        lambda: [
            s for s in release.get(SLICES).get("items", []) if s["spec"]["nodeName"] == release.node.name
        ],
        timeout=120,
        what="the agent's ResourceSlices",
    )
    (agent,) = release.ready_pods("agent")
    wait_for(
        lambda: "NRI plugin registered" in release.logs(agent),
        timeout=120,
        what="the agent to register with NRI",
    )

    # The API server calls the webhook through its Service: an invalid object is refused by it.
    bad = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "not-cel"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
    }
    refused = release.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert refused.returncode != 0 and "admission webhook" in refused.stderr, refused.stderr

    # A user's pod with a claim from a template: allocated, scheduled, prepared, running.
    release.kubectl("create", "namespace", USERS)
    # ServiceAccount admission: a pod waits for kube-controller-manager's `default` account.
    wait_for(lambda: release.get("serviceaccount", "-n", USERS, "default"), timeout=60, what="team-a/default")
    template = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": USERS},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.draco.dev"}}]}
            }
        },
    }
    release.kubectl("apply", "-f", "-", input=json.dumps(template))
    release.kubectl("create", "-f", "-", input=json.dumps(user_pod("trainer")))

    def printed() -> str:
        out = release.logs("trainer", USERS)
        return out if "---- end" in out else ""

    out = wait_for(printed, timeout=300, interval=1, what=f"the user's pod to run ({release.diagnose()})")
    assert isinstance(out, str)
    claim = release.get(CLAIMS, "-n", USERS)["items"][0]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    device = result["device"]
    assert f"GPU_DEVICE={device}" in out, out
    assert f"DEVICE /dev/fake-gpu{device.rsplit('-', 1)[1]}" in out, out
    assert list((release.workdir / "cdi").glob("*.json")), "the agent wrote no CDI spec in its host folder"


def test_the_cluster_serves_only_inside_its_nodes_network_namespace(
    release: Release, host_network_before_cluster: HostNetwork
) -> None:
    """With the release's pods running: the webhook's pods (their IPs), the agent, the
    kubelet and the `kubernetes` Service's address are all in the node's namespace; the
    host's has no address or route it did not have before the cluster started."""
    node = release.node
    assert node.netns is not None
    subnet = ipaddress.ip_network(node.subnet)
    pods = [p for c in ("operator", "webhook") for p in release.pods(c)]
    assert pods and all(ipaddress.ip_address(p["status"]["podIP"]) in subnet for p in pods), pods
    inside = node.netns.addresses()
    assert f"inet {release.plane.service_address}/32" in inside and f"inet {node.address}/" in inside, inside
    leaks = host_network_leaks(
        host_network_before_cluster, ranges=[node.subnet, SERVICE_CIDR], links=[BRIDGE]
    )
    assert not leaks, "\n".join(leaks) + "\n" + host_network_before_cluster.text()


def test_killing_the_leader_hands_over_to_the_other_replica(release: Release) -> None:
    leader = release.leader()
    assert leader, "no leader"
    release.kubectl("delete", "pod", "-n", NAMESPACE, leader, "--grace-period=0", "--force", "--wait=false")
    wait_for(
        lambda: release.leader() not in ("", leader),
        timeout=180,
        interval=1,
        what="the other replica to lead",
    )
    release.wait_ready("operator", 2)


def test_a_new_agent_pod_keeps_what_was_prepared(release: Release) -> None:
    (old,) = release.ready_pods("agent")
    specs = sorted(p.name for p in (release.workdir / "cdi").glob("*.json"))
    release.kubectl("delete", "pod", "-n", NAMESPACE, old, "--wait=false")
    wait_for(
        lambda: release.ready_pods("agent") not in ([], [old]),
        timeout=300,
        interval=1,
        what="a new agent pod",
    )
    (new,) = release.ready_pods("agent")
    wait_for(lambda: "NRI plugin registered" in release.logs(new), timeout=120, what="the new agent on NRI")
    # The claim's preparation is still there; the running pod goes on.
    assert sorted(p.name for p in (release.workdir / "cdi").glob("*.json")) == specs
    pod = release.get("pod", "-n", USERS, "trainer")
    assert "running" in pod["status"]["containerStatuses"][0]["state"], pod["status"]


def test_helm_upgrade_rolls_out_a_changed_value(release: Release) -> None:
    before = {c: release.ready_pods(c) for c in ("operator", "webhook")}
    values = {**release.values, "logLevel": "DEBUG"}
    release.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, values=values)
    for component in ("operator", "webhook"):
        wait_for(
            lambda c=component: (  # type: ignore[misc]
                len(release.ready_pods(c)) == 2 and not set(release.ready_pods(c)) & set(before[c])
            ),
            timeout=600,
            interval=1,
            what=f"the {component} rolled out ({release.diagnose()})",
        )
    deployment = release.get("deployment", "-n", NAMESPACE, f"{RELEASE}-operator")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--log-level=DEBUG" in args or "DEBUG" in " ".join(args), args


def test_helm_upgrade_with_a_new_certificate_keeps_the_webhook_reached(release: Release) -> None:
    """`renewBeforeDays` beyond the certificate's validity makes `helm upgrade` make a new CA
    and serving certificate: the webhook configurations carry the new CA, the webhook's pods
    serve the new certificate (reloaded from the Secret's files), and the API server reaches
    the webhook with it again (an invalid object is refused by the webhook's verdict, not by
    a failed call)."""

    def tls_secret() -> dict[str, Any]:
        secrets = release.get("secrets", "-n", NAMESPACE).get("items", [])
        found: list[dict[str, Any]] = [
            s
            for s in secrets
            if s.get("type") == "kubernetes.io/tls"
            and "resource.draco.dev/not-after" in (s["metadata"].get("annotations") or {})
        ]
        (secret,) = found
        return secret

    def ca_bundles() -> set[str]:
        bundles = set()
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            for config in release.get(kind).get("items", []):
                for webhook in config.get("webhooks") or []:
                    service = (webhook.get("clientConfig") or {}).get("service") or {}
                    if service.get("namespace") == NAMESPACE:
                        bundles.add(webhook["clientConfig"]["caBundle"])
        return bundles

    before = tls_secret()["data"]
    assert ca_bundles() == {before["ca.crt"]}
    webhook_values = {**release.values.get("webhook", {}), "certificates": {"renewBeforeDays": 400}}
    release.helm(
        "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, values={**release.values, "webhook": webhook_values}
    )

    after = tls_secret()["data"]
    assert after["ca.crt"] != before["ca.crt"] and after["tls.crt"] != before["tls.crt"]
    assert ca_bundles() == {after["ca.crt"]}
    bad = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "not-cel-after-renewal"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
    }

    def refused_by_the_webhook() -> bool:
        refused = release.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
        assert refused.returncode != 0, "an invalid DeviceClass was stored"
        # While the webhook still serves the old certificate: "failed calling webhook".
        return "denied the request" in refused.stderr

    wait_for(
        refused_by_the_webhook,
        timeout=600,
        interval=2,
        what="the webhook reached with its new certificate",
    )


def test_helm_uninstall_leaves_nothing_behind(release: Release) -> None:
    release.kubectl("delete", "pod", "-n", USERS, "trainer", "--wait=false")
    wait_for(lambda: not release.get(CLAIMS, "-n", USERS).get("items"), timeout=300, what="the claim to go")
    release.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "10m")

    # What the chart made, and what its workloads made of it (ReplicaSets, pods, endpoints).
    # Not counted: the operator's Lease (its holder's record, as kube-scheduler leaves its
    # own) and the agent's ResourceSlices (owned by the Node; they go with the CRDs,
    # docs/install.md's step 4).
    namespaced = (
        "deployments,daemonsets,replicasets,pods,services,serviceaccounts,roles,rolebindings,"
        "configmaps,secrets,endpointslices"
    )
    cluster_wide = (
        "clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations,"
        "validatingadmissionpolicies,validatingadmissionpolicybindings,deviceclasses.resource.draco.dev"
    )

    def leftovers() -> list[str]:
        left = []
        for item in release.get(namespaced, "-n", NAMESPACE).get("items", []):
            # Made by kube-controller-manager in every namespace, not by the chart.
            if item["metadata"]["name"] not in ("default", "kube-root-ca.crt"):
                left.append(f"{item['kind']}/{item['metadata']['name']}")
        for item in release.get(cluster_wide).get("items", []):
            if (item["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == RELEASE:
                left.append(f"{item['kind']}/{item['metadata']['name']}")
        return left

    wait_for(lambda: not leftovers(), timeout=300, interval=1, what=f"nothing left ({leftovers()})")
