"""Objects deleted while the operator's watches are broken stop being offered.

The operator talks to the API server through a TCP proxy that the test cuts: every watch
breaks, and while none can reconnect a ResourceSlice and a Node are deleted straight at
the API server. A watch that comes back by listing again and reporting only what exists
(what Kopf's did) never learns of those deletions, and the operator keeps offering the
deleted slice's devices and the deleted node. The operator's informers resume from where
they were (or, after a 410, list again and report what vanished), so it stops offering
them: the DeviceClass's count of published devices drops, and a pod is placed on the one
node left with a slice, never on the others.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, start_operator, wait_for
from tests.e2e.tcpproxy import TcpProxy, proxied_kubeconfig

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]


def selected_devices(kube: ControlPlane, name: str) -> int | None:
    obj = k.get(kube, "deviceclasses.resource.draco.dev", name)
    return ((obj or {}).get("status") or {}).get("selectedDevices")


def logged(process: DracoProcess, event: str, **fields: str) -> bool:
    for line in process.logs().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event and all(record.get(key) == value for key, value in fields.items()):
            return True
    return False


def test_a_slice_and_a_node_deleted_while_the_watches_are_broken_are_no_longer_offered(
    kube: ControlPlane, namespace: str, draco_process: Start, tmp_path: Path
) -> None:
    # Three nodes with one device each; "first" placement takes them in name order.
    names = [f"{namespace}-{suffix}" for suffix in ("a", "b", "c")]
    k.add_nodes(kube, [k.node(n) for n in names])
    k.apply(kube, [k.device_class(namespace)])
    k.apply(kube, [k.node_slice(namespace, n, 1) for n in names])
    gone_slice = k.node_slice(namespace, names[0], 1)["metadata"]["name"]
    gone_node = names[1]
    class_name = f"{namespace}-gpu"

    server = urllib.parse.urlsplit(kube.server)
    assert server.hostname is not None and server.port is not None
    with TcpProxy(server.hostname, server.port) as proxy:
        config = proxied_kubeconfig(kube.kubeconfig, proxy, tmp_path / "proxied-kubeconfig")
        # Every namespace (DeviceClass status is kept only then); no Lease, whose renewals
        # would fail while the proxy is cut.
        operator = start_operator(
            draco_process, extra=["--leader-elect=false"], env={"KUBECONFIG": str(config)}
        )
        wait_for(lambda: logged(operator, "Allocation started"), timeout=90, what="the operator to start")
        wait_for(lambda: selected_devices(kube, class_name) == 3, timeout=60, what="3 devices published")

        proxy.cut()
        kube.kubectl("delete", "resourceslices.resource.draco.dev", gone_slice)
        kube.kubectl("delete", "node", gone_node)
        proxy.restore()

        # The slice's deletion reaches the operator: the class no longer counts its device.
        wait_for(
            lambda: selected_devices(kube, class_name) == 2,
            timeout=90,
            what="the deleted slice's device no longer counted",
        )
        # The watch of Nodes is back too (the first thing it delivers is that deletion).
        wait_for(
            lambda: (
                logged(operator, "Watch resumed", kind="Node")
                or logged(operator, "Listed again", kind="Node")
            ),
            timeout=90,
            what="the operator's watch of Nodes back",
        )

        k.apply(kube, [k.claim(namespace, "first", count=1), k.claim(namespace, "second", count=1)])
        k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "first"}])])

        def settled() -> k.Obj | None:
            pod = k.get(kube, "pod", "p", namespace=namespace)
            return pod if pod is not None and not k.is_gated(pod) else None

        pod = wait_for(settled, timeout=60, what="the pod placed")
        assert isinstance(pod, dict)
        assert k.pinned_node(pod) == names[2], "placed on a node whose slice or Node was deleted"
        claim = k.get(kube, k.CLAIMS, "first", namespace=namespace)
        assert claim is not None
        assert {pool for _, pool, _ in k.allocated_devices(claim)} == {names[2]}

        # No device is left: a second pod waits (the deleted slice's device and the device of
        # the deleted node are not offered).
        k.create(kube, [k.pod(namespace, "q", [{"name": "gpu", "resourceClaimName": "second"}])])
        wait_for(
            lambda: k.event_notes(kube, namespace, "q", "FailedScheduling"),
            timeout=60,
            what="the second pod reported unschedulable",
        )
        q = k.get(kube, "pod", "q", namespace=namespace)
        assert q is not None and k.is_gated(q)
        operator.stop()  # while the proxy still relays: a clean stop
