"""A pod's resource requests, read once: every container's effective requests in
upstream's container order (init containers, then regular ones), and the overhead.

Both readers of a pod's requests take them from here: the node fit (cpu and memory,
`nodefit.pod_usage`) and the special claim of extended resources
(`extendedresources.build_extended_resource_claim`). An allocation attempt reads them
once (:func:`pod_requests`) and hands the result to both.

Effective requests are the API server's defaulting: a limit stands in for a missing
request (a stored pod already has them; a pod body built by hand may not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from draco.api.corebodies import ContainerBody, PodSpecBody

__all__ = ["ContainerRequests", "PodRequests", "pod_requests"]


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    name: str
    #: An init container (sidecar or not).
    init: bool
    #: An init container with ``restartPolicy: Always``: it runs beside the others.
    sidecar: bool
    #: Resource name -> quantity text.
    requests: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PodRequests:
    #: Init containers first, then regular ones: upstream's one index over both.
    containers: tuple[ContainerRequests, ...]
    overhead: Mapping[str, str]

    @property
    def init_count(self) -> int:
        return sum(1 for container in self.containers if container.init)

    @property
    def asks_for_extended_resources(self) -> bool:
        """Any container asks for a resource with a domain (only those can be extended)."""
        return any("/" in name for container in self.containers for name in container.requests)


def _effective(container: ContainerBody) -> dict[str, str]:
    resources = container.get("resources") or {}
    merged = {str(k): str(v) for k, v in (resources.get("limits") or {}).items()}
    merged.update({str(k): str(v) for k, v in (resources.get("requests") or {}).items()})
    return merged


def pod_requests(spec: PodSpecBody) -> PodRequests:
    """The requests of the pod whose ``spec`` (JSON) this is."""
    containers = [
        ContainerRequests(
            name=str(container.get("name", "")),
            init=True,
            sidecar=container.get("restartPolicy") == "Always",
            requests=_effective(container),
        )
        for container in spec.get("initContainers") or []
    ]
    containers.extend(
        ContainerRequests(
            name=str(container.get("name", "")), init=False, sidecar=False, requests=_effective(container)
        )
        for container in spec.get("containers") or []
    )
    overhead = {str(k): str(v) for k, v in (spec.get("overhead") or {}).items()}
    return PodRequests(containers=tuple(containers), overhead=overhead)
