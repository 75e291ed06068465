"""VolumeBinding: the scenarios of upstream's binder_test.go (TestFindPodVolumesWithout-
Provisioning, TestFindPodVolumesWithProvisioning, TestCapacity) and volume_binding_test.go
(TestVolumeBinding: PreFilter refusals, Filter reasons, the StorageCapacityScoring scores)."""

from __future__ import annotations

from typing import Any

import pytest

from draco.scheduling import framework, volumebinding
from draco.scheduling.volumebinding import (
    REASON_BIND_CONFLICT,
    REASON_NODE_CONFLICT,
    REASON_NOT_ENOUGH_SPACE,
    REASON_PV_NOT_EXIST,
    REASON_UNBOUND_IMMEDIATE,
    PodVolumeClaims,
    find_pod_volumes,
    pod_volume_claims,
)
from tests.unit.scheduling.rulekit import (
    claim_volume,
    cluster,
    container,
    csi_driver,
    ephemeral_volume,
    info,
    keyed,
    node,
    pod,
    pv,
    pvc,
    run_filter,
    run_score,
    storage_capacity,
    storage_class,
)

NS = "testns"
KEY = "nodeKey"
PROVISIONER = "test-provisioner"

WAIT = "waitClass"
IMMEDIATE = "immediateClass"
WAIT_PROVISIONED = "waitClassWithProvisioner"
TOPOLOGY_MISMATCH = "topoMismatchClass"
CLASSES = keyed(
    storage_class(WAIT, "WaitForFirstConsumer"),
    storage_class(IMMEDIATE, "Immediate"),
    storage_class(WAIT_PROVISIONED, "WaitForFirstConsumer", provisioner=PROVISIONER),
    storage_class(
        TOPOLOGY_MISMATCH, "WaitForFirstConsumer", provisioner=PROVISIONER, allowed={KEY: ["reference-value"]}
    ),
)


def claim(name: str, size: str, class_name: str, *, volume: str = "", bound: bool = True, **more: Any) -> Any:
    return pvc(name, namespace=NS, class_name=class_name, volume=volume, bound=bound, request=size, **more)


def volume(name: str, node_name: str, size: str, class_name: str, *, bound_to: Any = None) -> Any:
    return pv(
        name,
        class_name=class_name,
        capacity=size,
        affinity={KEY: [node_name]} if node_name else None,
        claim=None if bound_to is None else f"{NS}/{bound_to['metadata']['name']}",
    )


UNBOUND = claim("unbound-pvc", "1G", WAIT)
UNBOUND_2 = claim("unbound-pvc2", "5G", WAIT)
PREBOUND = claim("prebound-pvc", "1G", WAIT, volume="pv-node1a", bound=False)
BOUND = claim("bound-pvc", "1G", WAIT, volume="pv-bound")
IMMEDIATE_UNBOUND = claim("immediate-unbound-pvc", "1G", IMMEDIATE)
IMMEDIATE_BOUND = claim("immediate-bound-pvc", "1G", IMMEDIATE, volume="pv-bound-immediate")
PROVISIONED = claim("provisioned-pvc", "1Gi", WAIT_PROVISIONED)
SELECTED_NODE = claim("provisioned-pvc", "1Gi", WAIT_PROVISIONED, selected_node="node1")
NO_PROVISIONER = claim("no-provisioner-pvc", "1Gi", WAIT)
TOPOLOGY_MISMATCH_PVC = claim("topo-mismatch-pvc", "1Gi", TOPOLOGY_MISMATCH)

PV_NODE1A = volume("pv-node1a", "node1", "5G", WAIT)
PV_NODE1B = volume("pv-node1b", "node1", "10G", WAIT)
PV_NODE2 = volume("pv-node2", "node2", "1G", WAIT)
PV_BOUND = volume("pv-bound", "node1", "1G", WAIT, bound_to=BOUND)
PV_NODE1A_BOUND = volume("pv-node1a", "node1", "5G", WAIT, bound_to=UNBOUND)
PV_BOUND_IMMEDIATE = volume("pv-bound-immediate", "node1", "1G", IMMEDIATE, bound_to=IMMEDIATE_BOUND)
PV_BOUND_IMMEDIATE_NODE2 = volume("pv-bound-immediate", "node2", "1G", IMMEDIATE, bound_to=IMMEDIATE_BOUND)

NODE1 = node("node1", labels={KEY: "node1"})
NODE2 = node("node2", labels={KEY: "node2"})


def claims_pod(*claims: Any, uid: str = "pod-uid") -> dict[str, Any]:
    return pod(
        "test-pod",
        namespace=NS,
        uid=uid,
        containers=[container()],
        volumes=[claim_volume(c["metadata"]["name"]) for c in claims],
    )


def world(claims: Any = (), volumes: Any = (), **more: Any) -> Any:
    more.setdefault("storage_classes", CLASSES)
    return cluster([NODE1, NODE2], claims=keyed(*claims), volumes=keyed(*volumes), **more)


# Scenario: (pod's claims, the claims that exist, volumes, answer on node1).
SCENARIOS = {
    "bound-pvc": ([BOUND], [BOUND], [PV_BOUND], [None]),
    "bound-pvc,pv-not-exists": ([BOUND], [BOUND], [], [REASON_PV_NOT_EXIST]),
    "pvc-not-found": (
        [BOUND],
        [],
        [PV_BOUND],
        framework.Refusal('persistentvolumeclaim "bound-pvc" not found'),
    ),
    "prebound-pvc": ([PREBOUND], [PREBOUND], [PV_NODE1A_BOUND], framework.Refusal(REASON_UNBOUND_IMMEDIATE)),
    "unbound-pvc,pv-same-node": ([UNBOUND], [UNBOUND], [PV_NODE2, PV_NODE1A, PV_NODE1B], [None]),
    "unbound-pvc,pv-different-node": ([UNBOUND], [UNBOUND], [PV_NODE2], [REASON_BIND_CONFLICT]),
    "two-unbound-pvcs": ([UNBOUND, UNBOUND_2], [UNBOUND, UNBOUND_2], [PV_NODE1A, PV_NODE1B], [None]),
    "two-unbound-pvcs,partial-match": (
        [UNBOUND, UNBOUND_2],
        [UNBOUND, UNBOUND_2],
        [PV_NODE1A],
        [REASON_BIND_CONFLICT],
    ),
    "one-bound,one-unbound": ([UNBOUND, BOUND], [UNBOUND, BOUND], [PV_BOUND, PV_NODE1A], [None]),
    "one-bound,one-unbound,no-match": (
        [UNBOUND, BOUND],
        [UNBOUND, BOUND],
        [PV_BOUND, PV_NODE2],
        [REASON_BIND_CONFLICT],
    ),
    "one-prebound,one-unbound": (
        [UNBOUND, PREBOUND],
        [UNBOUND, PREBOUND],
        [PV_NODE1A, PV_NODE1B],
        framework.Refusal(REASON_UNBOUND_IMMEDIATE),
    ),
    "immediate-bound-pvc": ([IMMEDIATE_BOUND], [IMMEDIATE_BOUND], [PV_BOUND_IMMEDIATE], [None]),
    "immediate-bound-pvc-wrong-node": (
        [IMMEDIATE_BOUND],
        [IMMEDIATE_BOUND],
        [PV_BOUND_IMMEDIATE_NODE2],
        [REASON_NODE_CONFLICT],
    ),
    "immediate-unbound-pvc": (
        [IMMEDIATE_UNBOUND],
        [IMMEDIATE_UNBOUND],
        [],
        framework.Refusal(REASON_UNBOUND_IMMEDIATE),
    ),
    "immediate-unbound-pvc,delayed-mode-bound": (
        [IMMEDIATE_UNBOUND, BOUND],
        [IMMEDIATE_UNBOUND, BOUND],
        [PV_BOUND],
        framework.Refusal(REASON_UNBOUND_IMMEDIATE),
    ),
    "immediate-unbound-pvc,delayed-mode-unbound": (
        [IMMEDIATE_UNBOUND, UNBOUND],
        [IMMEDIATE_UNBOUND, UNBOUND],
        [],
        framework.Refusal(REASON_UNBOUND_IMMEDIATE),
    ),
    # TestFindPodVolumesWithProvisioning
    "one-provisioned": ([PROVISIONED], [PROVISIONED], [], [None]),
    "two-unbound-pvcs,one-matched,one-provisioned": (
        [UNBOUND, PROVISIONED],
        [UNBOUND, PROVISIONED],
        [PV_NODE1A],
        [None],
    ),
    "one-bound,one-provisioned": ([BOUND, PROVISIONED], [BOUND, PROVISIONED], [PV_BOUND], [None]),
    "one-binding,one-selected-node": ([BOUND, SELECTED_NODE], [BOUND, SELECTED_NODE], [PV_BOUND], [None]),
    "one-immediate-bound,one-provisioned": (
        [IMMEDIATE_BOUND, PROVISIONED],
        [IMMEDIATE_BOUND, PROVISIONED],
        [PV_BOUND_IMMEDIATE],
        [None],
    ),
    "invalid-provisioner": ([NO_PROVISIONER], [NO_PROVISIONER], [], [REASON_BIND_CONFLICT]),
    "volume-topology-unsatisfied": (
        [TOPOLOGY_MISMATCH_PVC],
        [TOPOLOGY_MISMATCH_PVC],
        [],
        [REASON_BIND_CONFLICT],
    ),
    # TestVolumeBinding
    "pv not found claim lost": (
        [claim("pvc-a", "1G", WAIT, volume="pv-a", phase="Lost")],
        [claim("pvc-a", "1G", WAIT, volume="pv-a", phase="Lost")],
        [],
        framework.Refusal('persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"'),
    ),
    "claim being deleted": (
        [UNBOUND],
        [{**UNBOUND, "metadata": {**UNBOUND["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}],
        [],
        framework.Refusal('persistentvolumeclaim "unbound-pvc" is being deleted'),
    ),
    "class without binding mode": (
        [claim("no-mode", "1G", "noModeClass")],
        [claim("no-mode", "1G", "noModeClass")],
        [],
        framework.Refusal('VolumeBindingMode not set for StorageClass "noModeClass"'),
    ),
}


@pytest.mark.parametrize(
    ("claims", "existing", "volumes", "answer"), SCENARIOS.values(), ids=SCENARIOS.keys()
)
def test_find_pod_volumes(claims: Any, existing: Any, volumes: Any, answer: Any) -> None:
    snapshot = world(
        existing, volumes, storage_classes={**CLASSES, **keyed(storage_class("noModeClass", None))}
    )
    assert run_filter(volumebinding.volume_binding_filter, claims_pod(*claims), snapshot, [NODE1]) == answer


def _prepared(body: dict[str, Any], snapshot: Any) -> PodVolumeClaims:
    claims = pod_volume_claims(info(body), snapshot)
    assert isinstance(claims, PodVolumeClaims)
    return claims


def _bindings(found: Any) -> list[tuple[str, str]]:
    return [(c["metadata"]["name"], v["metadata"]["name"]) for c, v in found.static]


@pytest.mark.parametrize(
    ("claims", "volumes", "bindings"),
    [
        ([UNBOUND], [PV_NODE2, PV_NODE1A, PV_NODE1B], [("unbound-pvc", "pv-node1a")]),
        (
            [UNBOUND, UNBOUND_2],
            [PV_NODE1A, PV_NODE1B],
            [("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")],
        ),
        (
            [UNBOUND_2, UNBOUND],
            [PV_NODE1A, PV_NODE1B],
            [("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")],
        ),
        ([UNBOUND, UNBOUND_2], [PV_NODE1A], [("unbound-pvc", "pv-node1a")]),
        ([UNBOUND], [PV_NODE1B, PV_NODE1A_BOUND], [("unbound-pvc", "pv-node1a")]),
    ],
    ids=["smallest that fits", "two claims", "ordered by size", "partial match", "pre-bound volume wins"],
)
def test_the_smallest_fitting_volume_is_chosen(claims: Any, volumes: Any, bindings: Any) -> None:
    snapshot = world(claims, volumes)
    assert _bindings(find_pod_volumes(_prepared(claims_pod(*claims), snapshot), NODE1, snapshot)) == bindings


def test_a_volume_must_match_the_claim() -> None:
    """Volume mode, access modes, selector, phase and another claim's claimRef all exclude."""
    wanted = claim(
        "c",
        "1G",
        WAIT,
        access=["ReadWriteOnce"],
        volumeMode="Block",
        selector={"matchLabels": {"tier": "fast"}},
    )
    right = {
        **volume("right", "node1", "5G", WAIT),
        "metadata": {"name": "right", "labels": {"tier": "fast"}},
    }
    right["spec"] = {**right["spec"], "volumeMode": "Block", "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}
    wrong = [
        {
            **right,
            "metadata": {"name": "filesystem", "labels": {"tier": "fast"}},
            "spec": {**right["spec"], "volumeMode": "Filesystem"},
        },
        {
            **right,
            "metadata": {"name": "rox", "labels": {"tier": "fast"}},
            "spec": {**right["spec"], "accessModes": ["ReadOnlyMany"]},
        },
        {**right, "metadata": {"name": "slow", "labels": {"tier": "slow"}}},
        {
            **right,
            "metadata": {"name": "released", "labels": {"tier": "fast"}},
            "status": {"phase": "Released"},
        },
        {
            **right,
            "metadata": {"name": "taken", "labels": {"tier": "fast"}},
            "spec": {**right["spec"], "claimRef": {"namespace": NS, "name": "other"}},
        },
        {
            **right,
            "metadata": {"name": "small", "labels": {"tier": "fast"}},
            "spec": {**right["spec"], "capacity": {"storage": "100M"}},
        },
    ]
    snapshot = world([wanted], wrong)
    assert find_pod_volumes(_prepared(claims_pod(wanted), snapshot), NODE1, snapshot).reasons == [
        REASON_BIND_CONFLICT
    ]
    snapshot = world([wanted], [*wrong, right])
    assert _bindings(find_pod_volumes(_prepared(claims_pod(wanted), snapshot), NODE1, snapshot)) == [
        ("c", "right")
    ]


def test_bound_and_unbound_unsatisfied_give_both_reasons() -> None:
    bound = claim("pvc-a", "1G", WAIT, volume="pv-a")
    unbound = claim("pvc-b", "1G", WAIT)
    volumes = [volume("pv-a", "node2", "1G", WAIT, bound_to=bound), volume("pv-b", "node2", "1G", WAIT)]
    snapshot = world([bound, unbound], volumes)
    found = find_pod_volumes(_prepared(claims_pod(bound, unbound), snapshot), NODE1, snapshot)
    assert found.reasons == [REASON_NODE_CONFLICT, REASON_BIND_CONFLICT]


def test_a_claim_given_a_node_fits_that_node_only() -> None:
    snapshot = world([BOUND, SELECTED_NODE], [PV_BOUND])
    assert run_filter(volumebinding.volume_binding_filter, claims_pod(SELECTED_NODE), snapshot) == [
        None,
        REASON_BIND_CONFLICT,
    ]


def test_generic_ephemeral_volumes() -> None:
    ephemeral = pod(
        "test-pod",
        namespace=NS,
        uid="pod-uid",
        containers=[container()],
        volumes=[ephemeral_volume("test-volume")],
    )
    owned = claim("test-pod-test-volume", "1G", WAIT, volume="pv-generic", owner="pod-uid")
    foreign = claim("test-pod-test-volume", "1G", WAIT, volume="pv-generic", owner="someone-else")
    generic = volume("pv-generic", "node1", "1G", WAIT, bound_to=owned)
    assert run_filter(
        volumebinding.volume_binding_filter, ephemeral, world([], [generic]), [NODE1]
    ) == framework.Refusal(
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "test-pod-test-volume"'
    )
    assert run_filter(
        volumebinding.volume_binding_filter, ephemeral, world([owned], [generic]), [NODE1, NODE2]
    ) == [
        None,
        REASON_NODE_CONFLICT,
    ]
    assert run_filter(
        volumebinding.volume_binding_filter, ephemeral, world([foreign], [generic]), [NODE1]
    ) == framework.Refusal(
        "PVC testns/test-pod-test-volume was not created for pod testns/test-pod (pod is not owner)"
    )


def test_pods_without_claims_are_not_checked() -> None:
    snapshot = world()
    assert run_filter(volumebinding.volume_binding_filter, pod(), snapshot) is None
    assert (
        run_filter(
            volumebinding.volume_binding_filter, pod(volumes=[{"name": "e", "emptyDir": {}}]), snapshot
        )
        is None
    )
    assert run_score(volumebinding.volume_binding_score, pod(), snapshot) is None


NODE1_CAPACITY = storage_capacity(WAIT_PROVISIONED, {KEY: "node1"}, "1Gi")
NODE2_CAPACITY = storage_capacity(WAIT_PROVISIONED, {KEY: "node2"}, "1Gi")
NETWORK_CAPACITY = storage_capacity(WAIT_PROVISIONED, {}, "1Gi")

CAPACITIES = {
    "network-attached": ([NETWORK_CAPACITY], None),
    "local-storage": ([NODE1_CAPACITY], None),
    "multiple": ([NETWORK_CAPACITY, NODE2_CAPACITY, NODE1_CAPACITY], None),
    "no-storage": ([], REASON_NOT_ENOUGH_SPACE),
    "wrong-node": ([NODE2_CAPACITY], REASON_NOT_ENOUGH_SPACE),
    "wrong-storage-class": ([storage_capacity(WAIT, {KEY: "node1"}, "1Gi")], REASON_NOT_ENOUGH_SPACE),
    "insufficient-storage": (
        [storage_capacity(WAIT_PROVISIONED, {KEY: "node1"}, "1Mi")],
        REASON_NOT_ENOUGH_SPACE,
    ),
    "insufficient-volume-size": (
        [storage_capacity(WAIT_PROVISIONED, {KEY: "node1"}, "1Gi", "1Mi")],
        REASON_NOT_ENOUGH_SPACE,
    ),
    "zero-storage": ([storage_capacity(WAIT_PROVISIONED, {KEY: "node1"}, "0Mi")], REASON_NOT_ENOUGH_SPACE),
    "zero-volume-size": (
        [storage_capacity(WAIT_PROVISIONED, {KEY: "node1"}, None, "0Mi")],
        REASON_NOT_ENOUGH_SPACE,
    ),
    "nil-storage": ([storage_capacity(WAIT_PROVISIONED, {KEY: "node1"}, None)], REASON_NOT_ENOUGH_SPACE),
}


@pytest.mark.parametrize(("capacities", "reason"), CAPACITIES.values(), ids=CAPACITIES.keys())
@pytest.mark.parametrize("opted_in", [True, False], ids=["driver opts in", "driver does not"])
def test_storage_capacity(capacities: Any, reason: str | None, opted_in: bool) -> None:
    snapshot = world(
        [PROVISIONED],
        csi_drivers=keyed(csi_driver(PROVISIONER, storage_capacity=opted_in)),
        storage_capacities=capacities,
    )
    expected = [reason if opted_in else None]
    assert (
        run_filter(volumebinding.volume_binding_filter, claims_pod(PROVISIONED), snapshot, [NODE1])
        == expected
    )


def test_a_claim_without_a_size_needs_no_capacity() -> None:
    sizeless = pvc("sizeless", namespace=NS, class_name=WAIT_PROVISIONED)
    snapshot = world([sizeless], csi_drivers=keyed(csi_driver(PROVISIONER, storage_capacity=True)))
    assert run_filter(volumebinding.volume_binding_filter, claims_pod(sizeless), snapshot, [NODE1]) == [None]


# --- score (StorageCapacityScoring, on by default in 1.37) -------------------------------

HOSTNAME = "kubernetes.io/hostname"
WAIT_HDD = "waitHDDClass"
SCORE_CLASSES = {**CLASSES, **keyed(storage_class(WAIT_HDD, "WaitForFirstConsumer"))}
SCORE_NODES = [node(n, labels={HOSTNAME: n, KEY: n}) for n in ("node-a", "node-b", "node-c")]


def local(name: str, host: str, size: str, class_name: str = WAIT) -> Any:
    return pv(name, class_name=class_name, capacity=size, hosts=[host])


def scores(claims: Any, volumes: Any = (), **more: Any) -> Any:
    snapshot = cluster(
        SCORE_NODES, claims=keyed(*claims), volumes=keyed(*volumes), storage_classes=SCORE_CLASSES, **more
    )
    body = claims_pod(*claims)
    filtered = run_filter(volumebinding.volume_binding_filter, body, snapshot)
    return filtered, run_score(volumebinding.volume_binding_score, body, snapshot)


def test_score_local_volumes_with_free_capacity_first() -> None:
    volumes = [
        local("pv-a-0", "node-a", "200Gi"),
        local("pv-a-1", "node-a", "200Gi"),
        local("pv-b-0", "node-b", "100Gi"),
        local("pv-b-1", "node-b", "100Gi"),
    ]
    filtered, scored = scores([claim("pvc-a", "50Gi", WAIT)], volumes)
    assert filtered == [None, None, REASON_BIND_CONFLICT]
    assert scored == [75, 50, 0]


def test_score_averages_over_storage_classes() -> None:
    volumes = [
        local("pv-a-0", "node-a", "200Gi"),
        local("pv-a-1", "node-a", "200Gi"),
        local("pv-a-2", "node-a", "200Gi", WAIT_HDD),
        local("pv-a-3", "node-a", "200Gi", WAIT_HDD),
        local("pv-b-0", "node-b", "100Gi"),
        local("pv-b-1", "node-b", "100Gi"),
        local("pv-b-2", "node-b", "100Gi", WAIT_HDD),
        local("pv-b-3", "node-b", "100Gi", WAIT_HDD),
    ]
    filtered, scored = scores([claim("pvc-0", "50Gi", WAIT), claim("pvc-1", "100Gi", WAIT_HDD)], volumes)
    assert filtered == [None, None, REASON_BIND_CONFLICT]
    assert scored == [63, 25, 0]


def test_score_by_storage_capacity() -> None:
    capacities = [
        storage_capacity(WAIT_PROVISIONED, {KEY: "node-a"}, "100Gi"),
        storage_capacity(WAIT_PROVISIONED, {KEY: "node-b"}, "50Gi"),
        storage_capacity(WAIT_PROVISIONED, {KEY: "node-c"}, "10Gi"),
    ]
    driver = keyed(csi_driver(PROVISIONER, storage_capacity=True))
    filtered, scored = scores(
        [claim("pvc-dynamic", "10Gi", WAIT_PROVISIONED)], csi_drivers=driver, storage_capacities=capacities
    )
    assert filtered == [None, None, None]
    assert scored == [90, 80, 0]
    # Static bindings take precedence over the provisions' capacity.
    static = [local(f"pv-static-{n[-1]}", n, "100Gi") for n in ("node-a", "node-b", "node-c")]
    claims = [claim("pvc-dynamic", "10Gi", WAIT_PROVISIONED), claim("pvc-static", "50Gi", WAIT)]
    filtered, scored = scores(claims, static, csi_drivers=driver, storage_capacities=capacities)
    assert filtered == [None, None, None]
    assert scored == [50, 50, 50]
    # Two claims of one class provisioned on the same capacity.
    claims = [
        claim("pvc-dynamic-0", "50Gi", WAIT_PROVISIONED),
        claim("pvc-dynamic-1", "50Gi", WAIT_PROVISIONED),
    ]
    filtered, scored = scores(claims, csi_drivers=driver, storage_capacities=capacities[:1])
    assert filtered == [None, REASON_NOT_ENOUGH_SPACE, REASON_NOT_ENOUGH_SPACE]
    assert scored == [0, 0, 0]


def test_bound_claims_score_every_node_alike() -> None:
    bound = claim("pvc-a", "1G", WAIT, volume="pv-a")
    _, scored = scores([bound], [local("pv-a", "node-a", "1G")])
    assert scored is None
