"""The kubelet's PodResources v1 API, served by the agent on a socket of its own: the
kubelet's answers (proxied from its socket) with draco's devices added (`server`). Loads
grpcio: imported only when the agent serves it (`--pod-resources-socket`); this package
itself imports nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["DEFAULT_KUBELET_SOCKET"]

#: Where the kubelet serves the API (its `--root-dir`, /var/lib/kubelet, by default).
DEFAULT_KUBELET_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
