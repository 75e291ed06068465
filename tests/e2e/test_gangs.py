"""Groups of pods placed all or nothing, on a real API server with the operator as a process.

Each test builds its own nodes (objects: no kubelet, pods never run), a DeviceClass and
slices for a driver named after its namespace, a PodGroup (or a pod-group convention
other schedulers use) and gated pods that name it. What is checked is what users see: no
member un-gated before the group can run whole, no device held by a group that waits,
devices left for other pods, Events that say what is missing.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from draco.api.constants import POD_GROUP_LABEL, SCHEDULING_API_VERSION
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, scaled, start_operator, wait_for
from tests.e2e.test_scheduling_binding import report

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]
Obj = dict[str, object]
GROUPS = "podgroups.scheduling.draco.dev"
ONE_GPU = [{"name": "gpu", "resourceClaimTemplateName": "one"}]


def pod_group(namespace: str, name: str, min_count: int, **spec: object) -> Obj:
    return {
        "apiVersion": SCHEDULING_API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }


def members(
    namespace: str, group: str, count: int, claims: list[k.Obj] | None = None, **extra: object
) -> list[k.Obj]:
    pods = []
    for i in range(count):
        pod = k.pod(
            namespace,
            f"{group}-{i}",
            claims if claims is not None else ONE_GPU,
            labels={POD_GROUP_LABEL: group},
        )
        pod["spec"].update(extra)
        pods.append(pod)
    return pods


def setup(kube: ControlPlane, namespace: str, nodes: dict[str, int], *, count: int = 1) -> None:
    """Nodes named ``<namespace>-<suffix>`` with that many devices each, the class and a
    template ``one`` of ``count`` devices."""
    names = {f"{namespace}-{suffix}": devices for suffix, devices in nodes.items()}
    k.add_nodes(kube, [k.node(n) for n in names])
    k.apply(kube, [k.device_class(namespace), k.template(namespace, "one", count=count)])
    k.apply(kube, [k.node_slice(namespace, n, d) for n, d in names.items() if d])


def pods_of(kube: ControlPlane, namespace: str, group: str) -> list[k.Obj]:
    return [
        p
        for p in k.items(kube, "pods", namespace=namespace)
        if (p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL) == group
        or p["metadata"]["name"].startswith(f"{group}-")
    ]


def all_running(kube: ControlPlane, namespace: str, group: str, count: int) -> list[k.Obj] | None:
    pods = pods_of(kube, namespace, group)
    if len(pods) == count and all(not k.is_gated(p) and k.pinned_node(p) for p in pods):
        return pods
    return None


def allocated_claims(kube: ControlPlane, namespace: str) -> list[k.Obj]:
    return [
        c for c in k.items(kube, k.CLAIMS, namespace=namespace) if (c.get("status") or {}).get("allocation")
    ]


def claims_of(kube: ControlPlane, namespace: str, pods: list[k.Obj]) -> list[k.Obj]:
    uids = {p["metadata"]["uid"] for p in pods}
    return [
        c
        for c in k.items(kube, k.CLAIMS, namespace=namespace)
        if {r.get("uid") for r in c["metadata"].get("ownerReferences") or []} & uids
    ]


def told(kube: ControlPlane, namespace: str, pod: str, text: str) -> bool:
    return any(text in note for note in k.event_notes(kube, namespace, pod, "FailedScheduling"))


def test_a_group_that_cannot_fit_holds_nothing_and_runs_whole_when_capacity_comes(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    setup(kube, namespace, {"a": 1, "b": 1, "c": 1})
    k.apply(kube, [pod_group(namespace, "train", 4)])
    k.create(kube, members(namespace, "train", 4))
    operator = start_operator(draco_process, namespace)

    wait_for(
        lambda: told(kube, namespace, "train-0", "3 of 4 pod(s) can be placed together, 4 needed"),
        timeout=60,
        what="the group's members told what is missing",
        explain=operator.logs,
    )
    pods = pods_of(kube, namespace, "train")
    assert all(k.is_gated(p) for p in pods)
    assert allocated_claims(kube, namespace) == [], "a group that cannot run whole holds no device"
    group = k.get(kube, GROUPS, "train", namespace=namespace)
    assert group is not None
    condition = next(c for c in group["status"]["conditions"] if c["type"] == "PodGroupInitiallyScheduled")
    assert condition["status"] == "False" and "3 of 4" in condition["message"]

    # The devices the group does not hold serve a pod that fits alone.
    k.create(kube, [k.pod(namespace, "solo", ONE_GPU)])
    solo = wait_for(
        lambda: (p := k.get(kube, "pod", "solo", namespace=namespace)) and not k.is_gated(p) and p,
        timeout=60,
        what="a one-pod job un-gated beside the waiting group",
        explain=operator.logs,
    )
    assert isinstance(solo, dict) and k.pinned_node(solo)
    assert all(k.is_gated(p) for p in pods_of(kube, namespace, "train"))

    # Room for the whole group: all four run, placed by one decision.
    k.add_nodes(kube, [k.node(f"{namespace}-d")])
    k.apply(kube, [k.node_slice(namespace, f"{namespace}-d", 2)])
    running = wait_for(
        lambda: all_running(kube, namespace, "train", 4),
        timeout=90,
        what="every member un-gated",
        explain=operator.logs,
    )
    assert isinstance(running, list)
    claims = claims_of(kube, namespace, running)
    assert len(claims) == 4 and all((c.get("status") or {}).get("allocation") for c in claims)
    placed = [json.loads(line) for line in operator.logs().splitlines() if '"Placed group"' in line]
    assert [(p["group"], p["pods"]) for p in placed] == [(f"{namespace}/train", 4)]
    assert '"Allocated and un-gated pod"' not in "".join(
        line for line in operator.logs().splitlines() if "train-" in line
    ), "no member was placed on its own"


def test_two_groups_that_together_exceed_capacity_one_runs_the_other_waits_whole(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    setup(kube, namespace, {"a": 2, "b": 2})
    k.apply(kube, [pod_group(namespace, "left", 3), pod_group(namespace, "right", 3)])
    k.create(kube, [*members(namespace, "left", 3), *members(namespace, "right", 3)])
    operator = start_operator(draco_process, namespace)

    def one_runs() -> tuple[str, str] | None:
        for winner, loser in (("left", "right"), ("right", "left")):
            if all_running(kube, namespace, winner, 3):
                return winner, loser
        return None

    found = wait_for(one_runs, timeout=60, what="one group running", explain=operator.logs)
    assert isinstance(found, tuple)
    winner, loser = found
    wait_for(
        lambda: told(kube, namespace, f"{loser}-0", "1 of 3 pod(s) can be placed together"),
        timeout=60,
        what="the other group told it waits whole",
        explain=operator.logs,
    )
    waiting = pods_of(kube, namespace, loser)
    assert all(k.is_gated(p) for p in waiting)
    assert not any((c.get("status") or {}).get("allocation") for c in claims_of(kube, namespace, waiting))

    # The first group finishes: the second runs whole. The bound docs/pods.md states: its
    # backoff (at most 10 s) and one decision after the first group's devices are released
    # (their claims deallocated once their pods are gone), stretched for a busy machine.
    kube.kubectl(
        "delete", "pods", "-n", namespace, "-l", f"{POD_GROUP_LABEL}={winner}", "--force", "--grace-period=0"
    )
    running = wait_for(
        lambda: all_running(kube, namespace, loser, 3),
        timeout=30,
        what="the waiting group running once the first is gone",
        explain=operator.logs,
    )
    assert isinstance(running, list)


def test_a_group_claim_is_shared_by_300_pods(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    node = f"{namespace}-a"
    k.add_nodes(
        kube, [{**k.node(node), "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "400"}}}]
    )
    k.apply(kube, [k.device_class(namespace), k.template(namespace, "one"), k.node_slice(namespace, node, 1)])
    shared = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    k.apply(kube, [pod_group(namespace, "wide", 300, resourceClaims=shared)])
    k.create(kube, members(namespace, "wide", 300, shared))
    operator = start_operator(draco_process, namespace)

    running = wait_for(
        lambda: all_running(kube, namespace, "wide", 300),
        timeout=300,
        interval=2,
        what="all 300 members un-gated",
        explain=operator.logs,
    )
    assert isinstance(running, list)
    claims = k.items(kube, k.CLAIMS, namespace=namespace)
    assert len(claims) == 1, "one claim for the group, none per pod"
    claim = claims[0]
    group = k.get(kube, GROUPS, "wide", namespace=namespace)
    assert group is not None
    assert [o["kind"] for o in claim["metadata"]["ownerReferences"]] == ["PodGroup"]
    reserved = claim["status"]["reservedFor"]
    assert reserved == [
        {
            "apiGroup": "scheduling.draco.dev",
            "resource": "podgroups",
            "name": "wide",
            "uid": group["metadata"]["uid"],
        }
    ], "reserved for the group, beyond the 256 pods a claim may list"
    assert group["status"]["resourceClaimStatuses"] == [
        {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}
    ]
    assert {k.generated_claims(p)["gpu"] for p in running} == {claim["metadata"]["name"]}
    assert {k.pinned_node(p) for p in running} == {node}

    # Gone with its group: deallocated, then deleted.
    # 300 DELETEs, one by one: on a busy machine that takes longer than kubectl's usual minute.
    kube.kubectl(
        "delete",
        "pods",
        "-n",
        namespace,
        "--all",
        "--force",
        "--grace-period=0",
        "--wait=false",
        timeout=scaled(300),
    )
    kube.kubectl("delete", GROUPS, "wide", "-n", namespace)
    wait_for(
        lambda: not k.items(kube, k.CLAIMS, namespace=namespace),
        timeout=60,
        what="the group's claim deleted with the group",
        explain=operator.logs,
    )


def test_a_group_that_must_share_a_clique_lands_where_it_fits(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    driver = k.driver_of(namespace)
    layout = {"wide": [1, 1, 1, 1, 1], "tight": [2, 2]}  # wide has more free devices, but one per node
    nodes = []
    slices = []
    for clique, counts in layout.items():
        for i, count in enumerate(counts):
            name = f"{namespace}-{clique}-{i}"
            nodes.append(k.node(name))
            body = k.node_slice(namespace, name, count)
            for device in body["spec"]["devices"]:
                device["attributes"]["cliqueID"] = {"string": clique}
            slices.append(body)
    k.add_nodes(kube, nodes)
    k.apply(kube, [k.device_class(namespace), k.template(namespace, "two", count=2), *slices])
    constraints = {"deviceTopology": [{"matchAttribute": f"{driver}/cliqueID"}]}
    k.apply(kube, [pod_group(namespace, "ring", 2, schedulingConstraints=constraints)])
    k.create(kube, members(namespace, "ring", 2, [{"name": "gpus", "resourceClaimTemplateName": "two"}]))
    operator = start_operator(draco_process, namespace)

    running = wait_for(
        lambda: all_running(kube, namespace, "ring", 2),
        timeout=60,
        what="the group placed",
        explain=operator.logs,
    )
    assert isinstance(running, list)
    assert {k.pinned_node(p) for p in running} == {f"{namespace}-tight-0", f"{namespace}-tight-1"}
    pools = {pool for c in claims_of(kube, namespace, running) for _, pool, _ in k.allocated_devices(c)}
    assert all("-tight-" in pool for pool in pools)


def test_members_keep_their_placement_rules_and_other_conventions_name_groups(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    setup(kube, namespace, {"a": 3, "b": 3})
    apart = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {POD_GROUP_LABEL: "spread"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    }
    k.apply(kube, [pod_group(namespace, "spread", 3)])
    k.create(kube, members(namespace, "spread", 3, **apart))
    # Kueue's plain pod group: the label and the total count on each pod.
    kueue = []
    for i in range(2):
        pod = k.pod(namespace, f"queued-{i}", ONE_GPU, labels={"kueue.x-k8s.io/pod-group-name": "queued"})
        pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "2"
        kueue.append(pod)
    operator = start_operator(draco_process, namespace)
    wait_for(
        lambda: told(kube, namespace, "spread-0", "2 of 3 pod(s) can be placed together"),
        timeout=60,
        what="anti-affinity keeps the third member off both nodes",
        explain=operator.logs,
    )
    assert all(k.is_gated(p) for p in pods_of(kube, namespace, "spread"))
    k.add_nodes(kube, [k.node(f"{namespace}-c")])
    k.apply(kube, [k.node_slice(namespace, f"{namespace}-c", 1)])
    running = wait_for(
        lambda: all_running(kube, namespace, "spread", 3),
        timeout=60,
        what="spread group placed",
        explain=operator.logs,
    )
    assert isinstance(running, list)
    assert len({k.pinned_node(p) for p in running}) == 3, "every member on a node of its own"

    # The Kueue group: the cluster has 6 devices, 3 taken; it fits whole.
    k.create(kube, kueue)
    queued = wait_for(
        lambda: all_running(kube, namespace, "queued", 2),
        timeout=60,
        what="Kueue's group placed",
        explain=operator.logs,
    )
    assert isinstance(queued, list)
    placed = [json.loads(line) for line in operator.logs().splitlines() if '"Placed group"' in line]
    assert f"{namespace}/kueue:queued" in {p["group"] for p in placed}


def test_a_group_holding_devices_past_its_timeout_is_released_whole(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    nodes = [f"{namespace}-a", f"{namespace}-b"]
    k.add_nodes(kube, [k.node(n) for n in nodes])
    extra = {
        "bindsToNode": True,
        "bindingConditions": ["Prepared"],
        "bindingFailureConditions": ["PrepareFailed"],
    }
    k.apply(kube, [k.device_class(namespace), k.template(namespace, "one")])
    k.apply(kube, [k.node_slice(namespace, n, 1, device_extra=extra) for n in nodes])
    k.apply(kube, [pod_group(namespace, "slow", 2)])
    k.create(kube, members(namespace, "slow", 2))
    operator = start_operator(draco_process, namespace, extra=("--group-timeout", "5"))

    def allocations() -> dict[str, str] | None:
        claims = k.items(kube, k.CLAIMS, namespace=namespace)
        found = {
            c["metadata"]["name"]: c["status"]["allocation"].get("allocationTimestamp", "")
            for c in claims
            if (c.get("status") or {}).get("allocation")
        }
        return found if len(found) == 2 else None

    first = wait_for(allocations, timeout=60, what="the group's claims allocated", explain=operator.logs)
    assert isinstance(first, dict)
    # One device binds, the other never does: the members stay gated, and after the timeout the
    # group gives back both devices (a GroupReleased Event), then is placed again.
    report(kube, namespace, sorted(first)[0], "Prepared")
    wait_for(
        lambda: k.event_notes(kube, namespace, "slow-0", "GroupReleased"),
        timeout=60,
        what="the group released after its timeout",
        explain=operator.logs,
    )
    assert all(k.is_gated(p) for p in pods_of(kube, namespace, "slow"))
    assert '"Released group after its timeout"' in operator.logs()
    again = wait_for(
        lambda: (a := allocations()) and a != first and a,
        timeout=60,
        what="allocated again",
        explain=operator.logs,
    )
    assert isinstance(again, dict)
    for name in again:
        report(kube, namespace, name, "Prepared")
    running = wait_for(
        lambda: all_running(kube, namespace, "slow", 2),
        timeout=60,
        what="the group running",
        explain=operator.logs,
    )
    assert isinstance(running, list)
