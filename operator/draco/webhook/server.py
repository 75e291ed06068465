"""Where the admission webhooks listen, with which certificate, and who registers them.

`configure_admission(settings)` sets Kopf's WebhookServer on `settings.admission.server`
(HTTPS on `host:port`; by default with a self-signed certificate draco generates for
`host`) and, when `managed`, lets Kopf create and keep up to date the
ValidatingWebhookConfiguration and MutatingWebhookConfiguration named
`validate.resource.draco.dev` for the handlers in `draco.webhook.handlers`.
"""

from __future__ import annotations

from pathlib import Path

import kopf

from draco.logs import get_logger
from draco.runtime.tls import write_self_signed

__all__ = ["DEFAULT_HOST", "MANAGED_CONFIGURATION_NAME", "configure_admission"]

log = get_logger(__name__)

#: Name of the Validating/MutatingWebhookConfiguration Kopf manages for draco.
MANAGED_CONFIGURATION_NAME = "validate.resource.draco.dev"
#: Where kube-apiserver reaches the webhooks when the operator runs beside it (tests, demo).
DEFAULT_HOST = "127.0.0.1"


def configure_admission(
    settings: kopf.OperatorSettings,
    *,
    host: str | None = DEFAULT_HOST,
    port: int = 9443,
    managed: bool = True,
    listen: str | None = None,
    certfile: str | Path | None = None,
    pkeyfile: str | Path | None = None,
    extra_sans: tuple[str, ...] = (),
) -> kopf.WebhookServer:
    """Serve draco's admission webhooks on `https://host:port`.

    `host` is the name kube-apiserver uses to reach the server (it goes into the webhook
    URL and the certificate; None means 127.0.0.1); `listen` the address to bind
    (default: `host`). Without
    `certfile`/`pkeyfile` a self-signed certificate is generated ("self-managed"); with
    them (say, from cert-manager) that certificate is served and is its own CA bundle.
    `managed=False` leaves the webhook configurations to the installer.
    """
    host = host or DEFAULT_HOST
    if certfile is None or pkeyfile is None:
        generated = write_self_signed([host, *(extra_sans or ()), "localhost"])
        certfile, pkeyfile = generated.certfile, generated.pkeyfile
    server = kopf.WebhookServer(
        addr=listen or host,
        port=port,
        host=host,
        certfile=str(certfile),
        pkeyfile=str(pkeyfile),
        cafile=str(certfile),
    )
    settings.admission.server = server
    if managed:
        settings.admission.managed = MANAGED_CONFIGURATION_NAME
    log.info("Admission webhooks configured", url=f"https://{host}:{port}", managed=managed)
    return server
