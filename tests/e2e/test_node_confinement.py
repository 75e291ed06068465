"""Two node agents under their own identities, with the chart's RBAC, admission policies and
webhook: each writes what its node needs and nothing of the other node's.

The chart is applied as `helm install` would, the webhook runs behind the chart's Service
(it checks what the Event policy cannot read), and each agent runs as a process with a
token bound to a pod on its node, as the kubelet would mint it. Their own flows go through:
each publishes its node's pool, prepares the claim allocated to its node (status.devices,
a `Prepared` Event). Then each agent's token tries every write of the other node's (a
slice in the other's pool, even with its own nodeName, which would make the other node's
devices vanish; the other's slices changed or deleted; the status of the claim allocated
there and of the pod running there; Events about them) and of nobody's (a driver it does
not run, a pod's own message, an Event about a Secret or reported as another node): all
refused with a message naming the node, while the same writes of its own node are
accepted.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.agent_support import CLAIMS, SLICES, pool_complete, slices_of
from tests.e2e.chartkit import (
    agent_identity,
    apply_objects,
    by_kind,
    create_ready_node,
    get_json,
    remove_release,
    render,
    request_as,
    start_chart_webhook,
)
from tests.e2e.lifecycle_support import events
from tests.e2e.support import DracoProcess, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
HEALTH = "resource.draco.dev/DevicesHealthy"


def refused(result: tuple[int, str], message: str, *, by: str = "ValidatingAdmissionPolicy") -> None:
    code, text = result
    assert code == 403, f"{code}: {text}"
    assert message in text, text
    assert by in text, text


def accepted(result: tuple[int, str]) -> dict[str, Any]:
    code, text = result
    assert code in (200, 201), f"{code}: {text}"
    return dict(json.loads(text))


def a_slice(name: str, *, node: str, pool: str, driver: str, generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": "extra"}],
        },
    }


def an_event(namespace: str, regarding: Mapping[str, Any], *, instance: str) -> dict[str, Any]:
    meta = regarding["metadata"]
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{secrets.token_hex(6)}", "namespace": namespace},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "draco-agent",
        "reportingInstance": instance,
        "action": "Check",
        "reason": "Check",
        "note": "written by a test",
        "type": "Normal",
        "regarding": {
            "apiVersion": regarding["apiVersion"],
            "kind": regarding["kind"],
            "namespace": meta.get("namespace"),
            "name": meta["name"],
            "uid": meta["uid"],
        },
    }


def test_each_agent_writes_its_own_nodes_objects_and_none_of_the_others(
    kube: ControlPlane, namespace: str, draco_process: Start, tmp_path: Path
) -> None:
    release = f"c{secrets.token_hex(3)}"
    driver = f"gpu.{release}.draco.dev"
    values = {
        "operator": {"enabled": False},
        "agent": {
            "nriSocket": "",
            "fakeDevices": {
                "drivers": [
                    {"name": driver, "cdiClass": "gpu", "devices": [{"name": "gpu-{index}", "count": 2}]}
                ]
            },
        },
        "deviceClasses": {},
    }
    objects = render(release=release, namespace=namespace, values=values)
    configurations = [o for o in objects if o["kind"] in WEBHOOK_KINDS]
    assert apply_objects(kube, [o for o in objects if o["kind"] not in WEBHOOK_KINDS]).returncode == 0
    nodes = (f"{release}-a", f"{release}-b")
    for node in nodes:
        create_ready_node(kube, node)
    tokens = {
        node: agent_identity(
            kube,
            namespace=namespace,
            release=release,
            node=node,
            path=tmp_path / f"agent-{node[-1]}.kubeconfig",
        )
        for node in nodes
    }
    secret = get_json(kube, "secret", "-n", namespace, f"{release}-webhook-tls")
    processes: dict[str, DracoProcess] = {}
    try:
        # The webhook as the chart runs it, behind the chart's Service.
        processes["webhook"] = start_chart_webhook(
            kube, draco_process, namespace=namespace, release=release, folder=tmp_path / "webhook"
        )
        assert apply_objects(kube, configurations).returncode == 0

        # Both agents, each with its own token; each publishes its node's pool.
        (config_map,) = by_kind(objects, "ConfigMap")
        devices = tmp_path / "devices.yaml"
        devices.write_text(config_map["data"]["devices.yaml"])
        for node in nodes:
            processes[node] = draco_process(
                "agent", "--node-name", node, "--driver", "fake", "--config", str(devices),
                "--cdi-dir", str(tmp_path / node / "cdi"), "--state-dir", str(tmp_path / node / "state"),
                env={"KUBECONFIG": str(tokens[node])}, name=f"agent-{node[-1]}",
            )  # fmt: skip
        for node in nodes:
            wait_for(
                lambda node=node: pool_complete(slices_of(kube, node)), timeout=90, what=f"{node}'s pool"
            )

        # A pod on each node and a claim allocated to it there (the allocator's writes, made
        # by the admin here: there is no operator): each agent prepares its own.
        pods: dict[str, dict[str, Any]] = {}
        claims: dict[str, dict[str, Any]] = {}
        for node in nodes:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{node[-1]}", "namespace": namespace},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "main", "image": "registry.invalid/none"}],
                },
            }
            kube.kubectl("create", "-f", "-", input=json.dumps(pod))
            pods[node] = get_json(kube, "pod", "-n", namespace, pod["metadata"]["name"])
            claim = {
                "apiVersion": "resource.draco.dev/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"claim-{node[-1]}", "namespace": namespace},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "any"}}]}},
            }
            kube.kubectl("create", "-f", "-", input=json.dumps(claim))
            result = {"request": "gpu", "driver": driver, "pool": node, "device": "gpu-0"}
            selector = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}  # fmt: skip
            reserved = {
                "resource": "pods",
                "name": pod["metadata"]["name"],
                "uid": pods[node]["metadata"]["uid"],
            }
            status = {"allocation": {"devices": {"results": [result]}, "nodeSelector": selector},
                      "reservedFor": [reserved], "nodeName": node, "state": "allocated,reserved",
                      "allocatedDevices": f"{node}/gpu-0"}  # fmt: skip
            kube.kubectl("patch", CLAIMS, claim["metadata"]["name"], "-n", namespace, "--subresource=status",
                         "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip

        def prepared(node: str) -> dict[str, Any] | None:
            claim = get_json(kube, CLAIMS, "-n", namespace, f"claim-{node[-1]}")
            entries = (claim.get("status") or {}).get("devices") or []
            announced = [e for e in events(kube, namespace=namespace, reason="Prepared")
                         if e["involvedObject"]["name"] == f"claim-{node[-1]}"]  # fmt: skip
            return claim if entries and announced else None

        for node in nodes:
            claims[node] = wait_for(
                lambda node=node: prepared(node), timeout=90, what=f"{node}'s claim prepared"
            )  # type: ignore[assignment]
        prepared_events = {
            node: next(
                e for e in get_json(kube, "events.events.k8s.io", "-n", namespace)["items"]
                if e["reason"] == "Prepared" and e["regarding"]["name"] == f"claim-{node[-1]}"
            )
            for node in nodes
        }  # fmt: skip
        for node in nodes:
            assert prepared_events[node]["reportingInstance"] == node
        other_slices = {node: slices_of(kube, node) for node in nodes}

        for mine, theirs in (nodes, nodes[::-1]):
            token = tokens[mine]
            me = f"the agent on node {mine}"

            # Slices: none of the other node's pool, not even with its own nodeName (the way
            # to hide the other node's devices); none of a driver it does not run; its own, yes.
            slices = "/apis/resource.draco.dev/v1/resourceslices"
            refused(request_as(token, "POST", slices, a_slice("x", node=theirs, pool=theirs, driver=driver)),
                    f"{me} may not write ResourceSlices of node {theirs}")  # fmt: skip
            refused(request_as(token, "POST", slices, a_slice("x", node=mine, pool=theirs, driver=driver, generation=99)),
                    f"{me} may write only the ResourceSlices of its node's pool {mine}, not of pool {theirs}")  # fmt: skip
            refused(request_as(token, "POST", slices, a_slice("x", node=mine, pool=mine, driver="gpu.other.example")),
                    f"{me} may not write ResourceSlices of driver gpu.other.example, which it does not run "
                    f"(it runs {driver})")  # fmt: skip
            refused(request_as(token, "POST", slices, {**a_slice("x", node=mine, pool=mine, driver=driver),
                                                       "spec": {**a_slice("x", node=mine, pool=mine, driver=driver)["spec"],
                                                                "nodeName": None, "allNodes": True}}),
                    f"{me} may not write ResourceSlices without a node")  # fmt: skip
            victim = get_json(kube, SLICES, other_slices[theirs][0]["metadata"]["name"])
            emptied = json.loads(json.dumps(victim))  # its devices gone (nodeName and pool are immutable)
            emptied["spec"]["devices"] = []
            refused(request_as(token, "PUT", f"{slices}/{victim['metadata']['name']}", emptied),
                    f"{me} may not write ResourceSlices of node {theirs}")  # fmt: skip
            refused(request_as(token, "DELETE", f"{slices}/{victim['metadata']['name']}"),
                    f"{me} may not write ResourceSlices of node {theirs}")  # fmt: skip
            own = get_json(kube, SLICES, other_slices[mine][0]["metadata"]["name"])
            own["metadata"].setdefault("labels", {})["checked-by"] = "test"
            accepted(request_as(token, "PUT", f"{slices}/{own['metadata']['name']}", own))

            # Claim status: not of the claim allocated to the other node; of its own, yes.
            claims_path = f"/apis/resource.draco.dev/v1/namespaces/{namespace}/resourceclaims"
            (entry,) = claims[mine]["status"]["devices"]
            (their_entry,) = claims[theirs]["status"]["devices"]
            refused(request_as(token, "PATCH", f"{claims_path}/claim-{theirs[-1]}/status",
                               {"status": {"devices": [{**their_entry, "conditions": []}]}}),
                    f"{me} may not write the status of ResourceClaim {namespace}/claim-{theirs[-1]}: "
                    f"it is allocated to node {theirs}")  # fmt: skip
            accepted(request_as(token, "PATCH", f"{claims_path}/claim-{mine[-1]}/status",
                                {"status": {"devices": [entry]}}))  # fmt: skip

            # Pod status: the device-health condition of its node's pod, nothing of the other's,
            # and not the pod's own message or reason (what an eviction writes).
            pods_path = f"/api/v1/namespaces/{namespace}/pods"
            health = {"type": HEALTH, "status": "False", "reason": "Unhealthy", "message": "gpu-0 failed"}

            def pod_status(
                node: str, status: dict[str, Any], token: Path = token, pods_path: str = pods_path
            ) -> tuple[int, str]:
                return request_as(token, "PATCH", f"{pods_path}/pod-{node[-1]}/status", {"status": status},
                                  patch="strategic-merge")  # fmt: skip

            refused(pod_status(theirs, {"conditions": [health]}),
                    f"{me} may not write the status of Pod {namespace}/pod-{theirs[-1]}, which is not on its node")  # fmt: skip
            refused(pod_status(mine, {"message": "evicted", "reason": "Evicted"}),
                    f"{me} may change only the condition {HEALTH} of Pod {namespace}/pod-{mine[-1]}")  # fmt: skip
            refused(pod_status(mine, {"conditions": [{**health, "status": "True", "reason": "AllGood"}]}),
                    f"{me} may set the condition {HEALTH} of Pod {namespace}/pod-{mine[-1]} only to status False")  # fmt: skip
            accepted(pod_status(mine, {"conditions": [health]}))
            accepted(pod_status(mine, {"conditions": [{"type": HEALTH, "$patch": "delete"}]}))

            # Events: about its node's pod and claim, yes; about the other node's, about a
            # Secret, in another namespace than the object's, or as another node, no.
            events_path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
            accepted(request_as(token, "POST", events_path, an_event(namespace, pods[mine], instance=mine)))
            accepted(request_as(token, "POST", events_path, an_event(namespace, claims[mine], instance=mine)))
            refused(request_as(token, "POST", events_path, an_event(namespace, pods[theirs], instance=mine)),
                    f"{me} may not write an Event about Pod {namespace}/pod-{theirs[-1]}, which is not on its node",
                    by="agent-events.validate.resource.draco.dev")  # fmt: skip
            refused(request_as(token, "POST", events_path, an_event(namespace, claims[theirs], instance=mine)),
                    f"{me} may not write an Event about ResourceClaim {namespace}/claim-{theirs[-1]}, "
                    f"which is allocated to node {theirs}", by="agent-events.validate.resource.draco.dev")  # fmt: skip
            webhook_secret = {"apiVersion": "v1", "kind": "Secret",
                              "metadata": {"name": f"{release}-webhook-tls", "namespace": namespace,
                                           "uid": secret["metadata"]["uid"]}}  # fmt: skip
            refused(request_as(token, "POST", events_path, an_event(namespace, webhook_secret, instance=mine)),
                    f"{me} may write Events only about Pods and ResourceClaims, not about Secret")  # fmt: skip
            elsewhere = "/apis/events.k8s.io/v1/namespaces/default/events"
            refused(request_as(token, "POST", elsewhere, {**an_event("default", pods[mine], instance=mine)}),
                    f"{me} may write an Event about Pod {namespace}/pod-{mine[-1]} only in its namespace, "
                    "not in default")  # fmt: skip
            refused(request_as(token, "POST", events_path, an_event(namespace, pods[mine], instance=theirs)),
                    f"{me} may write only Events reported by itself (reportingInstance {mine})")  # fmt: skip
            their_event = prepared_events[theirs]["metadata"]["name"]
            refused(request_as(token, "PATCH", f"{events_path}/{their_event}",
                               {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}}),
                    f"{me} may write only Events reported by itself (reportingInstance {mine})")  # fmt: skip

        # Neither node's devices were hidden: each pool holds only its agent's slices, whole.
        for node in nodes:
            pool = [s for s in get_json(kube, SLICES)["items"] if s["spec"]["pool"]["name"] == node]
            assert pool_complete(pool) and {s["spec"]["nodeName"] for s in pool} == {node}, pool
        # Their own flows went through the policies and the webhook untouched.
        for name, process in processes.items():
            assert "orbidden" not in process.logs(), f"{name}: {process.logs()[-3000:]}"
    finally:
        for process in processes.values():
            process.stop()
        kube.kubectl("delete", CLAIMS, "--all", "-n", namespace, "--wait=false", check=False)
        remove_release(kube, objects, nodes=nodes)
