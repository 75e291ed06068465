"""A pod's resource requests: the one reader of its containers' ``resources``, and
upstream's rule for what the pod as a whole requests.

Every reader of a pod's requests takes them from here: the placement record
(`podinfo.PodInfo.requests`: what NodeResourcesFit compares and the scores count), the
special claim of extended resources (`extendedresources.build_extended_resource_claim`:
per container, by name), and the cheap checks of which names a pod asks for (the
allocation's warnings, the pod webhook). An allocation attempt reads them once
(:func:`pod_requests`) and hands the result on.

Effective requests are the API server's defaulting: a limit stands in for a missing
request (a stored pod already has them; a pod body built by hand may not). The pod's total
(:func:`total_requests`) is upstream's ``resource.PodRequests``: regular containers and
restartable init containers (sidecars) run together and add up; each ordinary init
container runs alone beside the sidecars started before it; the pod needs the larger of
the two; pod-level ``spec.resources`` replace what the containers add up to for the names
a pod may set there; the overhead comes on top.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from draco.api.corebodies import ContainerBody, PodSpecBody, ResourceRequirementsBody
from draco.quantity import Quantity

__all__ = [
    "ContainerRequests",
    "PodRequests",
    "asks_for_extended_resources",
    "pod_requests",
    "resource_names",
    "total_requests",
]


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
    #: ``spec.resources`` requests of the names a pod may set there (cpu, memory, hugepages-*).
    pod_level: Mapping[str, str]

    @property
    def init_count(self) -> int:
        return sum(1 for container in self.containers if container.init)

    @property
    def asks_for_extended_resources(self) -> bool:
        """Any container asks for a resource with a domain (only those can be extended)."""
        return any("/" in name for container in self.containers for name in container.requests)


def _effective(resources: ResourceRequirementsBody | None) -> dict[str, str]:
    """A ``resources`` section's requests, a limit standing in for a missing request."""
    section = resources or {}
    merged = {str(k): str(v) for k, v in (section.get("limits") or {}).items()}
    merged.update({str(k): str(v) for k, v in (section.get("requests") or {}).items()})
    return merged


def _pod_level(spec: Mapping[str, object]) -> dict[str, str]:
    section = spec.get("resources")
    if not isinstance(section, Mapping):
        return {}
    requests = _effective(section)  # type: ignore[arg-type]
    return {n: q for n, q in requests.items() if n in ("cpu", "memory") or n.startswith("hugepages-")}


def _container_lists(spec: PodSpecBody) -> Iterator[tuple[bool, ContainerBody]]:
    for container in spec.get("initContainers") or ():
        yield True, container
    for container in spec.get("containers") or ():
        yield False, container


def pod_requests(spec: PodSpecBody) -> PodRequests:
    """The requests of the pod whose ``spec`` (JSON) this is."""
    containers = tuple(
        ContainerRequests(
            name=str(container.get("name", "")),
            init=init,
            sidecar=init and container.get("restartPolicy") == "Always",
            requests=_effective(container.get("resources")),
        )
        for init, container in _container_lists(spec)
    )
    overhead = {str(k): str(v) for k, v in (spec.get("overhead") or {}).items()}
    return PodRequests(containers=containers, overhead=overhead, pod_level=_pod_level(spec))


def _amount(name: str, text: str) -> int:
    try:
        quantity = Quantity.parse(text)
    except ValueError:
        return 0
    return quantity.milli_value() if name == "cpu" else quantity.value()


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def total_requests(requests: PodRequests, *, missing: Mapping[str, int] | None = None) -> dict[str, int]:
    """What the pod requests of its node, every resource name (cpu in millicores, the rest
    in units): upstream's ``PodRequests`` (see the module docstring). ``missing``: what a
    container that names no request for a resource counts (upstream's
    ``NonMissingContainerRequests``: an explicit 0 stays 0)."""
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for container in requests.containers:
        amounts = {name: _amount(name, text) for name, text in container.requests.items()}
        for name, amount in (missing or {}).items():
            amounts.setdefault(name, amount)
        if not container.init:
            _add(total, amounts)
        elif container.sidecar:
            _add(sidecars, amounts)
            _max(peak, sidecars)
        else:
            alone = dict(sidecars)
            _add(alone, amounts)
            _max(peak, alone)
    _add(total, sidecars)
    _max(total, peak)
    total.update({name: _amount(name, text) for name, text in requests.pod_level.items()})
    for name, text in requests.overhead.items():
        total[name] = total.get(name, 0) + _amount(name, text)
    return total


def resource_names(spec: Mapping[str, Any]) -> set[str]:
    """Every resource name the pod's (init) containers request or limit (no parsing)."""
    names: set[str] = set()
    for _, container in _container_lists(cast(PodSpecBody, spec)):
        resources = container.get("resources") or {}
        names.update(str(k) for k in resources.get("limits") or {})
        names.update(str(k) for k in resources.get("requests") or {})
    return names


def asks_for_extended_resources(spec: Mapping[str, Any]) -> bool:
    """Some container requests or limits a resource with a domain (cheap: no parsing)."""
    return any("/" in name for name in resource_names(spec))
