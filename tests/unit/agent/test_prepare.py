"""Prepare/unprepare on disk: CDI specs, metadata files, checkpoint, idempotency, repair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draco.agent.checkpoint import PREPARE_COMPLETED, PREPARE_STARTED, Checkpoint, ClaimRecord
from draco.agent.drivers.fake import FakeDriver, parse_fake_config
from draco.agent.metadata import first_known
from draco.agent.prepare import NodePreparer
from draco.errors import AgentError
from tests.unit.agent.support import FAKE_YAML, claim, result, validate_cdi, validate_metadata

UID = "0b0c5d3e-1111-4222-8333-444455556666"


def preparer(tmp_path: Path, text: str = FAKE_YAML) -> NodePreparer:
    drivers = {d.name: d for d in (FakeDriver(s) for s in parse_fake_config(text).drivers)}
    return NodePreparer(
        node="node-a", cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", drivers=drivers
    )


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_prepare_writes_a_cdi_spec_per_driver_and_metadata_per_request(tmp_path: Path) -> None:
    p = preparer(tmp_path)
    obj = claim(
        result("gpu-0"),
        result("gpu-1"),
        result("nic-0", request="net/fast", driver="nic.draco.dev"),
        result("gpu-9", pool="other-node"),
    )
    outcome = p.prepare(obj)
    assert outcome.ok and outcome.wrote
    assert [d.result["device"] for d in outcome.devices] == ["gpu-0", "gpu-1", "nic-0"]
    assert files_under(tmp_path / "cdi") == [
        f"draco-gpu.draco.dev-{UID}.json",
        f"draco-nic.draco.dev-{UID}.json",
    ]
    spec = json.loads((tmp_path / "cdi" / f"draco-gpu.draco.dev-{UID}.json").read_text())
    validate_cdi(spec)
    assert spec["kind"] == "gpu.draco.dev/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == [f"{UID}-gpu-0", f"{UID}-gpu-1", f"{UID}-metadata-gpu"]
    assert spec["devices"][0]["containerEdits"]["env"] == ["DRACO_FAKE_DEVICE_GPU_0=gpu-0"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/null"}]
    (mount,) = spec["devices"][2]["containerEdits"]["mounts"]
    assert mount["containerPath"] == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/claim-1/gpu/gpu.draco.dev-metadata.json"
    )
    assert mount["options"] == ["ro", "bind"]
    host = Path(mount["hostPath"])
    assert host == tmp_path / "state/dra-device-metadata/gpu.draco.dev/ns_claim-1/gpu/metadata.json"
    body = first_known(host.read_text())
    validate_metadata(body)
    assert body["metadata"] == {"name": "claim-1", "namespace": "ns", "uid": UID, "generation": 1}
    assert body["requests"][0]["name"] == "gpu"
    assert [d["name"] for d in body["requests"][0]["devices"]] == ["gpu-0", "gpu-1"]
    assert body["requests"][0]["devices"][1]["attributes"]["index"] == {"int": 1}
    assert oct(host.stat().st_mode & 0o777) == "0o644"
    nic_spec = json.loads((tmp_path / "cdi" / f"draco-nic.draco.dev-{UID}.json").read_text())
    validate_cdi(nic_spec)
    nic_mount = nic_spec["devices"][1]["containerEdits"]["mounts"][0]
    assert nic_mount["containerPath"].endswith("/resourceclaims/claim-1/net/nic.draco.dev-metadata.json")
    nic_body = first_known(Path(nic_mount["hostPath"]).read_text())
    assert nic_body["requests"][0]["name"] == "net/fast"
    assert outcome.devices[0].cdi_device_ids == (
        f"gpu.draco.dev/gpu={UID}-gpu-0",
        f"gpu.draco.dev/gpu={UID}-metadata-gpu",
    )
    record = Checkpoint(tmp_path / "state").load().get(UID)
    assert record is not None and record.state == PREPARE_COMPLETED


def test_template_claims_use_the_pod_claim_name_in_the_container_path(tmp_path: Path) -> None:
    p = preparer(tmp_path)
    p.prepare(claim(result("gpu-0"), name="pod-gpu-x1y2z", pod_claim_name="gpu"))
    spec = json.loads((tmp_path / "cdi" / f"draco-gpu.draco.dev-{UID}.json").read_text())
    mount = spec["devices"][1]["containerEdits"]["mounts"][0]
    assert "/resourceclaimtemplates/gpu/gpu/gpu.draco.dev-metadata.json" in mount["containerPath"]
    assert first_known(Path(mount["hostPath"]).read_text())["podClaimName"] == "gpu"


def test_prepare_twice_writes_nothing_the_second_time(tmp_path: Path) -> None:
    p = preparer(tmp_path)
    obj = claim(result("gpu-0"))
    p.prepare(obj)
    spec = tmp_path / "cdi" / f"draco-gpu.draco.dev-{UID}.json"
    stamp = spec.stat().st_mtime_ns
    again = p.prepare(obj)
    assert again.ok and not again.wrote
    assert spec.stat().st_mtime_ns == stamp
    # A restarted agent (a new preparer on the same folders) agrees.
    restarted = preparer(tmp_path)
    assert restarted.prepared_uids() == {UID}
    assert not restarted.prepare(obj).wrote


def test_lost_files_are_written_again_with_a_new_metadata_generation(tmp_path: Path) -> None:
    p = preparer(tmp_path)
    obj = claim(result("gpu-0"))
    p.prepare(obj)
    for path in (tmp_path / "cdi").iterdir():
        path.unlink()  # a reboot emptied /var/run/cdi
    repaired = preparer(tmp_path).prepare(obj)
    assert repaired.ok and repaired.wrote
    assert (tmp_path / "cdi" / f"draco-gpu.draco.dev-{UID}.json").exists()
    meta = tmp_path / "state/dra-device-metadata/gpu.draco.dev/ns_claim-1/gpu/metadata.json"
    assert first_known(meta.read_text())["metadata"]["generation"] == 2


def test_unprepare_removes_every_file_and_the_record(tmp_path: Path) -> None:
    p = preparer(tmp_path)
    p.prepare(claim(result("gpu-0"), result("nic-0", request="net", driver="nic.draco.dev")))
    assert p.unprepare(UID)
    assert files_under(tmp_path / "cdi") == []
    assert files_under(tmp_path / "state") == []
    assert not (tmp_path / "state/dra-device-metadata/gpu.draco.dev/ns_claim-1").exists()
    assert Checkpoint(tmp_path / "state").load().claims == {}
    assert not p.unprepare(UID)


def test_a_failing_device_fails_the_claim_and_leaves_nothing_behind(tmp_path: Path) -> None:
    text = FAKE_YAML.replace(
        "    env: {NIC_MODE: fast}", "    env: {NIC_MODE: fast}\n    failPrepare: link down"
    )
    p = preparer(tmp_path, text)
    outcome = p.prepare(claim(result("gpu-0"), result("nic-0", request="net", driver="nic.draco.dev")))
    assert not outcome.ok
    assert {d.error for d in outcome.devices} == {"device nic-0: link down"}
    assert files_under(tmp_path / "cdi") == []
    assert p.prepared_uids() == set()


def test_a_device_that_is_not_published_fails_with_its_name(tmp_path: Path) -> None:
    outcome = preparer(tmp_path).prepare(claim(result("gpu-77")))
    assert not outcome.ok
    assert "gpu-77" in (outcome.devices[0].error or "") and "node-a" in (outcome.devices[0].error or "")


def test_a_crash_half_way_is_cleaned_up(tmp_path: Path) -> None:
    p = preparer(tmp_path)
    obj = claim(result("gpu-0"))
    p.prepare(obj)
    record = p.checkpoint.get(UID)
    assert record is not None
    # Simulate a crash after the record said "started" and one file was written.
    record.state = PREPARE_STARTED
    p.checkpoint.put(record)
    restarted = preparer(tmp_path)
    assert restarted.unprepare(UID)
    assert files_under(tmp_path / "cdi") == []


def test_checkpoint_keeps_one_file_per_claim_and_rejects_garbage(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.put(ClaimRecord(uid="u1", namespace="n", name="c1", state=PREPARE_STARTED))
    cp.put(ClaimRecord(uid="u2", namespace="n", name="c2", state=PREPARE_COMPLETED))
    before = (tmp_path / "checkpoint/u2.json").stat().st_mtime_ns
    cp.put(ClaimRecord(uid="u1", namespace="n", name="c1", state=PREPARE_COMPLETED))
    # A change of one claim rewrites that claim's record only (no temporary files left).
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == ["u1.json", "u2.json"]
    assert (tmp_path / "checkpoint/u2.json").stat().st_mtime_ns == before
    loaded = Checkpoint(tmp_path).load()
    assert {uid: r.state for uid, r in loaded.claims.items()} == {
        "u1": PREPARE_COMPLETED,
        "u2": PREPARE_COMPLETED,
    }
    loaded.remove("u1")
    assert [p.name for p in (tmp_path / "checkpoint").iterdir()] == ["u2.json"]
    (tmp_path / "checkpoint/u2.json").write_text("{half")
    with pytest.raises(AgentError, match="unreadable"):
        Checkpoint(tmp_path).load()


def test_the_single_file_checkpoint_of_older_agents_is_migrated_once(tmp_path: Path) -> None:
    legacy = {
        "version": 1,
        "claims": {
            uid: ClaimRecord(uid=uid, namespace="n", name=f"c-{uid}", state=PREPARE_COMPLETED).to_json()
            for uid in ("a", "b")
        },
    }
    (tmp_path / "checkpoint.json").write_text(json.dumps(legacy))
    cp = Checkpoint(tmp_path).load()
    assert sorted(cp.uids()) == ["a", "b"]
    assert not (tmp_path / "checkpoint.json").exists()
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == ["a.json", "b.json"]
    assert Checkpoint(tmp_path).load().get("b") == cp.get("b")


def test_a_claim_record_written_after_a_crashed_migration_wins(tmp_path: Path) -> None:
    """A crash after the records were written but before the old file was removed: the
    per-claim record is the newer truth."""
    old = ClaimRecord(uid="a", namespace="n", name="c", state=PREPARE_STARTED)
    (tmp_path / "checkpoint.json").write_text(json.dumps({"version": 1, "claims": {"a": old.to_json()}}))
    Checkpoint(tmp_path).put(ClaimRecord(uid="a", namespace="n", name="c", state=PREPARE_COMPLETED))
    record = Checkpoint(tmp_path).load().get("a")
    assert record is not None and record.state == PREPARE_COMPLETED
    assert not (tmp_path / "checkpoint.json").exists()


def test_metadata_is_written_as_v1beta1_beside_v1alpha1(tmp_path: Path) -> None:
    """kubernetes/kubernetes#138994 ("KEP-5304: DRA device metadata: add v1beta1 API"): the
    file holds the same object as v1beta1 and as v1alpha1, newest first, so a consumer
    built for either version reads it (the first object of a version it knows)."""
    assert preparer(tmp_path).prepare(claim(result("gpu-0"))).ok
    text = (tmp_path / "state/dra-device-metadata/gpu.draco.dev/ns_claim-1/gpu/metadata.json").read_text()
    objects = [json.loads(line) for line in text.splitlines()]
    assert [o["apiVersion"] for o in objects] == [
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    ]
    for obj in objects:
        validate_metadata(obj)
    assert {k: v for k, v in objects[0].items() if k != "apiVersion"} == {
        k: v for k, v in objects[1].items() if k != "apiVersion"
    }
    assert first_known(text, versions=("metadata.resource.k8s.io/v1alpha1",)) == objects[1]
    assert first_known(text) == objects[0]
    with pytest.raises(ValueError, match="no DeviceMetadata object"):
        first_known(text, versions=("metadata.resource.k8s.io/v2",))
