"""Throwaway PKI for the local control plane, the way envtest makes it.

One CA signs the API server's serving certificate (SANs 127.0.0.1, localhost and any
address the caller adds) and the
admin's client certificate (CN=admin, O=system:masters); a separate key signs service
account tokens. Keys and certificates come from `draco.runtime.tls` (the webhook's
helpers); they are valid for a week: these certificates live as long as one test session.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from draco.runtime.tls import issue, name, new_key, write_certificate, write_key

__all__ = ["ControlPlaneCerts", "write_certs"]

_VALIDITY = datetime.timedelta(days=7)


@dataclass(frozen=True)
class ControlPlaneCerts:
    """Paths of the PEM files the API server and its clients need."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def write_certs(directory: Path, *, hosts: tuple[str, ...] = ()) -> ControlPlaneCerts:
    """Write a fresh CA, serving, admin and service-account key material into `directory`
    (the serving certificate for localhost, 127.0.0.1 and `hosts`)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = ControlPlaneCerts(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    ca_key = new_key()
    ca_name = name("draco-dev-ca")
    ca = issue(subject=ca_name, public_key=ca_key.public_key(), signer=ca_key, validity=_VALIDITY, ca=True)
    serving_key = new_key()
    serving = issue(
        subject=name("kube-apiserver"),
        public_key=serving_key.public_key(),
        signer=ca_key,
        issuer=ca_name,
        validity=_VALIDITY,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        hosts=["localhost", "127.0.0.1", *hosts],
    )
    admin_key = new_key()
    admin = issue(
        subject=name("admin", organization="system:masters"),
        public_key=admin_key.public_key(),
        signer=ca_key,
        issuer=ca_name,
        validity=_VALIDITY,
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    sa_key = new_key()
    write_certificate(paths.ca_cert, ca)
    write_certificate(paths.serving_cert, serving, ca)
    write_key(paths.serving_key, serving_key)
    write_certificate(paths.admin_cert, admin)
    write_key(paths.admin_key, admin_key)
    write_key(paths.sa_key, sa_key)
    paths.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths
