"""VolumeRestrictions: the scenarios of upstream's volume_restrictions_test.go (the GCE PD,
AWS EBS, RBD and iSCSI disk conflicts; TestAccessModeConflicts)."""

from __future__ import annotations

from typing import Any

import pytest

from draco.scheduling import framework, volumerestrictions
from draco.scheduling.volumerestrictions import REASON_DISK_CONFLICT, REASON_READ_WRITE_ONCE_POD
from tests.unit.scheduling.rulekit import (
    claim_volume,
    cluster,
    container,
    keyed,
    node,
    placed,
    pod,
    pvc,
    run_filter,
)


def with_volumes(*volumes: dict[str, Any], name: str = "pod") -> dict[str, Any]:
    return pod(
        name, containers=[container()], volumes=[{"name": f"v{i}", **v} for i, v in enumerate(volumes)]
    )


GCE = {"gcePersistentDisk": {"pdName": "foo"}}
GCE_OTHER = {"gcePersistentDisk": {"pdName": "bar"}}
GCE_READ_ONLY = {"gcePersistentDisk": {"pdName": "foo", "readOnly": True}}
EBS = {"awsElasticBlockStore": {"volumeID": "foo"}}
EBS_OTHER = {"awsElasticBlockStore": {"volumeID": "bar"}}
EBS_READ_ONLY = {"awsElasticBlockStore": {"volumeID": "foo", "readOnly": True}}
RBD = {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar"}}
RBD_OTHER = {"rbd": {"monitors": ["c", "d"], "pool": "foo", "image": "bar"}}
RBD_SHARED_MONITOR = {"rbd": {"monitors": ["b", "c"], "pool": "foo", "image": "bar"}}
RBD_READ_ONLY = {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar", "readOnly": True}}
ISCSI = {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2016-12.server:storage.target01", "lun": 0}}
ISCSI_OTHER = {
    "iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2017-12.server:storage.target01", "lun": 0}
}
ISCSI_READ_ONLY = {"iscsi": {**ISCSI["iscsi"], "readOnly": True}}

DISKS = [
    (kind, same, other, read_only)
    for kind, same, other, read_only in [
        ("GCE PD", GCE, GCE_OTHER, GCE_READ_ONLY),
        ("RBD", RBD, RBD_OTHER, RBD_READ_ONLY),
        ("iSCSI", ISCSI, ISCSI_OTHER, ISCSI_READ_ONLY),
    ]
]


@pytest.mark.parametrize(("same", "other", "read_only"), [d[1:] for d in DISKS], ids=[d[0] for d in DISKS])
def test_shared_disks_conflict_unless_both_are_read_only(same: Any, other: Any, read_only: Any) -> None:
    nodes = [node("nothing"), node("one"), node("different"), node("read-only")]
    existing = [
        placed(with_volumes(same), "one"),
        placed(with_volumes(other), "different"),
        placed(with_volumes(read_only), "read-only"),
    ]
    snapshot = cluster(nodes, existing)
    assert run_filter(volumerestrictions.volume_restrictions_filter, with_volumes(same), snapshot) == [
        None,
        REASON_DISK_CONFLICT,
        None,
        REASON_DISK_CONFLICT,
    ]
    assert run_filter(volumerestrictions.volume_restrictions_filter, with_volumes(read_only), snapshot) == [
        None,
        REASON_DISK_CONFLICT,
        None,
        None,
    ]


def test_an_ebs_volume_conflicts_even_read_only() -> None:
    snapshot = cluster(
        [node("nothing"), node("one"), node("different")],
        [placed(with_volumes(EBS_READ_ONLY), "one"), placed(with_volumes(EBS_OTHER), "different")],
    )
    assert run_filter(
        volumerestrictions.volume_restrictions_filter, with_volumes(EBS_READ_ONLY), snapshot
    ) == [
        None,
        REASON_DISK_CONFLICT,
        None,
    ]
    assert run_filter(volumerestrictions.volume_restrictions_filter, with_volumes(EBS), snapshot) == [
        None,
        REASON_DISK_CONFLICT,
        None,
    ]


def test_rbd_images_conflict_when_a_monitor_is_shared() -> None:
    snapshot = cluster([node("n")], [placed(with_volumes(RBD_SHARED_MONITOR), "n")])
    assert run_filter(volumerestrictions.volume_restrictions_filter, with_volumes(RBD), snapshot) == [
        REASON_DISK_CONFLICT
    ]


def test_a_pod_without_restricted_volumes_is_not_checked() -> None:
    snapshot = cluster([node("n")], [placed(with_volumes(GCE), "n")])
    assert (
        run_filter(volumerestrictions.volume_restrictions_filter, with_volumes({"emptyDir": {}}), snapshot)
        is None
    )
    assert run_filter(volumerestrictions.volume_restrictions_filter, pod(), snapshot) is None


RWOP_1 = pvc("claim-with-rwop-1", access=["ReadWriteOncePod"])
RWOP_2 = pvc("claim-with-rwop-2", access=["ReadWriteOncePod"])
RWX = pvc("claim-with-rwx", access=["ReadWriteMany"])


def claims_pod(*claims: str, name: str = "pod") -> dict[str, Any]:
    return pod(name, containers=[container()], volumes=[claim_volume(c) for c in claims])


def test_a_missing_claim_refuses_the_pod() -> None:
    snapshot = cluster([node("n")])
    assert run_filter(
        volumerestrictions.volume_restrictions_filter, claims_pod("claim-with-rwop-1"), snapshot
    ) == (framework.Refusal('persistentvolumeclaim "claim-with-rwop-1" not found'))


def test_read_write_once_pod_without_conflict_is_not_checked() -> None:
    snapshot = cluster(
        [node("n")], [placed(claims_pod("claim-with-rwx", name="other"), "n")], claims=keyed(RWOP_1, RWX)
    )
    assert (
        run_filter(volumerestrictions.volume_restrictions_filter, claims_pod("claim-with-rwop-1"), snapshot)
        is None
    )


@pytest.mark.parametrize(
    ("existing", "body"),
    [
        (claims_pod("claim-with-rwop-1", name="other"), claims_pod("claim-with-rwop-1", "claim-with-rwx")),
        (
            claims_pod("claim-with-rwop-1", "claim-with-rwop-2", name="other"),
            claims_pod("claim-with-rwop-1", "claim-with-rwop-2"),
        ),
    ],
    ids=["access mode conflict", "two conflicts"],
)
def test_a_read_write_once_pod_claim_in_use_refuses_every_node(existing: Any, body: Any) -> None:
    snapshot = cluster(
        [node("n"), node("elsewhere")],
        [placed(existing, "n"), placed(claims_pod("claim-with-rwx", name="rwx"), "n")],
        claims=keyed(RWOP_1, RWOP_2, RWX),
    )
    assert run_filter(volumerestrictions.volume_restrictions_filter, body, snapshot) == [
        REASON_READ_WRITE_ONCE_POD,
        REASON_READ_WRITE_ONCE_POD,
    ]


def test_a_read_write_once_pod_claim_in_another_namespace_is_another_claim() -> None:
    other = pvc("claim-with-rwop-1", namespace="other", access=["ReadWriteOncePod"])
    snapshot = cluster(
        [node("n")],
        [placed(pod("x", namespace="other", volumes=[claim_volume("claim-with-rwop-1")]), "n")],
        claims=keyed(RWOP_1, other),
    )
    assert (
        run_filter(volumerestrictions.volume_restrictions_filter, claims_pod("claim-with-rwop-1"), snapshot)
        is None
    )
