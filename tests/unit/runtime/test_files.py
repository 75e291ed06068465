"""Every file draco writes with a secret in it is readable by its owner only, from its first
byte and whatever the umask; the files others read keep their mode; nothing half-written
or temporary is left behind."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from draco.agent.checkpoint import PREPARE_COMPLETED, Checkpoint, ClaimRecord
from draco.runtime.files import PUBLIC_MODE, replace_file, write_private
from draco.runtime.tls import new_key, write_key, write_self_signed, write_webhook_certificates
from draco.tools.dev.certs import write_certs


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets everyone read and write what a plain open() creates."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("open_umask")
def test_a_private_file_is_0600_whatever_the_umask_and_replaces_a_wider_one(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "secret"
    target.parent.mkdir()
    target.write_bytes(b"old")
    target.chmod(0o666)
    assert write_private(target, b"new") == target
    assert target.read_bytes() == b"new"
    assert mode(target) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["secret"]


@pytest.mark.usefixtures("open_umask")
def test_a_public_file_gets_its_mode_before_it_appears(tmp_path: Path) -> None:
    target = replace_file(tmp_path / "spec.json", b"{}", mode=PUBLIC_MODE)
    assert mode(target) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = write_private(tmp_path / "key", b"old")

    with pytest.raises(TypeError):  # what a write that fails half-way raises
        write_private(target, object())  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


@pytest.mark.usefixtures("open_umask")
def test_every_key_draco_makes_is_0600_and_its_certificates_0644(tmp_path: Path) -> None:
    key = write_key(tmp_path / "alone.key", new_key())
    webhook = write_webhook_certificates(["draco-webhook.draco.svc"], directory=tmp_path / "webhook")
    self_signed = write_self_signed(["localhost"], directory=tmp_path / "self-signed")
    pki = write_certs(tmp_path / "pki")
    for private in (key, webhook.key_file, self_signed.pkeyfile, pki.serving_key, pki.admin_key, pki.sa_key):
        assert mode(private) == 0o600, private
    for public in (webhook.ca_file, webhook.cert_file, self_signed.certfile, pki.ca_cert, pki.admin_cert):
        assert mode(public) == 0o644, public


@pytest.mark.usefixtures("open_umask")
def test_the_agents_checkpoint_records_are_0600(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path).load()
    checkpoint.put(ClaimRecord(uid="uid-1", namespace="team-a", name="gpu", state=PREPARE_COMPLETED))
    (record,) = (tmp_path / "checkpoint").iterdir()
    assert record.name == "uid-1.json"
    assert mode(record) == 0o600
