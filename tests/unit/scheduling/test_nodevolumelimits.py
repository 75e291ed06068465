"""NodeVolumeLimits: the scenarios of upstream's csi_test.go (TestCSILimits,
TestVolumeLimitScalingGate), in the same world: for each driver four claims
``csi-<driver>-<n>`` bound to volumes of that driver (in-tree AWS EBS volumes for
``kubernetes.io/aws-ebs``, host paths for ``kubernetes.io/hostpath``), ``csi-4`` unbound
of class ``csi-sc`` (provisioned by the first driver), ``csi-5`` without class, ``csi-6``
bound to a missing volume."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from draco.scheduling import nodevolumelimits
from draco.scheduling.nodevolumelimits import REASON
from tests.unit.scheduling.rulekit import (
    claim_volume,
    cluster,
    csi_driver,
    csi_node,
    ephemeral_volume,
    keyed,
    node,
    placed,
    pod,
    pvc,
    run_filter,
    storage_class,
)

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"
EBS_IN_TREE = "kubernetes.io/aws-ebs"
HOST_PATH = "kubernetes.io/hostpath"
NODE = "node-for-max-pd-test-1"


def volumes_of(driver: str) -> list[dict[str, Any]]:
    volumes = []
    for n in range(4):
        name = f"csi-{driver}-{n}"
        if driver == EBS_IN_TREE:
            source: dict[str, Any] = {"awsElasticBlockStore": {"volumeID": name}}
        elif driver == HOST_PATH:
            source = {"hostPath": {"path": "/tmp"}}
        else:
            source = {"csi": {"driver": driver, "volumeHandle": name}}
        volumes.append({"metadata": {"name": name}, "spec": source})
    return volumes


def claims_of(drivers: Sequence[str]) -> list[dict[str, Any]]:
    claims = [pvc(f"csi-{d}-{n}", volume=f"csi-{d}-{n}") for d in drivers for n in range(4)]
    return [
        *claims,
        pvc("csi-4", class_name="csi-sc"),
        pvc("csi-5"),
        pvc("csi-6", class_name="csi-sc", volume="missing-in-action"),
    ]


def claims_pod(*claims: str, name: str = "pod") -> dict[str, Any]:
    return pod(name, volumes=[claim_volume(c, f"v{i}") for i, c in enumerate(claims)])


def ebs_inline(volume_id: str) -> dict[str, Any]:
    return pod(volumes=[{"name": "inline", "awsElasticBlockStore": {"volumeID": volume_id}}])


RUNNING = claims_pod(f"csi-{EBS}-3")
PENDING = claims_pod("csi-4")
PENDING_TOO = claims_pod("csi-4")
MISSING_PV = claims_pod("csi-6")
NO_CLASS = claims_pod("csi-5")
GCE_TWO = claims_pod(f"csi-{GCE}-1", f"csi-{GCE}-2")
IN_TREE_ONE = claims_pod(f"csi-{EBS_IN_TREE}-0")
IN_TREE_TWO = claims_pod(f"csi-{EBS_IN_TREE}-1", f"csi-{EBS_IN_TREE}-2")
EBS_ONE = claims_pod(f"csi-{EBS}-0")
EBS_TWO = claims_pod(f"csi-{EBS}-1", f"csi-{EBS}-2")
HOST_PATH_ONE = claims_pod(f"csi-{HOST_PATH}-0")
INLINE = ebs_inline("aws-inline1")
INLINE_SAME_ID = ebs_inline(f"csi-{EBS}-1")

EPHEMERAL = pod("abc", namespace="test", uid="12345", volumes=[ephemeral_volume("xyz")])
EPHEMERAL_TWO = pod(
    "abc", namespace="test", uid="12345II", volumes=[ephemeral_volume("x"), ephemeral_volume("y")]
)
EPHEMERAL_CLAIM = pvc("abc-xyz", namespace="test", class_name="csi-sc", owner="12345")
FOREIGN_CLAIM = pvc("abc-xyz", namespace="test", class_name="csi-sc")
EPHEMERAL_X = pvc("abc-x", namespace="test", class_name="csi-sc", owner="12345II")
EPHEMERAL_Y = pvc("abc-y", namespace="test", class_name="csi-sc", owner="12345II")


def world(
    drivers: Sequence[str],
    existing: Sequence[dict[str, Any]] = (),
    *,
    limit: int | None = None,
    limits: str = "csinode",
    attachments: int = 0,
    extra_claims: Sequence[dict[str, Any]] = (),
) -> Any:
    """``limits``: ``csinode`` (each driver with ``limit``), ``csinode-with-no-limit``, or
    ``none`` (no CSINode)."""
    csi_nodes = {}
    if limits != "none":
        counts = {d.replace(".", "_"): (limit if limits == "csinode" else None) for d in drivers}
        csi_nodes = keyed(csi_node(NODE, **counts))
    vas = [
        {
            "metadata": {"name": f"va-{d}-{n}"},
            "spec": {"nodeName": NODE, "attacher": d, "source": {"persistentVolumeName": f"csi-{d}-{n}"}},
        }
        for d in drivers
        for n in range(attachments)
    ]
    return cluster(
        [node(NODE)],
        [placed(body, NODE) for body in existing],
        claims=keyed(*claims_of(drivers), *extra_claims),
        volumes=keyed(*[v for d in drivers for v in volumes_of(d)]),
        storage_classes=keyed(storage_class("csi-sc", "WaitForFirstConsumer", provisioner=drivers[0])),
        csi_nodes=csi_nodes,
        attachments=vas,
    )


MIGRATED = [EBS_IN_TREE, EBS]
CASES = {
    "should count VolumeAttachments towards volume limit when no pods exist": (
        EBS_ONE,
        [],
        [EBS],
        dict(limit=2, attachments=2),
        REASON,
    ),
    "should schedule pod when VolumeAttachments count does not exceed limit": (
        EBS_ONE,
        [],
        [EBS],
        dict(limit=2, attachments=1),
        None,
    ),
    "fits when node volume limit >= new pods CSI volume": (
        EBS_ONE,
        [RUNNING, EBS_TWO],
        [EBS],
        dict(limit=4),
        None,
    ),
    "doesn't when node volume limit <= pods CSI volume": (
        EBS_ONE,
        [RUNNING, EBS_TWO],
        [EBS],
        dict(limit=2),
        REASON,
    ),
    "should when driver does not support volume limits": (
        EBS_ONE,
        [RUNNING, EBS_TWO],
        [EBS],
        dict(limit=2, limits="csinode-with-no-limit"),
        None,
    ),
    "count pending PVCs towards volume limit <= pods CSI volume": (
        EBS_ONE,
        [PENDING, EBS_TWO],
        [EBS],
        dict(limit=2),
        REASON,
    ),
    "count multiple pending pvcs towards volume limit >= pods CSI volume": (
        EBS_ONE,
        [PENDING, PENDING_TOO, EBS_TWO],
        [EBS],
        dict(limit=4),
        None,
    ),
    "should count PVCs with invalid PV name but valid SC": (
        EBS_ONE,
        [MISSING_PV, EBS_TWO],
        [EBS],
        dict(limit=2),
        REASON,
    ),
    "don't count pvcs with missing SC towards volume limit": (
        EBS_ONE,
        [RUNNING, NO_CLASS],
        [EBS],
        dict(limit=2),
        None,
    ),
    "count pvcs with the same type towards volume limit": (
        EBS_ONE,
        [GCE_TWO, EBS_TWO],
        [EBS, GCE],
        dict(limit=2),
        REASON,
    ),
    "don't count pvcs with different type towards volume limit": (
        GCE_TWO,
        [EBS_TWO, RUNNING],
        [EBS, GCE],
        dict(limit=2),
        None,
    ),
    "should count in-tree volumes if migration is enabled": (
        IN_TREE_ONE,
        [IN_TREE_TWO],
        MIGRATED,
        dict(limit=2),
        REASON,
    ),
    "nil csi node": (INLINE, [IN_TREE_TWO], MIGRATED, dict(limits="none"), None),
    "should count unbound in-tree volumes if migration is enabled": (
        PENDING,
        [IN_TREE_TWO],
        MIGRATED,
        dict(limit=2),
        REASON,
    ),
    "should not limit pod if volume used does not report limits": (
        IN_TREE_ONE,
        [IN_TREE_TWO],
        MIGRATED,
        dict(limit=2, limits="csinode-with-no-limit"),
        None,
    ),
    "should not count non-migratable in-tree volumes": (
        HOST_PATH_ONE,
        [EBS_TWO],
        [HOST_PATH, EBS],
        dict(limit=2),
        None,
    ),
    "should count in-tree inline volumes if migration is enabled": (
        INLINE,
        [IN_TREE_TWO],
        MIGRATED,
        dict(limit=2),
        REASON,
    ),
    "should count in-tree and csi volumes (when scheduling in-tree volumes)": (
        IN_TREE_ONE,
        [EBS_TWO],
        MIGRATED,
        dict(limit=2),
        REASON,
    ),
    "should count in-tree, inline and csi volumes (when scheduling in-tree volumes)": (
        INLINE,
        [EBS_TWO, IN_TREE_ONE],
        MIGRATED,
        dict(limit=3),
        REASON,
    ),
    "should not count an inline volume twice when a pod uses it as csi volume": (
        INLINE_SAME_ID,
        [EBS_TWO, IN_TREE_ONE],
        MIGRATED,
        dict(limit=3),
        None,
    ),
    "should count in-tree and csi volumes (when scheduling csi volumes)": (
        EBS_ONE,
        [IN_TREE_TWO],
        MIGRATED,
        dict(limit=2),
        REASON,
    ),
    "ephemeral volume missing": (
        EPHEMERAL,
        [],
        [EBS],
        dict(limits="csinode-with-no-limit"),
        'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found',
    ),
    "ephemeral volume not owned": (
        EPHEMERAL,
        [],
        [EBS],
        dict(limits="csinode-with-no-limit", extra_claims=[FOREIGN_CLAIM]),
        "PVC test/abc-xyz was not created for pod test/abc (pod is not owner)",
    ),
    "ephemeral volume unbound": (
        EPHEMERAL,
        [],
        [EBS],
        dict(limits="csinode-with-no-limit", extra_claims=[EPHEMERAL_CLAIM]),
        None,
    ),
    "ephemeral doesn't when node volume limit <= pods CSI volume": (
        EPHEMERAL,
        [RUNNING, EBS_TWO],
        [EBS],
        dict(limit=2, extra_claims=[EPHEMERAL_CLAIM]),
        REASON,
    ),
    "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume": (
        EBS_ONE,
        [RUNNING, EPHEMERAL_TWO],
        [EBS],
        dict(limit=2, extra_claims=[EPHEMERAL_X, EPHEMERAL_Y]),
        REASON,
    ),
    "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume": (
        EBS_ONE,
        [RUNNING, EPHEMERAL, EBS_TWO],
        [EBS],
        dict(limit=3, extra_claims=[EPHEMERAL_CLAIM]),
        REASON,
    ),
    "persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume": (
        EBS_ONE,
        [RUNNING, EPHEMERAL, EBS_TWO],
        [EBS],
        dict(limit=5, extra_claims=[EPHEMERAL_CLAIM]),
        None,
    ),
    "don't skip Filter when the pod has pvcs": (EBS_ONE, [], [EBS], dict(limit=2), None),
    "don't skip Filter when the pod has ephemeral volumes": (
        pod("abc", namespace="test", volumes=[{"name": "c", "configMap": {}}, ephemeral_volume("xyz")]),
        [],
        [EBS],
        dict(limits="csinode-with-no-limit"),
        'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found',
    ),
    "don't skip Filter when the pod has inline migratable volumes": (
        pod(
            volumes=[
                {"name": "c", "configMap": {}},
                {"name": "i", "awsElasticBlockStore": {"volumeID": "aws-inline1"}},
            ]
        ),
        [IN_TREE_TWO],
        MIGRATED,
        dict(limit=2),
        REASON,
    ),
}


@pytest.mark.parametrize(("body", "existing", "drivers", "setup", "reason"), CASES.values(), ids=CASES.keys())
def test_csi_limits(body: Any, existing: Any, drivers: Any, setup: Any, reason: str | None) -> None:
    snapshot = world(drivers, existing, **setup)
    assert run_filter(nodevolumelimits.volume_limits_filter, body, snapshot) == [reason]


def test_skip_filter_when_the_pod_only_uses_secrets_and_configmaps() -> None:
    body = pod(volumes=[{"name": "c", "configMap": {}}, {"name": "s", "secret": {}}])
    assert run_filter(nodevolumelimits.volume_limits_filter, body, world([EBS], limit=2)) is None


@pytest.mark.parametrize(
    ("installed", "prevent", "reason"),
    [
        (True, True, None),
        (False, True, f"{EBS} CSI driver is not installed on the node"),
        (False, False, None),
    ],
    ids=["driver installed", "driver missing and required", "driver missing, not required"],
)
def test_a_driver_that_must_be_installed(installed: bool, prevent: bool, reason: str | None) -> None:
    snapshot = world([EBS], limit=5)
    if not installed:
        snapshot.csi_nodes = keyed(csi_node(NODE, other_driver=5))
    snapshot.csi_drivers = keyed(csi_driver(EBS, prevent_if_missing=prevent))
    assert run_filter(nodevolumelimits.volume_limits_filter, EBS_ONE, snapshot) == [reason]
