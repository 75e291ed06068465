"""TLS material for draco's servers: certificates we make ourselves, and serving from files.

kube-apiserver only calls webhooks over HTTPS and checks the certificate against the
`caBundle` of the webhook configuration. In a cluster the certificate comes from files
(cert-manager, a Secret volume) that are replaced while the webhook runs:
`ReloadingServerContext` serves them and reloads them in place. For development and tests
draco makes its own: `write_webhook_certificates` (a CA and a serving certificate it
signs, the CA being the `caBundle`) and `write_self_signed` (one certificate that is its
own CA). The local control plane's throwaway PKI (`draco.tools.dev.certs`) is built with
the same helpers (`new_key`, `name`, `issue`, `write_key`, `write_certificate`): this is
the one place draco makes keys and certificates. All keys are ECDSA P-256 from
`cryptography`, written as PKCS#8 PEM readable by their owner only; every file is
replaced atomically.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from draco.runtime.files import PUBLIC_MODE, replace_file, write_private

__all__ = [
    "PrivateKey",
    "ReloadingServerContext",
    "ServingCertificate",
    "WebhookCertificates",
    "certificate_not_after",
    "issue",
    "name",
    "new_key",
    "subject_alternative_name",
    "write_certificate",
    "write_key",
    "write_self_signed",
    "write_webhook_certificates",
]

PrivateKey = ec.EllipticCurvePrivateKey

_VALIDITY = datetime.timedelta(days=365)
#: Certificates are valid from a little before now: clocks of the API server and of the
#: machine that issued them may disagree slightly.
_BACKDATE = datetime.timedelta(minutes=5)


# --- the helpers every certificate here is made with ----------------------------------------


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
    validity: datetime.timedelta = _VALIDITY,
    ca: bool = False,
    path_length: int | None = None,
    usages: Sequence[x509.ObjectIdentifier] = (),
    hosts: Iterable[str] = (),
) -> x509.Certificate:
    """A certificate for `public_key` signed by `signer` (self-signed when `issuer` is None).

    A CA (`ca=True`) may sign certificates and CRLs; any certificate gets the extended key
    usages `usages` (server or client auth) and the SANs of `hosts`.
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
        .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length if ca else None), critical=True)
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
    sans = [subject_alternative_name(h) for h in hosts]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _pem_key(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_public(path: Path, data: bytes) -> None:
    replace_file(path, data, mode=PUBLIC_MODE, sync=False)


def write_key(path: Path, key: PrivateKey) -> Path:
    """Write `key` as PKCS#8 PEM, owner-only from the start, replacing `path` atomically."""
    write_private(path, _pem_key(key), sync=False)
    return path


def write_certificate(path: Path, *certificates: x509.Certificate) -> Path:
    """Write the certificates as one PEM file (a chain: the leaf first), atomically."""
    _write_public(path, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates))
    return path


# --- one certificate that is its own CA ------------------------------------------------------


@dataclass(frozen=True)
class ServingCertificate:
    certfile: Path
    pkeyfile: Path


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
        ca=True,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        hosts=names,
    )
    certfile = write_certificate(folder / "tls.crt", cert)
    pkeyfile = write_key(folder / "tls.key", key)
    return ServingCertificate(certfile=certfile, pkeyfile=pkeyfile)


# --- a CA and a serving certificate it signs (the webhook's dev default) ----------------------


@dataclass(frozen=True)
class WebhookCertificates:
    """A CA (`ca_file`, the `caBundle` of the webhook configurations) and the serving
    certificate and key it signed (`cert_file`, `key_file`)."""

    ca_file: Path
    cert_file: Path
    key_file: Path


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
    ca_key = new_key()
    ca_name = name("draco-webhook-ca")
    ca = issue(
        subject=ca_name,
        public_key=ca_key.public_key(),
        signer=ca_key,
        validity=validity,
        ca=True,
        path_length=0,
    )
    key = new_key()
    serving = issue(
        subject=name(names[0]),
        public_key=key.public_key(),
        signer=ca_key,
        issuer=ca_name,
        validity=validity,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        hosts=names,
    )
    paths = WebhookCertificates(
        ca_file=directory / "ca.crt", cert_file=directory / "tls.crt", key_file=directory / "tls.key"
    )
    write_certificate(paths.ca_file, ca)
    write_certificate(paths.cert_file, serving)
    write_key(paths.key_file, key)
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
