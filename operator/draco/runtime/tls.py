"""A self-signed serving certificate for the admission webhook server.

kube-apiserver only calls webhooks over HTTPS and checks the certificate against the
`caBundle` of the webhook configuration. By default draco manages this itself: a fresh
ECDSA key and a self-signed certificate (its own CA) for the webhook host, valid for a
year, written to a private temporary folder. Kopf puts the certificate into the managed
webhook configurations as the CA bundle. (Kopf's own generator needs `certbuilder`, which
is not among draco's dependencies; `cryptography` is.)
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ServingCertificate", "write_self_signed"]

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class ServingCertificate:
    certfile: Path
    pkeyfile: Path


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def write_self_signed(hostnames: Iterable[str], *, directory: Path | None = None) -> ServingCertificate:
    """Write `tls.crt` and `tls.key` for `hostnames` (DNS names or IPs) into `directory`
    (a new private temporary folder when None)."""
    names = list(dict.fromkeys(h for h in hostnames if h and h not in ("0.0.0.0", "::")))
    if not names:
        raise ValueError("a webhook certificate needs at least one host name or address")
    folder = directory or Path(tempfile.mkdtemp(prefix="draco-webhook-"))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    certfile = folder / "tls.crt"
    pkeyfile = folder / "tls.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pkeyfile.touch(mode=0o600)
    pkeyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ServingCertificate(certfile=certfile, pkeyfile=pkeyfile)
