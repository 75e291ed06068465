"""Where every draco process gets its API credentials: one function, one order.

The operator (its own client and Kopf's login), the webhook, the agent, the tools and the
benchmarks all call `load_configuration`, which tries, in this order:

1. `$KUBECONFIG` when it is set (all of its paths, merged as kubectl merges them), read
   when called, not when kubernetes_asyncio was imported. A kubeconfig named explicitly
   is a deliberate choice and wins, also inside a pod (controller-runtime's order);
2. the in-cluster service account (`KUBERNETES_SERVICE_HOST` and the mounted token),
   the normal case of a Deployment or DaemonSet;
3. `~/.kube/config`, a developer's default.

Nothing else builds credentials; `new_api_client` turns them into a kubernetes_asyncio
`ApiClient` whose HTTP session does not consult the environment on every request
(aiohttp's `trust_env` looks up proxy variables and `.netrc` per request, which profiling
showed as a quarter of the operator's CPU under load): the proxy the environment names
for the API server is resolved once here instead, so `HTTPS_PROXY`/`NO_PROXY` keep
working as they do for client-go.
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Final

import aiohttp
from kubernetes_asyncio import client, config

from draco.errors import CredentialsError

__all__ = ["load_configuration", "new_api_client"]

_DEFAULT_KUBECONFIG: Final = Path("~/.kube/config")
# kubernetes_asyncio's own read buffer size (large watch events), kept for our session.
_READ_BUFSIZE: Final = 2**21


async def load_configuration(
    *, kubeconfig: str | None = None, context: str | None = None
) -> client.Configuration:
    """API credentials from `$KUBECONFIG`, the in-cluster account or `~/.kube/config`
    (the first that exists, see the module docstring). As kubectl's flags: `kubeconfig`
    comes before all three, `context` picks a context of the kubeconfig read (not the
    in-cluster account, then)."""
    configuration = client.Configuration()
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or ""
    if kubeconfig.strip(os.pathsep):
        await _load_kubeconfig(kubeconfig, context, configuration)
        return configuration
    if os.environ.get("KUBERNETES_SERVICE_HOST") and context is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            pass  # in a pod without a mounted service account token: try the file
        else:
            return configuration
    default = _DEFAULT_KUBECONFIG.expanduser()
    if default.exists():
        await _load_kubeconfig(str(default), context, configuration)
        return configuration
    raise CredentialsError(
        "no API credentials: set KUBECONFIG, run in a pod with a service account, or create ~/.kube/config"
    )


async def _load_kubeconfig(path: str, context: str | None, configuration: client.Configuration) -> None:
    try:
        await config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise CredentialsError(f"kubeconfig {path}: {exc}") from exc


def _env_proxy(host: str) -> str | None:
    """The proxy the environment names for `host` (an URL), as aiohttp's `trust_env` would
    find it on every request; None when there is none or `NO_PROXY` exempts the host."""
    parsed = urllib.parse.urlsplit(host)
    if not parsed.hostname or urllib.request.proxy_bypass(parsed.hostname):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parsed.scheme or "https")


async def new_api_client(
    configuration: client.Configuration | None = None, *, connections: int | None = None
) -> client.ApiClient:
    """A kubernetes_asyncio `ApiClient` for `configuration` (`load_configuration()` when
    None) whose session resolves environment proxies once instead of per request;
    ``connections`` caps its pool (kubernetes_asyncio's default, 100, when None)."""
    configuration = configuration or await load_configuration()
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    if not configuration.proxy:
        configuration.proxy = _env_proxy(str(configuration.host))
    api = client.ApiClient(configuration)
    rest = api.rest_client
    old: aiohttp.ClientSession = rest.pool_manager
    connector = old.connector
    # Same connector (TLS context, pool size) and buffer size as kubernetes_asyncio's own
    # session, without per-request environment lookups.
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=_READ_BUFSIZE
    )
    old.detach()  # the old session lets go of the connector without closing it
    return api
