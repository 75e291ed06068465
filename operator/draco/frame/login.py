"""Kopf's login from `draco.kube.config`: Kopf talks to the API server with the same
credentials, found in the same order, as every other client of the process.

Kopf has its own kubeconfig and service-account readers (in another order, and reading
`$KUBECONFIG` differently); each of draco's Kopf processes registers :func:`login` on its
registry instead (`register_login`). Kopf calls it again when the API answers 401.
"""

from __future__ import annotations

from typing import Any

import kopf

from draco.kube.config import load_configuration

__all__ = ["kopf_connection_info", "login", "register_login"]


async def kopf_connection_info() -> kopf.ConnectionInfo:
    """`draco.kube.config`'s credentials as Kopf's `ConnectionInfo`."""
    configuration = await load_configuration()
    authorization = str((configuration.api_key or {}).get("BearerToken") or "")
    scheme, _, token = authorization.partition(" ")
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        username=configuration.username or None,
        password=configuration.password or None,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
        proxy_url=configuration.proxy or None,
    )


async def login(**_: Any) -> kopf.ConnectionInfo:
    """Kopf's login handler: the credentials of every other client of the process."""
    return await kopf_connection_info()


def register_login(registry: kopf.OperatorRegistry) -> None:
    """Register :func:`login` as the only login of `registry`'s operator."""
    kopf.on.login(id="draco-login", registry=registry)(login)
