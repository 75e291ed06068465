"""Allocation of gated pods on a real API server, the operator running as a process.

Each test builds its own little cluster: Nodes as objects, a DeviceClass and
ResourceSlices for a driver named after the test's namespace, claims and gated pods.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from draco.api.constants import NODE_FIELD, NODE_LABEL
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, selectable_fields_served, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]


def cluster(kube: ControlPlane, namespace: str, *, nodes: int, devices: int) -> list[str]:
    names = [f"{namespace}-n{i}" for i in range(nodes)]
    k.add_nodes(kube, [k.node(n) for n in names])
    k.apply(kube, [k.device_class(namespace)])
    k.apply(kube, [k.node_slice(namespace, n, devices) for n in names])
    return names


def settled_pod(kube: ControlPlane, namespace: str, name: str) -> k.Obj | None:
    pod = k.get(kube, "pod", name, namespace=namespace)
    return pod if pod is not None and not k.is_gated(pod) else None


def test_named_claim_is_allocated_reserved_and_the_pod_pinned(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    nodes = cluster(kube, namespace, nodes=2, devices=2)
    k.apply(kube, [k.claim(namespace, "gpus", count=2)])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "gpus"}])])
    start_operator(draco_process, namespace)

    pod = wait_for(lambda: settled_pod(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    node = k.pinned_node(pod)
    assert node in nodes
    claim = k.get(kube, k.CLAIMS, "gpus", namespace=namespace)
    assert claim is not None
    assert "resource.draco.dev/delete-protection" in claim["metadata"]["finalizers"]
    assert k.reserved_uids(claim) == {pod["metadata"]["uid"]}
    devices = k.allocated_devices(claim)
    assert len(devices) == 2 and {pool for _, pool, _ in devices} == {node}
    assert k.allocation_node(claim) == node
    assert claim["status"]["nodeName"] == node, "the node's agent selects on it"
    if selectable_fields_served(kube):
        selected = kube.kubectl(
            "get", k.CLAIMS, "-n", namespace, "--field-selector", f"{NODE_FIELD}={node}", "-o", "name"
        )
        assert selected.stdout.split() == ["resourceclaim.resource.draco.dev/gpus"]
        # The field is enough: no label, no metadata write for it.
        assert NODE_LABEL not in (claim["metadata"].get("labels") or {})
    else:
        # kube-apiserver < 1.31 serves no CRD selectable fields: agents select on the label.
        assert claim["metadata"]["labels"][NODE_LABEL] == node
        selected = kube.kubectl("get", k.CLAIMS, "-n", namespace, "-l", f"{NODE_LABEL}={node}", "-o", "name")
        assert selected.stdout.split() == ["resourceclaim.resource.draco.dev/gpus"]
    assert claim["status"]["state"] == "allocated,reserved"


def test_no_fit_explains_then_succeeds_when_a_node_with_devices_appears(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    nodes = cluster(kube, namespace, nodes=1, devices=1)
    k.apply(kube, [k.claim(namespace, "two", count=2)])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "two"}])])
    start_operator(draco_process, namespace)

    # The explanation names the class (on a busy machine a first attempt may time out first,
    # with an Event that says so and a retry).
    notes = wait_for(
        lambda: [
            n for n in k.event_notes(kube, namespace, "p", "FailedScheduling") if f"{namespace}-gpu" in n
        ],
        timeout=60,
        what="a FailedScheduling Event that explains",
    )
    assert isinstance(notes, list)
    pod = k.get(kube, "pod", "p", namespace=namespace)
    assert pod is not None and k.is_gated(pod)
    # The waiting claim's STATE column says so, as upstream's does (a schema default: no write).
    waiting = k.get(kube, k.CLAIMS, "two", namespace=namespace)
    assert waiting is not None and waiting["status"]["state"] == "pending", waiting
    printed = kube.kubectl("get", "drc", "two", "-n", namespace, "--no-headers").stdout.split()
    assert printed[1] == "pending", printed

    big = f"{namespace}-big"
    k.add_nodes(kube, [k.node(big)])
    k.apply(kube, [k.node_slice(namespace, big, 4)])
    pod = wait_for(lambda: settled_pod(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    assert k.pinned_node(pod) == big
    assert nodes[0] != big


def test_node_checks_keep_pods_off_nodes_that_do_not_admit_them(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    small, tainted, good = (f"{namespace}-{s}" for s in ("small", "tainted", "good"))
    tainted_node = k.node(tainted)
    tainted_node["spec"] = {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}
    k.add_nodes(kube, [k.node(small, cpu="1"), tainted_node, k.node(good, labels={"tier": "gold"})])
    k.apply(kube, [k.device_class(namespace)])
    k.apply(kube, [k.node_slice(namespace, n, 2) for n in (small, tainted, good)])
    k.apply(kube, [k.claim(namespace, "c")])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "c"}], cpu="2")])
    start_operator(draco_process, namespace)

    pod = wait_for(lambda: settled_pod(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    assert k.pinned_node(pod) == good


def test_two_pods_race_for_the_last_device(kube: ControlPlane, namespace: str, draco_process: Start) -> None:
    cluster(kube, namespace, nodes=1, devices=1)
    k.apply(kube, [k.claim(namespace, "a"), k.claim(namespace, "b")])
    k.create(
        kube,
        [
            k.pod(namespace, "pa", [{"name": "gpu", "resourceClaimName": "a"}]),
            k.pod(namespace, "pb", [{"name": "gpu", "resourceClaimName": "b"}]),
        ],
    )
    start_operator(draco_process, namespace)

    def one_settled() -> list[str]:
        return [n for n in ("pa", "pb") if settled_pod(kube, namespace, n) is not None]

    winners = wait_for(one_settled, timeout=60, what="one pod un-gated")
    assert isinstance(winners, list) and len(winners) == 1
    loser = "pb" if winners == ["pa"] else "pa"
    wait_for(
        lambda: k.event_notes(kube, namespace, loser, "FailedScheduling"), timeout=60, what="loser's Event"
    )
    claims = [k.get(kube, k.CLAIMS, n, namespace=namespace) for n in ("a", "b")]
    allocated = [c for c in claims if c is not None and k.allocated_devices(c)]
    assert len(allocated) == 1, "exactly one claim holds the only device"
    assert one_settled() == winners


def test_pod_deleted_while_gated_leaves_nothing_behind(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    cluster(kube, namespace, nodes=1, devices=1)
    k.apply(kube, [k.template(namespace, "four", count=4)])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimTemplateName": "four"}])])
    start_operator(draco_process, namespace)

    wait_for(lambda: k.event_notes(kube, namespace, "p", "FailedScheduling"), timeout=60, what="no-fit Event")
    pod = k.get(kube, "pod", "p", namespace=namespace)
    assert pod is not None and k.is_gated(pod)
    kube.kubectl("delete", "pod", "p", "-n", namespace, "--wait=false")
    wait_for(
        lambda: not k.items(kube, k.CLAIMS, namespace=namespace), timeout=60, what="generated claim deleted"
    )


def test_pod_deleted_after_ungating_frees_its_device_for_a_waiting_pod(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    cluster(kube, namespace, nodes=1, devices=1)
    k.apply(kube, [k.template(namespace, "one")])
    entry = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    k.create(kube, [k.pod(namespace, "first", entry)])
    start_operator(draco_process, namespace)
    wait_for(lambda: settled_pod(kube, namespace, "first"), timeout=60, what="first pod un-gated")

    k.create(kube, [k.pod(namespace, "second", entry)])
    wait_for(
        lambda: k.event_notes(kube, namespace, "second", "FailedScheduling"), timeout=60, what="second waits"
    )
    # Forced: an un-gated pod may be bound by a kube-scheduler (the session's node runs one) to
    # a Node without a kubelet, where a graceful deletion never ends and, as upstream, the
    # claim stays reserved for the terminating pod.
    kube.kubectl("delete", "pod", "first", "-n", namespace, "--grace-period=0", "--force")

    second = wait_for(lambda: settled_pod(kube, namespace, "second"), timeout=60, what="second pod un-gated")
    assert isinstance(second, dict)
    claims = k.items(kube, k.CLAIMS, namespace=namespace)
    owners = {c["metadata"]["ownerReferences"][0]["name"] for c in claims}
    assert owners == {"second"}, "the first pod's generated claim is deleted"
    assert k.reserved_uids(claims[0]) == {second["metadata"]["uid"]}


def test_pod_waits_for_its_template_then_runs(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    cluster(kube, namespace, nodes=1, devices=1)
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimTemplateName": "later"}])])
    start_operator(draco_process, namespace)

    wait_for(
        lambda: [e for e in k.events(kube, namespace, regarding="p") if e.get("type") == "Warning"],
        timeout=60,
        what="an Event about the missing template",
    )
    pod = k.get(kube, "pod", "p", namespace=namespace)
    assert pod is not None and k.is_gated(pod)
    k.apply(kube, [k.template(namespace, "later")])
    pod = wait_for(lambda: settled_pod(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    claim_name = k.generated_claims(pod)["gpu"]
    assert claim_name is not None
    claim = k.get(kube, k.CLAIMS, claim_name, namespace=namespace)
    assert claim is not None and k.reserved_uids(claim) == {pod["metadata"]["uid"]}


def test_a_generated_claim_is_recorded_by_the_write_that_pins_the_pod(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    cluster(kube, namespace, nodes=1, devices=1)
    k.apply(kube, [k.template(namespace, "one"), k.template(namespace, "four", count=4)])
    start_operator(draco_process, namespace)
    k.create(
        kube,
        [
            k.pod(namespace, "fits", [{"name": "gpu", "resourceClaimTemplateName": "one"}]),
            k.pod(namespace, "waits", [{"name": "gpu", "resourceClaimTemplateName": "four"}]),
        ],
    )

    pod = wait_for(lambda: settled_pod(kube, namespace, "fits"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    claim_name = k.generated_claims(pod)["gpu"]
    assert claim_name is not None
    claim = k.get(kube, k.CLAIMS, claim_name, namespace=namespace)
    assert claim is not None and k.reserved_uids(claim) == {pod["metadata"]["uid"]}
    # The lifecycle created the claim and left its name to the pin and un-gate: draco wrote
    # the pod once (the claim statuses were not applied on their own).
    listed = kube.kubectl("get", "pod", "fits", "-n", namespace, "-o", "json", "--show-managed-fields")
    fields = json.loads(listed.stdout)["metadata"]["managedFields"]
    assert "draco-lifecycle" not in {m["manager"] for m in fields}, json.dumps(fields)

    # A pod that cannot be placed yet has its generated claim recorded after the attempt.
    def recorded_while_gated() -> k.Obj | None:
        found = k.get(kube, "pod", "waits", namespace=namespace)
        return found if found is not None and k.generated_claims(found).get("gpu") else None

    waiting = wait_for(recorded_while_gated, timeout=60, what="claim of the waiting pod recorded")
    assert isinstance(waiting, dict) and k.is_gated(waiting)
    assert k.event_notes(kube, namespace, "waits", "FailedScheduling")


def test_a_gated_pod_without_claims_is_ungated_and_left_to_the_scheduler(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    cluster(kube, namespace, nodes=1, devices=1)
    k.create(kube, [k.pod(namespace, "p", [])])
    start_operator(draco_process, namespace)
    pod = wait_for(lambda: settled_pod(kube, namespace, "p"), timeout=60, what="pod un-gated")
    assert isinstance(pod, dict)
    assert k.pinned_node(pod) is None
    assert not (pod["spec"].get("affinity") or {}).get("nodeAffinity")


def test_describe_shows_the_allocation_event_and_an_unfit_headline_that_keeps_its_reason(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    cluster(kube, namespace, nodes=2, devices=2)
    k.apply(kube, [k.claim(namespace, "one")])
    # 40 claims of one device each on 4 devices: the reasons outgrow an Event's 1 KiB.
    many = [{"name": f"c{i}", "resourceClaimTemplateName": "one-gpu"} for i in range(40)]
    k.apply(kube, [k.template(namespace, "one-gpu")])
    k.create(
        kube,
        [
            k.pod(namespace, "fits", [{"name": "gpu", "resourceClaimName": "one"}]),
            k.pod(namespace, "greedy", many),
        ],
    )
    start_operator(draco_process, namespace)

    wait_for(lambda: settled_pod(kube, namespace, "fits"), timeout=90, what="pod un-gated")
    described = wait_for(
        lambda: (
            (out := kube.kubectl("describe", "pod", "fits", "-n", namespace).stdout)
            and "Allocated" in out
            and out
        ),
        timeout=60,
        what="the Allocated event in kubectl describe",
    )
    assert isinstance(described, str)
    assert f"Allocated claim {namespace}/one (" in described

    # (An attempt may time out first, under load: that Event says so and is not the headline.)
    notes = wait_for(
        lambda: [n for n in k.event_notes(kube, namespace, "greedy", "FailedScheduling") if "nodes are" in n],
        timeout=180,
        what="FailedScheduling with the nodes headline",
    )
    assert isinstance(notes, list)
    note = notes[-1]
    assert note.startswith("0/"), note
    assert "nodes are available: " in note and "cannot allocate all claims" in note, note
    assert len(note.encode()) <= 1024
    # Whole reason lines survive the cut (other tests' nodes may add reasons of their own).
    lines = note.split("\n")
    assert lines[1].startswith("- ") and lines[1].endswith(("left", "together")), note
    assert lines[-1].startswith("(and ") or len(lines) == 2, note
