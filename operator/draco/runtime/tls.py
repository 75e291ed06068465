"""TLS material for draco's servers: certificates we make ourselves, and serving from files.

kube-apiserver only calls webhooks over HTTPS and checks the certificate against the
`caBundle` of the webhook configuration. In a cluster the certificate comes from files
(cert-manager, a Secret volume) that are replaced while the webhook runs:
`ReloadingServerContext` serves them and reloads them in place. For development and tests
draco makes its own: `write_webhook_certificates` (a CA and a serving certificate it
signs, the CA being the `caBundle`) and `write_self_signed` (one certificate that is its
own CA). All keys are ECDSA P-256 from `cryptography`.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "ReloadingServerContext",
    "ServingCertificate",
    "WebhookCertificates",
    "certificate_not_after",
    "write_self_signed",
    "write_webhook_certificates",
]

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


# --- a CA and a serving certificate it signs (the webhook's dev default) ----------------------


@dataclass(frozen=True)
class WebhookCertificates:
    """A CA (`ca_file`, the `caBundle` of the webhook configurations) and the serving
    certificate and key it signed (`cert_file`, `key_file`)."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` readable by the owner only, replacing it atomically (a reader
    that reloads on change never sees half a key)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    partial.touch(mode=0o600)
    partial.write_bytes(data)
    partial.replace(path)


def _write_public(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    partial.replace(path)


def write_webhook_certificates(
    dns_names: Iterable[str],
    *,
    directory: Path,
    validity: datetime.timedelta = _VALIDITY,
) -> WebhookCertificates:
    """Write `ca.crt`, `tls.crt` and `tls.key` into `directory`: a fresh CA and a serving
    certificate it signs for `dns_names` (DNS names or IP addresses), as cert-manager's
    CA issuer would. Files are replaced atomically, so a server reloading them on change
    picks up a consistent pair (the certificate first, the key last: a reader that sees a
    new certificate with the old key keeps its previous pair and retries)."""
    names = list(dict.fromkeys(n for n in dns_names if n and n not in ("0.0.0.0", "::")))
    if not names:
        raise ValueError("a serving certificate needs at least one DNS name or address")
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "draco-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
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
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    paths = WebhookCertificates(
        ca_file=directory / "ca.crt", cert_file=directory / "tls.crt", key_file=directory / "tls.key"
    )
    _write_public(paths.ca_file, ca.public_bytes(pem))
    _write_public(paths.cert_file, serving.public_bytes(pem))
    _write_private(paths.key_file, _pem_key(key))
    return paths


# --- serving from files that change under us ------------------------------------------------


class ReloadingServerContext:
    """A server-side `ssl.SSLContext` loaded from a certificate and key file, reloaded in
    place when either file changes (cert-manager and kubelet's Secret volumes replace them
    while the server runs).

    `check()` compares the files' (inode, size, mtime) with those last loaded and, when
    they differ, loads the pair into the same context: handshakes after that present the
    new certificate, connections already open keep theirs. A pair that does not load (the
    certificate already new, the key not yet) leaves the previous one in use and is
    retried on the next `check()`.
    """

    def __init__(self, *, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded: tuple[tuple[int, int, int], ...] | None = None
        self.reloads = 0
        self.context.load_cert_chain(cert_file, key_file)
        self._loaded = self._stamp()

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.cert_file, self.key_file):
            st = path.stat()
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    def check(self) -> bool:
        """Reload when the files changed; True when a new pair was loaded. Raises
        `ssl.SSLError` or `OSError` when the files changed but do not load (yet)."""
        stamp = self._stamp()
        if stamp == self._loaded:
            return False
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self._loaded = stamp
        self.reloads += 1
        return True


def certificate_not_after(cert_file: Path) -> datetime.datetime:
    """When the (first) certificate in `cert_file` expires."""
    return x509.load_pem_x509_certificate(cert_file.read_bytes()).not_valid_after_utc
