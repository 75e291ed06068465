"""`draco webhook`'s admission decisions as Kopf admission handlers.

Each webhook of draco's configurations (`draco.webhook.configuration`) is one handler id;
the server (`draco.webhook.app`) hands Kopf each request with the id of the path it came
to, so exactly that handler answers it:

    /validate               "validate"          the five kinds, ResourcePoolStatusRequests and
                                                the status of claims, taint rules and pool
                                                status requests: the API server's rules; a
                                                claim being created is charged to device quota
    /validate-quota         "validate-quota"    claims being created by exempt users (the
                                                operator's): device quota only
    /mutate                 "mutate"            defaults and `timeAdded`
    /mutate-pods            "mutate-pods"       the scheduling gate, extended resources
    /mutate-pods/translate  "mutate-pods-translate"  ... and the native pod shape translated
    /mutate-workloads       "mutate-workloads"  native claims of workloads' pod templates
    /validate-agent-events  "validate-agent-events"  a node agent's Events: only about its
                                                node's pods and claims (`agentevents`)

A refusal is `kopf.AdmissionError` with the status code upstream answers (422 Invalid for a
broken rule, 403 Forbidden past a quota); the server adds the reason that goes with the
code. Every decision is made by the pure layers (`draco.validation`, `draco.api.quota`) and
`draco.webhook.admission`/`podadmission`/`quota`; a handler only reads the request's parts
and writes the answer. What a handler needs besides the request (the namespace reader,
the quota charger, the DeviceClass cache, the reader of agents' objects) is on Kopf's memo, put there by `draco.webhook.cli`.

The handlers are registered on :data:`REGISTRY`, the registry `draco webhook` runs Kopf
with (only this process serves admission).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import jsonpatch
import kopf

from draco.api.constants import (
    GROUP,
    PLURAL_DEVICE_CLASSES,
    PLURAL_DEVICE_TAINT_RULES,
    PLURAL_POD_GROUPS,
    PLURAL_RESOURCE_CLAIM_TEMPLATES,
    PLURAL_RESOURCE_CLAIMS,
    PLURAL_RESOURCE_POOL_STATUS_REQUESTS,
    PLURAL_RESOURCE_SLICES,
    PLURAL_WORKLOADS,
    SCHEDULING_GROUP,
    SCHEDULING_VERSION,
)
from draco.webhook.admission import admission_verdict, admission_warnings, defaulted_spec
from draco.webhook.agentevents import Reader, agent_event_refusal
from draco.webhook.podadmission import ClassCache, pod_operations, workload_operations
from draco.webhook.quota import QuotaCharger

__all__ = [
    "MUTATE",
    "MUTATE_PODS",
    "MUTATE_PODS_TRANSLATE",
    "MUTATE_WORKLOADS",
    "REGISTRY",
    "VALIDATE",
    "VALIDATE_AGENT_EVENTS",
    "VALIDATE_QUOTA",
]

#: The registry `draco webhook` runs Kopf with.
REGISTRY: Final = kopf.OperatorRegistry()

VALIDATE: Final = "validate"
VALIDATE_QUOTA: Final = "validate-quota"
VALIDATE_AGENT_EVENTS: Final = "validate-agent-events"
MUTATE: Final = "mutate"
MUTATE_PODS: Final = "mutate-pods"
MUTATE_PODS_TRANSLATE: Final = "mutate-pods-translate"
MUTATE_WORKLOADS: Final = "mutate-workloads"

#: Invalid (422) and Forbidden (403), as the API server answers a broken rule and a quota.
INVALID: Final = 422
FORBIDDEN: Final = 403

_WRITES: Final = ("CREATE", "UPDATE")


def draco_kinds(*plurals: str) -> Callable[[kopf.Resource], bool]:
    """Kopf's resource filter for draco's kinds named by `plurals`, in every version served:
    the API server asks about an object in the version it was written in (without a
    version, Kopf's selectors would match only the preferred one)."""
    wanted = frozenset(plurals)

    def matches(resource: kopf.Resource) -> bool:
        return resource.group == GROUP and resource.plural in wanted

    return matches


def _raw(body: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Kopf's read-only view of an object as the plain mapping the decisions read."""
    return None if body is None else dict(body)


async def _charge(memo: kopf.Memo, body: Mapping[str, Any], *, dryrun: bool) -> None:
    quota: QuotaCharger | None = memo.get("quota")
    if quota is None:
        return
    refusal = await quota.refusal(dict(body), dry_run=dryrun)
    if refusal is not None:
        raise kopf.AdmissionError(refusal, code=FORBIDDEN)


@kopf.on.validate(
    draco_kinds(PLURAL_DEVICE_CLASSES, PLURAL_RESOURCE_CLAIMS, PLURAL_RESOURCE_CLAIM_TEMPLATES,
                PLURAL_RESOURCE_SLICES, PLURAL_DEVICE_TAINT_RULES, PLURAL_RESOURCE_POOL_STATUS_REQUESTS),
    id=VALIDATE, operations=_WRITES, registry=REGISTRY,
)  # fmt: skip
@kopf.on.validate(
    draco_kinds(PLURAL_RESOURCE_CLAIMS, PLURAL_DEVICE_TAINT_RULES, PLURAL_RESOURCE_POOL_STATUS_REQUESTS),
    id=VALIDATE, subresource="status", operations=["UPDATE"], registry=REGISTRY,
)  # fmt: skip
@kopf.on.validate(
    SCHEDULING_GROUP, SCHEDULING_VERSION, PLURAL_WORKLOADS, id=VALIDATE, operations=_WRITES, registry=REGISTRY
)
@kopf.on.validate(
    SCHEDULING_GROUP,
    SCHEDULING_VERSION,
    PLURAL_POD_GROUPS,
    id=VALIDATE,
    operations=_WRITES,
    registry=REGISTRY,
)
async def validate(
    body: kopf.Body,
    subresource: str | None,
    dryrun: bool,
    memo: kopf.Memo,
    warnings: list[str],
    old: kopf.Body | None = None,
    operation: str | None = None,
    **_: Any,
) -> None:
    """The API server's rules for the object as the user wrote it, and its warnings; a
    claim being created is then charged to its namespace's device quota."""
    raw = dict(body)
    message = await admission_verdict(
        raw,
        old=_raw(old) if operation == "UPDATE" else None,
        subresource=subresource,
        namespace_labels=memo.get("namespace_labels"),
    )
    if message is not None:
        raise kopf.AdmissionError(message, code=INVALID)
    warnings.extend(admission_warnings(raw, subresource=subresource))
    if raw.get("kind") == "ResourceClaim" and operation == "CREATE" and not subresource:
        await _charge(memo, raw, dryrun=dryrun)


@kopf.on.validate(
    draco_kinds(PLURAL_RESOURCE_CLAIMS), id=VALIDATE_QUOTA, operations=["CREATE"], registry=REGISTRY
)
async def validate_quota(
    body: kopf.Body,
    subresource: str | None,
    dryrun: bool,
    memo: kopf.Memo,
    operation: str | None = None,
    **_: Any,
) -> None:
    """Device quota alone, for the claims of users exempt from validation (the operator's
    claims from templates, whose specs were validated when the templates were written)."""
    if operation == "CREATE" and not subresource:
        await _charge(memo, body, dryrun=dryrun)


@kopf.on.validate(
    "events.k8s.io", "v1", "events", id=VALIDATE_AGENT_EVENTS, operations=_WRITES, registry=REGISTRY
)
async def validate_agent_event(
    body: kopf.Body, userinfo: Mapping[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    """A node agent's Event: only about a pod on its node or a claim allocated to it."""
    read: Reader | None = memo.get("agent_objects")
    if read is None:
        raise kopf.AdmissionError("this webhook does not read agents' objects", code=FORBIDDEN)
    refusal = await agent_event_refusal(dict(body), userinfo=userinfo, read=read)
    if refusal is not None:
        raise kopf.AdmissionError(refusal, code=FORBIDDEN)


@kopf.on.mutate(
    draco_kinds(PLURAL_RESOURCE_CLAIMS, PLURAL_RESOURCE_CLAIM_TEMPLATES, PLURAL_RESOURCE_SLICES,
                PLURAL_DEVICE_TAINT_RULES),
    id=MUTATE, operations=_WRITES, registry=REGISTRY,
)  # fmt: skip
def default(
    body: kopf.Body, patch: kopf.Patch, old: kopf.Body | None = None, operation: str | None = None, **_: Any
) -> None:
    """Upstream's write-time defaults and `timeAdded` of taints. Synchronous: Kopf runs it
    in a worker thread (a slice's defaults are built from its models, ~1 MiB of them)."""
    changes = defaulted_spec(dict(body), old=_raw(old) if operation == "UPDATE" else None)
    for key, value in changes.items():
        patch.spec[key] = value


def _apply(patch: kopf.Patch, operations: list[dict[str, Any]]) -> None:
    """Draco's JSONPatch `operations` as Kopf's patch (Kopf answers the difference they make)."""
    if operations:
        patch.fns.append(lambda raw: jsonpatch.apply_patch(raw, operations, in_place=True))


async def _mutate_pod(
    body: kopf.Body,
    old: kopf.Body | None,
    operation: str | None,
    patch: kopf.Patch,
    warnings: list[str],
    memo: kopf.Memo,
    *,
    translate: bool,
) -> None:
    classes: ClassCache = memo.get("device_classes") or ClassCache(None)
    operations, found = await pod_operations(
        dict(body),
        old=_raw(old),
        operation=operation,
        classes=classes,
        translate=translate,
        binding=memo.get("pod_binding") or "kube-scheduler",
    )
    warnings.extend(found)
    _apply(patch, operations)


@kopf.on.mutate("v1", "pods", id=MUTATE_PODS, operations=["CREATE"], registry=REGISTRY)
async def gate_pod(
    body: kopf.Body,
    patch: kopf.Patch,
    warnings: list[str],
    memo: kopf.Memo,
    old: kopf.Body | None = None,
    operation: str | None = None,
    **_: Any,
) -> None:
    """Draco's scheduling gate on a pod that names claims or asks for an extended resource
    a DeviceClass backs."""
    await _mutate_pod(body, old, operation, patch, warnings, memo, translate=False)


@kopf.on.mutate("v1", "pods", id=MUTATE_PODS_TRANSLATE, operations=_WRITES, registry=REGISTRY)
async def translate_pod(
    body: kopf.Body,
    patch: kopf.Patch,
    warnings: list[str],
    memo: kopf.Memo,
    old: kopf.Body | None = None,
    operation: str | None = None,
    **_: Any,
) -> None:
    """The gate, and the native `spec.resourceClaims` translated into draco's annotation."""
    await _mutate_pod(body, old, operation, patch, warnings, memo, translate=True)


@kopf.on.mutate("apps", "v1", "deployments", id=MUTATE_WORKLOADS, operations=_WRITES, registry=REGISTRY)
@kopf.on.mutate("apps", "v1", "replicasets", id=MUTATE_WORKLOADS, operations=_WRITES, registry=REGISTRY)
@kopf.on.mutate("apps", "v1", "statefulsets", id=MUTATE_WORKLOADS, operations=_WRITES, registry=REGISTRY)
@kopf.on.mutate("apps", "v1", "daemonsets", id=MUTATE_WORKLOADS, operations=_WRITES, registry=REGISTRY)
@kopf.on.mutate("batch", "v1", "jobs", id=MUTATE_WORKLOADS, operations=_WRITES, registry=REGISTRY)
@kopf.on.mutate("batch", "v1", "cronjobs", id=MUTATE_WORKLOADS, operations=_WRITES, registry=REGISTRY)
def translate_workload(
    body: kopf.Body, patch: kopf.Patch, warnings: list[str], operation: str | None = None, **_: Any
) -> None:
    """The native claims of a workload's pod template, translated as a pod's would be."""
    operations, found = workload_operations(str(body.get("kind", "")), dict(body), operation=operation)
    warnings.extend(found)
    _apply(patch, operations)
