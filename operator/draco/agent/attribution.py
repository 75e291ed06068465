"""Which container of which pod holds which device draco prepared on this node.

The kubelet answers that question for the devices it prepared (its PodResources API);
draco's devices are prepared by the agent, so the agent answers it for them: for each
pod on its node that is not done, for each of its containers (the regular ones and the
restartable init containers, as the kubelet lists them), the claims given to that
container — as the NRI injection gives them (`draco.agent.injection`): the claims of the
`resource.draco.dev/claims` annotation naming the container or naming none, narrowed to
the requests a `{name, request}` entry names, plus the requests of the special
extended-resource claim mapped to it — resolved to claim names, reserved for the pod
(the kubelet's rule) and prepared here, and the devices prepared for them.

`pod_devices` is pure: the agent hands it the pod, a lookup of claims by name and what
its checkpoint says was prepared for a claim. The PodResources server
(`draco.agent.podresources`) and the `draco_device_allocation` metric read its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from draco.api.bodies import ResourceClaimBody
from draco.api.constants import CLAIMS_ANNOTATION
from draco.api.corebodies import PodBody
from draco.errors import ClaimNotCreatedError, DracoError
from draco.scheduling.extendedresources import SPECIAL_CLAIM_PLACEHOLDER, extended_resource_status
from draco.scheduling.podclaims import (
    PodClaim,
    is_controlled_by_pod,
    is_pod_done,
    is_reserved_for,
    parse_claims_annotation,
    resolve_claim,
)

__all__ = [
    "AttributedClaim",
    "AttributedDevice",
    "ContainerDevices",
    "PodDevices",
    "container_claims",
    "container_names",
    "pod_devices",
]


@dataclass(frozen=True)
class AttributedDevice:
    """One device prepared for a claim on this node."""

    driver: str
    pool: str
    device: str
    #: The request it was allocated for (``<request>`` or ``<request>/<subrequest>``).
    request: str
    share_id: str | None = None
    #: Its CDI device IDs, fully qualified (``vendor.com/class=name``).
    cdi_device_ids: tuple[str, ...] = ()
    #: Its ``uuid`` attribute, when it has one (NVIDIA's GPUs and MIG devices do).
    uuid: str | None = None
    #: The extended resource name and device ID a device plugin would report it under
    #: (``nvidia.com/gpu``, ``GPU-<uuid>``), when its driver names one.
    plugin_id: tuple[str, str] | None = None


@dataclass(frozen=True)
class AttributedClaim:
    namespace: str
    name: str
    devices: tuple[AttributedDevice, ...]


@dataclass(frozen=True)
class ContainerDevices:
    name: str
    claims: tuple[AttributedClaim, ...] = ()


@dataclass(frozen=True)
class PodDevices:
    namespace: str
    name: str
    uid: str
    containers: tuple[ContainerDevices, ...]

    def devices(self) -> Iterator[tuple[str, AttributedClaim, AttributedDevice]]:
        """(container, claim, device) for every device of every container."""
        for container in self.containers:
            for claim in container.claims:
                for device in claim.devices:
                    yield container.name, claim, device


#: The claim ``namespace/name`` as the agent knows it, or None.
ClaimLookup = Callable[[str, str], Mapping[str, Any] | None]
#: What was prepared on this node for a claim; None when nothing was (or not yet completely).
PreparedLookup = Callable[[Mapping[str, Any]], Sequence[AttributedDevice] | None]


def container_names(pod: Mapping[str, Any]) -> list[str]:
    """The containers the kubelet lists for a pod: restartable init containers (sidecars,
    ``restartPolicy: Always``), then the regular ones."""
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    return [str(c.get("name")) for c in (*sidecars, *(spec.get("containers") or ()))]


def container_claims(annotations: Mapping[str, str], container: str) -> list[PodClaim]:
    """The pod's claims given to `container` (see the module docstring); raises
    `DracoError` when the claims annotation cannot be read."""
    raw = annotations.get(CLAIMS_ANNOTATION)
    given = [c for c in parse_claims_annotation(raw) if c.gives_to(container)] if raw else []
    extended = extended_resource_status({"metadata": {"annotations": dict(annotations)}})
    requests = extended.requests_of(container) if extended is not None else []
    if extended is not None and requests:
        given.append(
            PodClaim(
                name=SPECIAL_CLAIM_PLACEHOLDER,
                resource_claim_name=extended.resource_claim_name,
                containers=tuple(container for _ in requests),
                container_requests=tuple((container, r) for r in requests),
            )
        )
    return given


def _claim_of(pod: Mapping[str, Any], pod_claim: PodClaim, claims: ClaimLookup) -> Mapping[str, Any] | None:
    """The claim a pod claim resolves to, when it exists and is this pod's to use."""
    try:
        resolved = resolve_claim(pod, pod_claim)
    except ClaimNotCreatedError:
        return None
    if resolved.claim_name is None:
        return None
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    claim = claims(namespace, resolved.claim_name)
    if claim is None:
        return None
    typed_claim, typed_pod = cast(ResourceClaimBody, claim), cast(PodBody, pod)
    check_owner = resolved.check_owner or pod_claim.name == SPECIAL_CLAIM_PLACEHOLDER
    if check_owner and not is_controlled_by_pod(typed_claim, typed_pod):
        return None
    return claim if is_reserved_for(typed_claim, typed_pod) else None


def pod_devices(
    pod: Mapping[str, Any], *, claims: ClaimLookup, prepared: PreparedLookup
) -> PodDevices | None:
    """What each container of `pod` holds of draco's devices prepared here; None for a
    pod that is done (the kubelet lists active pods only)."""
    meta = pod.get("metadata") or {}
    if is_pod_done(cast(PodBody, pod)):
        return None
    annotations = meta.get("annotations") or {}
    containers: list[ContainerDevices] = []
    for name in container_names(pod):
        try:
            given = container_claims(annotations, name)
        except DracoError:
            given = []  # the operator reports a broken annotation on the pod
        held: list[AttributedClaim] = []
        for pod_claim in given:
            claim = _claim_of(pod, pod_claim, claims)
            devices = prepared(claim) if claim is not None else None
            if claim is None or not devices:
                continue
            requests = pod_claim.requests_for(name)
            if requests is not None:
                devices = [d for d in devices if d.request.split("/", 1)[0] in requests]
            claim_meta = claim.get("metadata") or {}
            held.append(
                AttributedClaim(
                    namespace=str(claim_meta.get("namespace") or ""),
                    name=str(claim_meta.get("name") or ""),
                    devices=tuple(devices),
                )
            )
        containers.append(ContainerDevices(name=name, claims=tuple(held)))
    return PodDevices(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        containers=tuple(containers),
    )
