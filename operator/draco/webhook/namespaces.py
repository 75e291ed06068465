"""Reading a namespace's labels for the admin-access rule.

The validating webhook must know whether a claim's namespace carries
`resource.draco.dev/admin-access: "true"`; it asks the API server, as upstream's registry
does. The client is created once from the in-cluster service account or the kubeconfig,
unless the operator hands one over with `use_api_client`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from draco.errors import DracoError

__all__ = ["NamespaceLookupError", "namespace_labels", "use_api_client"]

_client: client.ApiClient | None = None
_lock = asyncio.Lock()


class NamespaceLookupError(DracoError):
    """The namespace could not be read, so admin access cannot be verified."""


def use_api_client(api_client: client.ApiClient) -> None:
    """Use the operator's API client instead of creating one."""
    global _client
    _client = api_client


async def _api() -> client.ApiClient:
    global _client
    async with _lock:
        if _client is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
                _client = client.ApiClient()
            except config.ConfigException:
                configuration = client.Configuration()
                # KUBECONFIG is read now: kubernetes_asyncio reads it only once, at import.
                await config.load_kube_config(
                    config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
                )
                _client = client.ApiClient(configuration)
        return _client


async def namespace_labels(name: str) -> Mapping[str, str]:
    """The labels of namespace `name`; NamespaceLookupError when it cannot be read."""
    api = client.CoreV1Api(await _api())
    try:
        namespace = await api.read_namespace(name)
    except ApiException as err:
        raise NamespaceLookupError(
            f"could not retrieve namespace {name!r} to verify admin access: {err.reason}"
        ) from err
    return dict(namespace.metadata.labels or {})
