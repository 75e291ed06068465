"""The one certificate helper: the webhook's self-signed certificate and the dev control
plane's PKI both make certificates a real TLS handshake accepts."""

from __future__ import annotations

import asyncio
import ssl
import stat
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from draco.runtime.tls import write_self_signed, write_webhook_certificates
from draco.tools.dev.certs import write_certs


async def handshake(*, server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> bytes:
    """Serve on a loopback port with `server`, connect with `client`; what the client read."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server)
    port = listener.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname=hostname
        )
        data = await reader.read()
        writer.close()
        return data
    finally:
        listener.close()
        await listener.wait_closed()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_control_plane_pki_serves_and_authenticates_the_admin(tmp_path: Path) -> None:
    certs = write_certs(tmp_path / "pki")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs.ca_cert))
    server.load_cert_chain(str(certs.serving_cert), str(certs.serving_key))
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(cafile=str(certs.ca_cert))
    client.load_cert_chain(str(certs.admin_cert), str(certs.admin_key))
    assert await handshake(server=server, client=client, hostname="localhost") == b"hello"
    admin = x509.load_pem_x509_certificate(certs.admin_cert.read_bytes())
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert admin.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    for key in (certs.serving_key, certs.admin_key, certs.sa_key):
        assert mode(key) == 0o600


async def test_webhook_certificate_is_its_own_ca_for_every_host(tmp_path: Path) -> None:
    served = write_self_signed(["webhook.draco.svc", "127.0.0.1", "0.0.0.0"], directory=tmp_path)
    assert mode(served.pkeyfile) == 0o600
    cert = x509.load_pem_x509_certificate(served.certfile.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["webhook.draco.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(served.certfile), str(served.pkeyfile))
    for host in ("webhook.draco.svc", "127.0.0.1"):
        # The certificate is the caBundle the API server trusts.
        client = ssl.create_default_context(cafile=str(served.certfile))
        assert await handshake(server=server, client=client, hostname=host) == b"hello"


async def test_webhook_ca_signs_a_serving_certificate_the_ca_bundle_accepts(tmp_path: Path) -> None:
    made = write_webhook_certificates(["draco-webhook.draco.svc"], directory=tmp_path)
    assert mode(made.key_file) == 0o600
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(made.cert_file), str(made.key_file))
    client = ssl.create_default_context(cafile=str(made.ca_file))
    assert await handshake(server=server, client=client, hostname="draco-webhook.draco.svc") == b"hello"
