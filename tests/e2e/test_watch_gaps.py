"""Objects deleted while the operator's watches are broken stop being offered.

The operator talks to a kube-apiserver of its own (over the test cluster's etcd) through a
TCP proxy. The test cuts the proxy and stops that API server, deletes a ResourceSlice and
a Node through the test's API server, starts a new API server, points the proxy at it and
restores it: what a restarted API server looks like to a client. The new server's watch
cache begins after the deletions, so every watch of the operator resumes with a 410 (too
old) and lists again. A LIST that reports only what exists (what Kopf's watches did)
never tells that the slice and the node went away, and the operator keeps offering them.
The operator's informers report what a re-list finds gone as deleted, so it stops
offering them: the DeviceClass's count of published devices drops, and a pod is placed on
the one node left with a slice, never on the others.
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


def host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


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

    first, first_url = kube.start_apiserver("kube-apiserver-watch-gaps-1")
    second = None
    try:
        with TcpProxy(*host_port(first_url)) as proxy:
            config = proxied_kubeconfig(kube.kubeconfig, proxy, tmp_path / "proxied-kubeconfig")
            # Every namespace (DeviceClass status is kept only then); no Lease, whose
            # renewals would fail while the proxy is cut.
            operator = start_operator(
                draco_process, extra=["--leader-elect=false"], env={"KUBECONFIG": str(config)}
            )
            wait_for(lambda: logged(operator, "Allocation started"), timeout=90, what="the operator to start")
            wait_for(lambda: selected_devices(kube, class_name) == 3, timeout=60, what="3 devices published")

            proxy.cut()
            first.stop()
            kube.kubectl("delete", "resourceslices.resource.draco.dev", gone_slice)
            kube.kubectl("delete", "node", gone_node)
            second, second_url = kube.start_apiserver("kube-apiserver-watch-gaps-2")
            proxy.retarget(*host_port(second_url))
            proxy.restore()

            # The slice's deletion reaches the operator: the class no longer counts its device.
            wait_for(
                lambda: selected_devices(kube, class_name) == 2,
                timeout=120,
                what="the deleted slice's device no longer counted",
            )
            # The Nodes were listed again too (the pod below must not race that LIST).
            wait_for(
                lambda: logged(operator, "Listed again", kind="Node"),
                timeout=120,
                what="the operator's Nodes listed again",
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

            # No device is left: a second pod waits (neither the deleted slice's device nor
            # the device of the deleted node is offered).
            k.create(kube, [k.pod(namespace, "q", [{"name": "gpu", "resourceClaimName": "second"}])])
            wait_for(
                lambda: k.event_notes(kube, namespace, "q", "FailedScheduling"),
                timeout=60,
                what="the second pod reported unschedulable",
            )
            q = k.get(kube, "pod", "q", namespace=namespace)
            assert q is not None and k.is_gated(q)
            operator.stop()  # while the proxy still relays: a clean stop
    finally:
        first.stop()
        if second is not None:
            second.stop()
