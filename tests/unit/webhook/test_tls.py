"""Certificates for the webhook: a CA-signed serving pair for the dev default, and a
server context that follows its files when they are replaced."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509

from draco.runtime.tls import ReloadingServerContext, certificate_not_after, write_webhook_certificates


def _sans(cert_file: Path) -> list[str]:
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n.value) for n in names]


def test_the_serving_certificate_is_signed_by_the_ca_and_names_the_hosts(tmp_path: Path) -> None:
    made = write_webhook_certificates(["127.0.0.1", "draco-webhook.draco-system.svc"], directory=tmp_path)
    assert _sans(made.cert_file) == ["127.0.0.1", "draco-webhook.draco-system.svc"]
    serving = x509.load_pem_x509_certificate(made.cert_file.read_bytes())
    ca = x509.load_pem_x509_certificate(made.ca_file.read_bytes())
    serving.verify_directly_issued_by(ca)
    assert oct(made.key_file.stat().st_mode & 0o777) == "0o600"
    client = ssl.create_default_context(cafile=made.ca_file)
    assert client.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ValueError, match="at least one"):
        write_webhook_certificates(["0.0.0.0"], directory=tmp_path)


def test_the_context_reloads_replaced_files_and_keeps_a_pair_that_does_not_match(tmp_path: Path) -> None:
    first = write_webhook_certificates(["a.example"], directory=tmp_path / "live")
    context = ReloadingServerContext(cert_file=first.cert_file, key_file=first.key_file)
    assert context.check() is False
    before = certificate_not_after(first.cert_file)

    # Rotation in place, as cert-manager and the kubelet do it.
    write_webhook_certificates(["b.example"], directory=tmp_path / "live")
    assert context.check() is True
    assert context.reloads == 1
    assert certificate_not_after(first.cert_file) >= before

    # Half a rotation: a new certificate next to the old key does not load; the previous
    # pair stays in use and the next check tries again.
    other = write_webhook_certificates(["c.example"], directory=tmp_path / "other")
    first.cert_file.write_bytes(other.cert_file.read_bytes())
    with pytest.raises(ssl.SSLError):
        context.check()
    first.key_file.write_bytes(other.key_file.read_bytes())
    assert context.check() is True
    assert context.reloads == 2
