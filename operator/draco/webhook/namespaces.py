"""Reading a namespace's labels for the admin-access rule.

The validating webhook must know whether a claim's namespace carries
`resource.draco.dev/admin-access: "true"`; it asks the API server through `draco.kube`,
as upstream's registry does. Only requests that newly ask for admin access pay for the
read.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from draco.errors import KubeError, NamespaceLookupError
from draco.kube.client import NAMESPACES, Kube

__all__ = ["NAMESPACES", "NamespaceLookupError", "NamespaceReader"]


class NamespaceReader:
    """`await reader(name)`: the labels of namespace `name`, or NamespaceLookupError."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def __call__(self, name: str) -> Mapping[str, str]:
        try:
            namespace = await self.kube.get(NAMESPACES, name)
        except (KubeError, aiohttp.ClientError, TimeoutError) as err:
            raise NamespaceLookupError(
                f"could not retrieve namespace {name!r} to verify admin access: {err}"
            ) from err
        return dict((namespace.get("metadata") or {}).get("labels") or {})
