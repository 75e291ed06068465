"""Reading a namespace's labels for the admin-access rule.

The validating webhook must know whether a claim's namespace carries
`resource.draco.dev/admin-access: "true"`; it asks the API server, as upstream's registry
does. It uses the process's one `Kube` when the process hands it over with `use_kube`,
and otherwise connects once (credentials in `draco.kube.config`'s order).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from draco.errors import KubeError, NamespaceLookupError
from draco.kube.client import NAMESPACES, Kube, connect

__all__ = ["NamespaceLookupError", "namespace_labels", "use_kube"]

_kube: Kube | None = None
_lock = asyncio.Lock()


def use_kube(kube: Kube) -> None:
    """Use the process's client instead of creating one."""
    global _kube
    _kube = kube


async def _client() -> Kube:
    global _kube
    async with _lock:
        if _kube is None:
            _kube = await connect(field_manager="draco-webhook")
        return _kube


async def namespace_labels(name: str) -> Mapping[str, str]:
    """The labels of namespace `name`; NamespaceLookupError when it cannot be read."""
    kube = await _client()
    try:
        namespace = await kube.get(NAMESPACES, name)
    except KubeError as err:
        raise NamespaceLookupError(
            f"could not retrieve namespace {name!r} to verify admin access: {err}"
        ) from err
    return dict((namespace.get("metadata") or {}).get("labels") or {})
