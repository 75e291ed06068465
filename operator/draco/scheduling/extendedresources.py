"""Extended resources backed by DeviceClasses: which class serves a resource name, and the
special claim a pod's extended-resource requests become (upstream's DRAExtendedResource).

A pod may ask for devices the way it asks for device-plugin resources,
``resources.limits: {example.com/gpu: 2}``. Every DeviceClass is reachable under the implicit
names ``deviceclass.resource.draco.dev/<class>`` and upstream's
``deviceclass.resource.kubernetes.io/<class>`` (so a pod written for native DRA's extended
resources works unchanged), and under its ``spec.extendedResourceName`` when set; when two classes declare the same name the newer one (creationTimestamp) wins, on
a tie the smaller name. The operator turns the pod's requests into one claim per pod (the
special claim) whose requests are built per container exactly as upstream's scheduler builds
them, and records which container's resource maps to which request (the counterpart of
``pod.status.extendedResourceClaimStatus``) so the node agent knows whose devices are whose.

Request construction, as upstream: init containers then regular containers share one index
``i``; the request for resource ``r`` of container ``i`` is named ``container-<i>-request-<k>``
where ``k`` is the index of ``r`` in the sorted resource names of that container. Long-lived
containers (regular ones and sidecar init containers, ``restartPolicy: Always``) each get
their own request. A plain init container first reuses the long-lived requests of the same
resource at indices at or after its own (those containers have not started yet when it
runs); only what that does not cover becomes its own request, and of the init containers'
own requests per resource only the largest is kept, the others' mappings pointing at it.

Pure: pod and class dicts in, request dicts and mappings out.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from draco.api.bodies import DeviceRequestBody, ResourceClaimSpecBody, meta_of
from draco.api.constants import (
    ALLOCATION_MODE_EXACT_COUNT,
    EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION,
    IMPLICIT_EXTENDED_RESOURCE_PREFIX,
    IMPLICIT_EXTENDED_RESOURCE_PREFIXES,
    SCHEDULER_NAME,
    SCHEDULING_GATE,
)
from draco.api.corebodies import PodBody, PodSpecBody
from draco.api.quantity import Quantity
from draco.scheduling.demand import DEMAND_SCHEDULER
from draco.scheduling.requests import PodRequests, pod_requests
from draco.validation.formats import is_extended_resource_name, is_qualified_name

__all__ = [
    "EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION",
    "SPECIAL_CLAIM_PLACEHOLDER",
    "ExtendedResourceClaim",
    "ExtendedResourceStatus",
    "RequestMapping",
    "build_extended_resource_claim",
    "extended_resource_names",
    "extended_resource_status",
    "extended_resource_status_annotation",
    "implicit_resource_name",
    "implicit_resource_names",
    "resource_class_map",
    "unserved_extended_resources",
]

#: The name upstream gives the in-memory claim before it is created (deliberately invalid).
SPECIAL_CLAIM_PLACEHOLDER: Final = "<extended-resources>"


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """One ``requestMappings`` entry: container ``container_name``'s ``resource_name`` is
    served by request ``request_name`` of the special claim."""

    container_name: str
    resource_name: str
    request_name: str

    def to_json(self) -> dict[str, str]:
        return {
            "containerName": self.container_name,
            "resourceName": self.resource_name,
            "requestName": self.request_name,
        }


@dataclass(frozen=True, slots=True)
class ExtendedResourceClaim:
    """The special claim's requests (sorted by name) and the container mappings
    (long-lived containers' first, then init containers')."""

    requests: tuple[DeviceRequestBody, ...]
    mappings: tuple[RequestMapping, ...]

    def claim_spec(self) -> ResourceClaimSpecBody:
        return {"devices": {"requests": [copy.copy(r) for r in self.requests]}}

    def built(self, claim_spec: Mapping[str, Any]) -> bool:
        """Whether a special claim of ``claim_spec`` asks what these requests ask (each
        request's name, class and count, whatever the API server defaulted): one made
        while other classes mapped the pod's resources does not (upstream's Filter finds
        such a stale claim unschedulable and its PostFilter deletes it)."""
        return _asks(self.requests) == _asks((claim_spec.get("devices") or {}).get("requests") or [])


def _asks(requests: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, int]]:
    return {
        (
            str(r.get("name", "")),
            str((r.get("exactly") or {}).get("deviceClassName", "")),
            int((r.get("exactly") or {}).get("count") or 1),
        )
        for r in requests
    }


@dataclass(frozen=True, slots=True)
class ExtendedResourceStatus:
    """The pod's record of its special claim (``status.extendedResourceClaimStatus``)."""

    resource_claim_name: str
    request_mappings: tuple[RequestMapping, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "resourceClaimName": self.resource_claim_name,
            "requestMappings": [m.to_json() for m in self.request_mappings],
        }

    def requests_of(self, container_name: str) -> list[str]:
        """The special claim's requests that container ``container_name`` gets."""
        return sorted({m.request_name for m in self.request_mappings if m.container_name == container_name})


def implicit_resource_name(class_name: str) -> str | None:
    """``deviceclass.resource.draco.dev/<class>``, or None when that is not a valid pod
    resource name (the name part must be a qualified name of at most 63 characters)."""
    if is_qualified_name(class_name):
        return None
    return IMPLICIT_EXTENDED_RESOURCE_PREFIX + class_name


def implicit_resource_names(class_name: str) -> list[str]:
    """draco's and upstream's implicit names of the class (``deviceclass.resource.draco.dev/
    <class>``, ``deviceclass.resource.kubernetes.io/<class>``), or none when the class name
    is not a qualified name of at most 63 characters."""
    if is_qualified_name(class_name):
        return []
    return [prefix + class_name for prefix in IMPLICIT_EXTENDED_RESOURCE_PREFIXES]


def extended_resource_names(device_class: Mapping[str, Any]) -> list[str]:
    """Every resource name the class can be reached under (implicit first)."""
    name = str((device_class.get("metadata") or {}).get("name", ""))
    names = implicit_resource_names(name)
    explicit = (device_class.get("spec") or {}).get("extendedResourceName")
    if isinstance(explicit, str) and explicit and is_extended_resource_name(explicit):
        names.append(explicit)
    return names


def resource_class_map(classes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Resource name → DeviceClass name, over all classes.

    An explicit ``extendedResourceName`` declared by several classes goes to the newest
    (creationTimestamp; RFC 3339 strings in UTC compare as times), on a tie to the
    lexicographically smallest name. Implicit names never clash with explicit ones.
    """
    best: dict[str, tuple[str, str]] = {}  # resource -> (creationTimestamp, class name)
    mapping: dict[str, str] = {}
    for device_class in classes:
        meta = device_class.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        name = str(meta.get("name", ""))
        if not name:
            continue
        created = str(meta.get("creationTimestamp") or "")
        for implicit in implicit_resource_names(name):
            mapping[implicit] = name
        explicit = (device_class.get("spec") or {}).get("extendedResourceName")
        if not isinstance(explicit, str) or not explicit or not is_extended_resource_name(explicit):
            continue
        current = best.get(explicit)
        if current is None or created > current[0] or (created == current[0] and name < current[1]):
            best[explicit] = (created, name)
    mapping.update({resource: name for resource, (_, name) in best.items()})
    return mapping


def _count(text: str) -> int:
    """The integer amount of an extended-resource quantity (0 for a zero, fractional or
    unreadable one: the API server rejects those for extended resources anyway)."""
    try:
        quantity = Quantity(text)
    except (ValueError, TypeError):
        return 0
    if not quantity.is_integer() or quantity.sign() <= 0:
        return 0
    return quantity.value()


def build_extended_resource_claim(
    pod_spec: PodSpecBody, class_map: Mapping[str, str], *, requests: PodRequests | None = None
) -> ExtendedResourceClaim | None:
    """The special claim of a pod, or None when no container asks for a mapped resource.
    ``requests``: the pod's, when the caller has read them already."""
    containers = (requests if requests is not None else pod_requests(pod_spec)).containers
    requested: list[tuple[int, str, Mapping[str, str]]] = []  # (index, name, requests)
    resources: set[str] = set()
    for index, container in enumerate(containers):
        requested.append((index, container.name, container.requests))
        resources.update(r for r in container.requests if r in class_map)
    if not resources:
        return None

    built: dict[str, DeviceRequestBody] = {}
    long_lived: list[RequestMapping] = []
    init_mappings: list[RequestMapping] = []
    for resource in sorted(resources):
        class_name = class_map[resource]
        # (index, request name, count) of the long-lived requests of this resource.
        lived: list[tuple[int, str, int]] = []
        pending_init: list[tuple[int, str, int]] = []  # (index, container, q)
        for index, name, reqs in requested:
            count = _count(reqs[resource]) if resource in reqs else 0
            if count <= 0:
                continue
            container = containers[index]
            if not container.init or container.sidecar:
                request_name = f"container-{index}-request-{sorted(reqs).index(resource)}"
                built[request_name] = _request(request_name, class_name, count)
                lived.append((index, request_name, count))
                long_lived.append(RequestMapping(name, resource, request_name))
            else:
                pending_init.append((index, name, count))
        largest: tuple[str, int] | None = None  # the kept init request of this resource
        own: list[RequestMapping] = []
        for index, name, count in pending_init:
            reused = [(request_name, c) for i, request_name, c in lived if i >= index]
            init_mappings.extend(RequestMapping(name, resource, request_name) for request_name, _ in reused)
            covered = sum(c for _, c in reused)
            if covered >= count:
                continue
            reqs = requested[index][2]
            request_name = f"container-{index}-request-{sorted(reqs).index(resource)}"
            own.append(RequestMapping(name, resource, request_name))
            if largest is None or count - covered > largest[1]:
                largest = (request_name, count - covered)
        if largest is not None:
            built[largest[0]] = _request(largest[0], class_name, largest[1])
            init_mappings.extend(RequestMapping(m.container_name, resource, largest[0]) for m in own)
    return ExtendedResourceClaim(
        requests=tuple(built[name] for name in sorted(built)),
        mappings=(*long_lived, *init_mappings),
    )


def _request(name: str, class_name: str, count: int) -> DeviceRequestBody:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": class_name,
            "allocationMode": ALLOCATION_MODE_EXACT_COUNT,
            "count": count,
        },
    }


def extended_resource_status_annotation(status: ExtendedResourceStatus) -> str:
    """The value of the pod annotation ``resource.draco.dev/extended-resource-claim-status``."""
    return json.dumps(status.to_json(), separators=(",", ":"), sort_keys=True)


def extended_resource_status(pod: PodBody) -> ExtendedResourceStatus | None:
    """The pod's recorded special claim, or None (no annotation, or an unreadable one)."""
    annotations = meta_of(pod).get("annotations") or {}
    raw = annotations.get(EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION)
    if not raw:
        return None
    try:
        data = json.loads(str(raw))
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("resourceClaimName"), str):
        return None
    mappings = []
    for entry in data.get("requestMappings") or []:
        if not isinstance(entry, dict):
            continue
        mappings.append(
            RequestMapping(
                str(entry.get("containerName", "")),
                str(entry.get("resourceName", "")),
                str(entry.get("requestName", "")),
            )
        )
    return ExtendedResourceStatus(data["resourceClaimName"], tuple(mappings))


def unserved_extended_resources(pod: PodBody, class_map: Mapping[str, str]) -> dict[str, str]:
    """The mapped extended resources (name -> class) of a pod draco does not serve: it
    asks for them, carries neither draco's gate (nor names draco as its scheduler) nor the record of a special claim, and is
    neither done nor being deleted. kube-scheduler counts its requests against the node's
    advertised capacity of those names all the same, so it holds capacity without devices."""
    meta = meta_of(pod)
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if (
        meta.get("deletionTimestamp")
        or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        or EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION in annotations
        or any(gate.get("name") == SCHEDULING_GATE for gate in spec.get("schedulingGates") or [])
        or spec.get("schedulerName") in (SCHEDULER_NAME, DEMAND_SCHEDULER)
    ):
        # (A demand pod is never bound: it asks autoscalers for a node, `demand.py`.)
        return {}
    found: dict[str, str] = {}
    for container in pod_requests(spec).containers:
        for name, amount in container.requests.items():
            if name in class_map and _count(amount) > 0:
                found[name] = class_map[name]
    return dict(sorted(found.items()))
