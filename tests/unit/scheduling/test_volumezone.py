"""VolumeZone: the scenarios of upstream's volume_zone_test.go (TestSingleZone,
TestMultiZone, TestWithBinding)."""

from __future__ import annotations

from typing import Any

import pytest

from draco.scheduling import framework, volumezone
from draco.scheduling.volumezone import REASON
from tests.unit.scheduling.rulekit import (
    claim_volume,
    cluster,
    container,
    ephemeral_volume,
    keyed,
    node,
    pod,
    pv,
    pvc,
    run_filter,
    storage_class,
)

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"

VOLUMES = [
    pv("Vol_1", labels={BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", labels={BETA_REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_Stable_1", labels={ZONE: "us-west1-a"}),
    pv("Vol_Stable_2", labels={REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_Stable_3", labels={ZONE: "us-west1-a", REGION: "us-west1-a"}),
    pv("Vol_Multi", labels={BETA_ZONE: "us-west1-c__us-west1-a"}),
    pv("Vol_Stable_Multi", labels={ZONE: "us-west1-c__us-west1-a"}),
    pv("Vol_Bad_Label", labels={ZONE: "us-west1-c__"}),
    pv("Vol_Plain"),
]
CLAIMS = [
    pvc("PVC_1", volume="Vol_1"),
    pvc("PVC_2", volume="Vol_2"),
    pvc("PVC_4", volume="Vol_not_exist"),
    pvc("PVC_Stable_1", volume="Vol_Stable_1"),
    pvc("PVC_Stable_2", volume="Vol_Stable_2"),
    pvc("PVC_Stable_3", volume="Vol_Stable_3"),
    pvc("PVC_Multi", volume="Vol_Multi"),
    pvc("PVC_Stable_Multi", volume="Vol_Stable_Multi"),
    pvc("PVC_Bad_Label", volume="Vol_Bad_Label"),
    pvc("PVC_Plain", volume="Vol_Plain"),
    pvc("PVC_NoSC", class_name="Class_0"),
    pvc("PVC_EmptySC"),
    pvc("PVC_WaitSC", class_name="Class_Wait"),
    pvc("PVC_ImmediateSC", class_name="Class_Immediate"),
    pvc("PVC_NoModeSC", class_name="Class_NoMode"),
]
CLASSES = [
    storage_class("Class_Wait", "WaitForFirstConsumer"),
    storage_class("Class_Immediate", "Immediate"),
    storage_class("Class_NoMode", None),
]


def claim_pod(*claims: str) -> dict[str, Any]:
    return pod("pod_1", containers=[container()], volumes=[claim_volume(c) for c in claims])


def state(*nodes: Any) -> Any:
    return cluster(nodes, claims=keyed(*CLAIMS), volumes=keyed(*VOLUMES), storage_classes=keyed(*CLASSES))


ZONES = [
    ("node without labels", "PVC_1", {}, None),
    ("beta zone label matched", "PVC_1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, None),
    ("beta region label matched", "PVC_2", {BETA_REGION: "us-west1", "uselessLabel": "none"}, None),
    ("beta region label doesn't match", "PVC_2", {BETA_REGION: "no_us-west1"}, REASON),
    ("beta zone label doesn't match", "PVC_1", {BETA_ZONE: "no_us-west1-a"}, REASON),
    ("zone label matched", "PVC_Stable_1", {ZONE: "us-west1-a", "uselessLabel": "none"}, None),
    ("region label matched", "PVC_Stable_2", {REGION: "us-west1"}, None),
    ("region label doesn't match", "PVC_Stable_2", {REGION: "no_us-west1"}, REASON),
    ("zone label doesn't match", "PVC_Stable_1", {ZONE: "no_us-west1-a"}, REASON),
    ("pv with zone and region, node with only zone", "PVC_Stable_3", {ZONE: "us-west1-a"}, REASON),
    ("pv with zone, node with beta zone", "PVC_Stable_1", {BETA_ZONE: "us-west1-a"}, REASON),
    ("pv with beta label, node with ga label, matched", "PVC_1", {ZONE: "us-west1-a"}, None),
    ("pv with beta label, node with ga label, don't match", "PVC_1", {ZONE: "us-west1-b"}, REASON),
    # TestMultiZone
    ("multi-zone beta label matched", "PVC_Multi", {BETA_ZONE: "us-west1-a"}, None),
    ("multi-zone label matched", "PVC_Stable_Multi", {ZONE: "us-west1-a"}, None),
    ("multi-zone label doesn't match", "PVC_Stable_Multi", {ZONE: "us-west1-b"}, REASON),
    # A label with an empty zone in its list is ignored, as upstream does.
    ("a malformed zone list is ignored", "PVC_Bad_Label", {ZONE: "us-west1-b"}, "skip"),
    ("a volume without zone labels", "PVC_Plain", {ZONE: "us-west1-b"}, "skip"),
    # TestWithBinding
    ("unbound volume wait binding mode", "PVC_WaitSC", {BETA_ZONE: "us-west1-a"}, "skip"),
]


@pytest.mark.parametrize(("claim", "labels", "expected"), [c[1:] for c in ZONES], ids=[c[0] for c in ZONES])
def test_volume_zones(claim: str, labels: dict[str, str], expected: str | None) -> None:
    answer = run_filter(volumezone.volume_zone_filter, claim_pod(claim), state(node("host1", labels=labels)))
    assert answer == (None if expected == "skip" else [expected])


REFUSALS = [
    (
        "unbound volume empty storage class",
        "PVC_EmptySC",
        "PersistentVolumeClaim had no pv name and storageClass name",
    ),
    ("unbound volume no storage class", "PVC_NoSC", 'storageclass.storage.k8s.io "Class_0" not found'),
    ("unbound volume immediate binding mode", "PVC_ImmediateSC", "PersistentVolume had no name"),
    (
        "a class without binding mode",
        "PVC_NoModeSC",
        'VolumeBindingMode not set for StorageClass "Class_NoMode"',
    ),
    ("claim not found", "PVC_Missing", 'persistentvolumeclaim "PVC_Missing" not found'),
    ("volume not found", "PVC_4", 'persistentvolume "Vol_not_exist" not found'),
    ("claim without a name", "", "PersistentVolumeClaim had no name"),
]


@pytest.mark.parametrize(("claim", "reason"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS])
def test_volume_zone_refuses_what_it_cannot_read(claim: str, reason: str) -> None:
    snapshot = state(node("host1", labels={BETA_ZONE: "us-west1-a", "uselessLabel": "none"}))
    assert run_filter(volumezone.volume_zone_filter, claim_pod(claim), snapshot) == framework.Refusal(reason)


def test_pods_without_claims_are_not_checked() -> None:
    snapshot = state(node("host1", labels={BETA_ZONE: "us-west1-a"}))
    assert run_filter(volumezone.volume_zone_filter, pod("pod_1"), snapshot) is None
    generic = pod("pod_1", volumes=[ephemeral_volume("scratch")])
    assert run_filter(volumezone.volume_zone_filter, generic, snapshot) is None
