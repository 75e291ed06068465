"""What a container being created gets from its pod's claims: the agent's NRI handler.

Draco's claims are not native, so the kubelet never hands them to the runtime; the
runtime asks the agent instead (NRI `CreateContainer`). For a container the agent

1. reads the pod's `resource.draco.dev/claims` annotation (the sandbox carries the pod's
   annotations) and keeps the claims given to this container — those whose `containers`
   names it, or that name no container at all; a container named there as
   `{name, request}` gets only the devices allocated for that request (upstream's
   `resources.claims[].request`); the special claim of extended resources comes from
   `resource.draco.dev/extended-resource-claim-status`, each container getting the devices
   of the requests mapped to it; a container given no claim gets nothing;
2. resolves each to a claim (by name, or through `resource.draco.dev/claim-statuses` for
   template claims) — from the agent's cache of its node's claims, or with one GET for a
   claim the cache does not have (allocated elsewhere, or not seen yet) — and requires it
   to be reserved for this pod (the kubelet refuses a pod its claims are not reserved for;
   so does the agent);
3. for the claims allocated from this node's pools, requires them to be prepared (the
   checkpoint says `PrepareCompleted`), waiting a moment for a prepare under way;
4. answers the union of the container edits of the claim's CDI devices, as the CDI spec
   files on disk say: environment, device nodes (type and numbers from the spec or from
   the host's device file), mounts (the KEP-5304 metadata files among them) and hooks.

A missing piece is an error, and the runtime fails the container's creation with its
message; the kubelet retries with back-off, so a container never starts without the
devices its pod was given.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from draco.agent.attribution import container_claims
from draco.agent.cdi import spec_path
from draco.agent.checkpoint import PREPARE_COMPLETED
from draco.agent.metrics import NRI_ADJUSTMENTS
from draco.agent.nri import Adjustment, Container, DeviceNode, Hook, Mount, PodSandbox
from draco.agent.nri.messages import HOOK_STAGES
from draco.agent.prepare import NodePreparer
from draco.api.bodies import ResourceClaimBody
from draco.api.constants import CLAIMS_ANNOTATION
from draco.api.corebodies import PodBody
from draco.errors import AgentError, DracoError
from draco.logs import get_logger
from draco.scheduling.extendedresources import SPECIAL_CLAIM_PLACEHOLDER
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaim,
    is_controlled_by_pod,
    is_reserved_for,
    resolve_claim,
)

__all__ = ["ClaimInjector", "adjustment_from_cdi", "claims_for_container"]

log = get_logger(__name__)

#: How often a claim that is not reserved or prepared yet is looked at again.
_POLL: Final = 0.05

ClaimLookup = Callable[[str, str], Mapping[str, Any] | None]
ClaimFetch = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]


def claims_for_container(pod_claims: Sequence[PodClaim], container: str) -> list[PodClaim]:
    """The pod's claims given to `container`: those naming it, and those naming none."""
    return [c for c in pod_claims if c.gives_to(container)]


def _device_node(raw: Mapping[str, Any]) -> DeviceNode:
    path = str(raw["path"])
    host = str(raw.get("hostPath") or path)
    kind, major, minor = raw.get("type"), raw.get("major"), raw.get("minor")
    mode = raw.get("fileMode")
    if kind is None or major is None or (minor is None and kind != "p") or mode is None:
        try:
            st = os.stat(host)
        except OSError as exc:
            raise AgentError(f"device node {host} is not on the node: {exc.strerror}") from exc
        if kind is None:
            if stat.S_ISCHR(st.st_mode):
                kind = "c"
            elif stat.S_ISBLK(st.st_mode):
                kind = "b"
            else:
                raise AgentError(f"{host} is not a device node")
        if major is None:
            major = os.major(st.st_rdev)
        if minor is None:
            minor = os.minor(st.st_rdev)
        if mode is None:
            mode = stat.S_IMODE(st.st_mode)
    return DeviceNode(
        path=path,
        type=str(kind),
        major=int(major),
        minor=int(minor or 0),
        file_mode=int(mode),
        uid=int(raw["uid"]) if raw.get("uid") is not None else None,
        gid=int(raw["gid"]) if raw.get("gid") is not None else None,
    )


def _mount(raw: Mapping[str, Any]) -> Mount:
    options = tuple(str(o) for o in raw.get("options") or ())
    kind = str(raw.get("type") or "bind")
    if kind == "bind" and "bind" not in options and "rbind" not in options:
        options = (*options, "bind")
    return Mount(
        destination=str(raw["containerPath"]), source=str(raw["hostPath"]), type=kind, options=options
    )


def _hook(raw: Mapping[str, Any]) -> tuple[str, Hook]:
    name = str(raw.get("hookName") or "")
    if name not in HOOK_STAGES:
        raise AgentError(f"CDI hook {raw.get('path')!r} has unknown hookName {name!r}")
    timeout = raw.get("timeout")
    return HOOK_STAGES[name], Hook(
        path=str(raw["path"]),
        args=tuple(str(a) for a in raw.get("args") or ()),
        env=tuple(str(e) for e in raw.get("env") or ()),
        timeout=int(timeout) if timeout is not None else None,
    )


def adjustment_from_cdi(edits: Iterable[Mapping[str, Any]]) -> Adjustment:
    """One adjustment from CDI `containerEdits` objects, applied in order: a later
    variable of the same name wins, a later mount or device node on the same path wins."""
    env: dict[str, str] = {}
    devices: dict[str, DeviceNode] = {}
    mounts: dict[str, Mount] = {}
    hooks: list[tuple[str, Hook]] = []
    for edit in edits:
        for item in edit.get("env") or ():
            key, sep, value = str(item).partition("=")
            if not sep:
                raise AgentError(f"CDI env entry {item!r} is not NAME=VALUE")
            env.pop(key, None)
            env[key] = value
        for raw in edit.get("deviceNodes") or ():
            node = _device_node(raw)
            devices.pop(node.path, None)
            devices[node.path] = node
        for raw in edit.get("mounts") or ():
            mount = _mount(raw)
            mounts.pop(mount.destination, None)
            mounts[mount.destination] = mount
        hooks.extend(_hook(raw) for raw in edit.get("hooks") or ())
    return Adjustment(
        env=tuple(env.items()),
        devices=tuple(devices.values()),
        mounts=tuple(mounts.values()),
        hooks=tuple(hooks),
    )


def _read_spec(path: Path) -> Mapping[str, Any]:
    try:
        spec = json.loads(path.read_text())
    except OSError as exc:
        raise AgentError(f"CDI spec {path} is missing: {exc.strerror}") from exc
    except ValueError as exc:
        raise AgentError(f"CDI spec {path} is not JSON: {exc}") from exc
    if not isinstance(spec, Mapping):
        raise AgentError(f"CDI spec {path} is not a JSON object")
    return spec


@dataclass
class ClaimInjector:
    """The agent's `NriHandler` for the one node whose runtime it is connected to."""

    preparer: NodePreparer
    #: The claim `namespace/name` as the agent's cache has it, or None.
    lookup: ClaimLookup
    #: Set once the agent's claim cache is filled (after a restart it starts empty).
    synced: asyncio.Event
    #: The claim as the API server has it, or None when it does not exist (for claims the
    #: cache lacks); None here: a claim the cache lacks does not exist.
    fetch: ClaimFetch | None = None
    #: How long to wait for a claim to become reserved and prepared before failing.
    wait_seconds: float = 1.0

    async def synchronize(self, pods: Sequence[PodSandbox], containers: Sequence[Container]) -> None:
        with_claims = sum(1 for p in pods if CLAIMS_ANNOTATION in p.annotations)
        log.info("NRI synchronized", pods=len(pods), containers=len(containers), pods_with_claims=with_claims)

    async def create_container(self, pod: PodSandbox, container: Container) -> Adjustment | None:
        try:
            adjust = await self._adjustment(pod, container)
        except AgentError as exc:
            NRI_ADJUSTMENTS.labels(result="error").inc()
            log.warning(
                "Refusing to create a container without its devices",
                pod=f"{pod.namespace}/{pod.name}",
                container=container.name,
                error=str(exc),
            )
            raise
        NRI_ADJUSTMENTS.labels(result="injected" if adjust else "none").inc()
        return adjust

    async def _adjustment(self, pod: PodSandbox, container: Container) -> Adjustment | None:
        where = f"pod {pod.namespace}/{pod.name}"
        try:
            given = container_claims(pod.annotations, container.name)
        except DracoError as exc:
            raise AgentError(f"{where}: {exc}") from exc
        if not given:
            return None
        deadline = time.monotonic() + self.wait_seconds
        try:
            await asyncio.wait_for(self.synced.wait(), max(deadline - time.monotonic(), 0.001))
        except TimeoutError as exc:
            raise AgentError("the agent has not listed the claims yet") from exc
        pod_obj = {
            "metadata": {
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
                "annotations": pod.annotations,
            }
        }
        edits: list[Mapping[str, Any]] = []
        injected: list[str] = []
        for pod_claim in given:
            try:
                resolved = resolve_claim(pod_obj, pod_claim)
            except ClaimNotCreatedError as exc:
                raise AgentError(str(exc)) from exc
            if resolved.claim_name is None:
                continue
            claim = await self._ready_claim(
                pod_obj,
                pod.namespace,
                resolved.claim_name,
                check_owner=resolved.check_owner or pod_claim.name == SPECIAL_CLAIM_PLACEHOLDER,
                deadline=deadline,
            )
            if claim is None:
                continue
            edits.extend(self._claim_edits(claim, requests=pod_claim.requests_for(container.name)))
            injected.append(resolved.claim_name)
        if not edits:
            return None
        adjust = adjustment_from_cdi(edits)
        log.info(
            "Injecting devices into a container",
            pod=f"{pod.namespace}/{pod.name}",
            container=container.name,
            claims=injected,
            env=len(adjust.env),
            devices=len(adjust.devices),
            mounts=len(adjust.mounts),
        )
        return adjust

    async def _ready_claim(
        self, pod: Mapping[str, Any], namespace: str, name: str, *, check_owner: bool, deadline: float
    ) -> Mapping[str, Any] | None:
        """The claim once it is reserved for the pod and prepared here; None when none of
        its devices are this node's; raises when that is not so by the deadline."""
        key = f"{namespace}/{name}"
        fetched: Mapping[str, Any] | None = None
        while True:
            claim = self.lookup(namespace, name)
            if claim is None and fetched is None and self.fetch is not None:
                fetched = await self.fetch(namespace, name)
            claim = claim or fetched
            problem = self._problem(claim, pod, key, check_owner=check_owner)
            if problem is None:
                assert claim is not None
                return claim if self.preparer.my_results(claim) else None
            if time.monotonic() >= deadline:
                raise AgentError(problem)
            await asyncio.sleep(_POLL)

    def _problem(
        self, claim: Mapping[str, Any] | None, pod: Mapping[str, Any], key: str, *, check_owner: bool
    ) -> str | None:
        node = self.preparer.node
        if claim is None:
            return f"claim {key} does not exist"
        # The agent reads these bodies untyped: seen as the operator's typed views here.
        typed_claim, typed_pod = cast(ResourceClaimBody, claim), cast(PodBody, pod)
        if check_owner and not is_controlled_by_pod(typed_claim, typed_pod):
            return f"claim {key} was not generated for this pod"
        if not is_reserved_for(typed_claim, typed_pod):
            return f"claim {key} is not reserved for this pod"
        if not self.preparer.my_results(claim):
            return None
        record = self.preparer.checkpoint.get(str(claim["metadata"]["uid"]))
        if record is None or record.state != PREPARE_COMPLETED:
            return f"claim {key} is not prepared on node {node} yet"
        return None

    def _claim_edits(
        self, claim: Mapping[str, Any], *, requests: frozenset[str] | None = None
    ) -> list[Mapping[str, Any]]:
        """The CDI edits of the claim's devices here; with ``requests``, only of the devices
        allocated for those requests (``<req>`` covers ``<req>/<subrequest>``)."""
        uid = str(claim["metadata"]["uid"])
        record = self.preparer.checkpoint.get(uid)
        assert record is not None
        wanted: dict[str, list[str]] = {}
        for device in record.devices:
            if requests is not None and device.request.split("/", 1)[0] not in requests:
                continue
            for cdi_id in device.cdi_device_ids:
                names = wanted.setdefault(device.driver, [])
                name = cdi_id.split("=", 1)[1]
                if name not in names:
                    names.append(name)
        edits: list[Mapping[str, Any]] = []
        for driver, names in wanted.items():
            path = spec_path(self.preparer.cdi_dir, driver=driver, claim_uid=uid)
            spec = _read_spec(path)
            if spec.get("containerEdits"):
                edits.append(spec["containerEdits"])
            by_name = {str(d.get("name")): d for d in spec.get("devices") or ()}
            for name in names:
                entry = by_name.get(name)
                if entry is None:
                    raise AgentError(f"CDI spec {path} has no device {name}")
                edits.append(entry.get("containerEdits") or {})
        return edits
