"""Node objects for clusters without kubelets (the test control plane, demos, simulations).

With `--create-nodes` the agent creates the Node objects of the nodes it serves, reports
them Ready with some capacity, and lifts the not-ready taint the API server puts on a new
node (the node lifecycle controller would do that once a kubelet reports Ready; here there
is neither). On a real cluster the agent only reads its node's uid (for the slices'
owner reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from draco.errors import AlreadyExistsError
from draco.kube.client import NODES, Kube, Obj

__all__ = ["ensure_node", "node_uid"]

_NODE_LIFECYCLE_TAINTS: Final = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


async def node_uid(kube: Kube, name: str) -> str | None:
    node = await kube.get_or_none(NODES, name)
    return str(node["metadata"]["uid"]) if node is not None else None


async def ensure_node(kube: Kube, name: str, *, labels: Mapping[str, str]) -> str:
    """Create a Node object unless it exists; its uid."""
    body: Obj = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}}
    try:
        node = await kube.create(NODES, body)
    except AlreadyExistsError:
        uid = await node_uid(kube, name)
        assert uid is not None, f"node {name} exists and is gone again"
        return uid
    status = {
        "status": {
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated by draco agent",
                }
            ],
        }
    }
    await kube.patch(NODES, name, status, subresource="status")
    taints = [
        t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") not in _NODE_LIFECYCLE_TAINTS
    ]
    await kube.patch(NODES, name, {"spec": {"taints": taints or None}})
    return str(node["metadata"]["uid"])
