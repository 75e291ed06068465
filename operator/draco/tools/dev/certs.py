"""Throwaway PKI for the local control plane, the way envtest makes it.

One CA signs the API server's serving certificate (SANs 127.0.0.1 and localhost) and the
admin's client certificate (CN=admin, O=system:masters); a separate key signs service
account tokens. Everything is ECDSA P-256 and valid for a week: these certificates live as
long as one test session.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _cert(
    *,
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    signer: ec.EllipticCurvePrivateKey,
    ca: bool,
    usage: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def write_certs(directory: Path) -> ControlPlaneCerts:
    """Write a fresh CA, serving, admin and service-account key material into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "draco-dev-ca")])
    ca = _cert(
        subject=ca_name,
        issuer=ca_name,
        public_key=ca_key.public_key(),
        signer=ca_key,
        ca=True,
        usage=[],
        sans=[],
    )
    serving_key = _key()
    serving = _cert(
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        issuer=ca_name,
        public_key=serving_key.public_key(),
        signer=ca_key,
        ca=False,
        usage=[ExtendedKeyUsageOID.SERVER_AUTH],
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    admin_key = _key()
    admin = _cert(
        subject=x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
            ]
        ),
        issuer=ca_name,
        public_key=admin_key.public_key(),
        signer=ca_key,
        ca=False,
        usage=[ExtendedKeyUsageOID.CLIENT_AUTH],
        sans=[],
    )
    sa_key = _key()
    paths = ControlPlaneCerts(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    pem = serialization.Encoding.PEM
    paths.ca_cert.write_bytes(ca.public_bytes(pem))
    paths.serving_cert.write_bytes(serving.public_bytes(pem) + ca.public_bytes(pem))
    paths.serving_key.write_bytes(_key_pem(serving_key))
    paths.admin_cert.write_bytes(admin.public_bytes(pem))
    paths.admin_key.write_bytes(_key_pem(admin_key))
    paths.sa_key.write_bytes(_key_pem(sa_key))
    paths.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    for key_path in (paths.serving_key, paths.admin_key, paths.sa_key):
        key_path.chmod(0o600)
    return paths
