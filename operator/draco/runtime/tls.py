"""TLS material: the one place draco makes keys and certificates.

Two users, one set of helpers (`new_key`, `issue`, `write_key`, `write_certificate`):

- the admission webhook's serving certificate (`write_self_signed`). kube-apiserver only
  calls webhooks over HTTPS and checks the certificate against the `caBundle` of the
  webhook configuration; by default draco manages this itself: a fresh ECDSA key and a
  self-signed certificate (its own CA) for the webhook host, valid for a year, written to
  a private temporary folder, which Kopf puts into the managed webhook configurations as
  the CA bundle. (Kopf's own generator needs `certbuilder`, which is not among draco's
  dependencies; `cryptography` is.)
- the throwaway PKI of the local control plane (`draco.tools.dev.certs`): a CA, the API
  server's serving certificate, the admin's client certificate.

Every key is ECDSA P-256, written as PKCS#8 PEM readable by its owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "PrivateKey",
    "ServingCertificate",
    "issue",
    "name",
    "new_key",
    "subject_alternative_name",
    "write_certificate",
    "write_key",
    "write_self_signed",
]

PrivateKey = ec.EllipticCurvePrivateKey

_WEBHOOK_VALIDITY = datetime.timedelta(days=365)
#: Certificates are valid from a little before now: clocks of the API server and of the
#: machine that issued them may disagree slightly.
_BACKDATE = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class ServingCertificate:
    certfile: Path
    pkeyfile: Path


def new_key() -> PrivateKey:
    """A fresh ECDSA P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def name(common_name: str, *, organization: str | None = None) -> x509.Name:
    """An X.509 name: `O=organization, CN=common_name` (Kubernetes reads O as groups)."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def subject_alternative_name(host: str) -> x509.GeneralName:
    """An IP address SAN for an address, a DNS SAN otherwise."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue(
    *,
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    signer: PrivateKey,
    issuer: x509.Name | None = None,
    validity: datetime.timedelta,
    ca: bool = False,
    usages: Sequence[x509.ObjectIdentifier] = (),
    hosts: Iterable[str] = (),
) -> x509.Certificate:
    """A certificate for `public_key` signed by `signer` (self-signed when `issuer` is None).

    A CA may sign certificates (and CRLs); any certificate gets the extended key usages
    `usages` (server or client auth) and the SANs of `hosts`.
    """
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + validity)
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
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    sans = [subject_alternative_name(h) for h in hosts]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def write_key(path: Path, key: PrivateKey) -> Path:
    """Write `key` as PKCS#8 PEM, readable by its owner only (never world-readable, not even
    for a moment)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def write_certificate(path: Path, *certificates: x509.Certificate) -> Path:
    """Write the certificates as one PEM file (a chain: the leaf first)."""
    path.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates))
    return path


def write_self_signed(hostnames: Iterable[str], *, directory: Path | None = None) -> ServingCertificate:
    """Write `tls.crt` and `tls.key` for `hostnames` (DNS names or IPs) into `directory`
    (a new private temporary folder when None)."""
    names = list(dict.fromkeys(h for h in hostnames if h and h not in ("0.0.0.0", "::")))
    if not names:
        raise ValueError("a webhook certificate needs at least one host name or address")
    folder = directory or Path(tempfile.mkdtemp(prefix="draco-webhook-"))
    key = new_key()
    cert = issue(
        subject=name(names[0]),
        public_key=key.public_key(),
        signer=key,
        validity=_WEBHOOK_VALIDITY,
        ca=True,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        hosts=names,
    )
    certfile = write_certificate(folder / "tls.crt", cert)
    pkeyfile = write_key(folder / "tls.key", key)
    return ServingCertificate(certfile=certfile, pkeyfile=pkeyfile)
