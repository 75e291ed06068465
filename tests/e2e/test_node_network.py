"""The real node keeps its network in a namespace of its own.

While a pod runs on it, the host's network namespace has no address and no route it did
not have before the node started, and nothing in it reaches the pods' range, the node's
address or the `kubernetes` Service's; the bridge is not there either. Inside the node's
namespace are all of them; the pod reaches the API server at the Service's address (the
relay), and `kubectl logs` reaches the kubelet at the node's address (the API server's
egress proxy).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import BRIDGE, IMAGE, KUBELET_PORT, Node
from tests.e2e.hostnet import HostNetwork, host_network_leaks
from tests.e2e.support import wait_for

pytestmark = pytest.mark.e2e

LOOK = (
    "ip -4 addr show; ip -4 route; "
    'if nc -w 10 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" </dev/null; '
    'then echo "API SERVER REACHED at $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; fi; '
    'echo "---- end"; exec sleep 3600'
)


def pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            # On the real node: the session's other tests' Nodes (objects without a kubelet)
            # are in the cluster too, and its kube-scheduler would gladly bind there.
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "look", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", LOOK]}
            ],
        },
    }


def test_the_node_serves_only_inside_its_own_network_namespace(
    kube: ControlPlane, node: Node, namespace: str, host_network_before_node: HostNetwork
) -> None:
    assert node.netns is not None
    kube.kubectl("create", "-f", "-", input=json.dumps(pod("look", namespace, node.name)))

    # Through the API server's egress proxy into the node's namespace, to the kubelet.
    logs = str(
        wait_for(
            lambda: (
                (out := kube.kubectl("logs", "-n", namespace, "look", check=False).stdout)
                and "---- end" in out
                and out
            ),
            timeout=180,
            what="the pod's output through `kubectl logs`",
            explain=lambda: kube.kubectl("describe", "pod", "-n", namespace, "look", check=False).stdout,
        )
    )
    status = json.loads(kube.kubectl("get", "pod", "-n", namespace, "look", "-o", "json").stdout)["status"]
    subnet = ipaddress.ip_network(node.subnet)
    assert ipaddress.ip_address(status["podIP"]) in subnet, status
    assert status["hostIP"] == node.address, status
    assert f"default via {node.address}" in logs, logs
    # The relay in the node's namespace, at the address the kubelet gave the pod.
    assert f"API SERVER REACHED at {kube.service_address}:443" in logs, logs
    addresses = json.loads(kube.kubectl("get", "node", node.name, "-o", "json").stdout)["status"]["addresses"]
    assert {"type": "InternalIP", "address": node.address} in addresses

    # Inside the node's namespace: the bridge with the node's address, the route to the
    # pods, the Service's address, the kubelet listening.
    inside = node.netns.addresses()
    assert f"inet {node.address}/{subnet.prefixlen}" in inside and BRIDGE in inside, inside
    assert f"inet {kube.service_address}/32" in inside, inside
    assert f"{node.subnet} dev {BRIDGE}" in node.netns.ip("-4", "route"), node.netns.ip("-4", "route")
    assert node.netns.connectable(node.address, KUBELET_PORT)

    # The host's namespace: as before the node started, with nothing of the node's.
    leaks = host_network_leaks(
        host_network_before_node, ranges=[node.subnet, f"{kube.service_address}/32"], links=[BRIDGE]
    )
    assert not leaks, "\n".join(leaks) + "\n" + host_network_before_node.text()
