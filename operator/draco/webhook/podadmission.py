"""What the pod-mutating webhook asks for besides the pod: the DeviceClasses it needs, read
through `draco.kube`, around `draco.webhook.pods.pod_patch` (and, for the workload
webhook, `draco.webhook.workloads.template_patch`); `draco.webhook.handlers` turns the
operations into Kopf's patch.

DeviceClasses are listed on demand and cached for `ttl` seconds (default 5): only a pod
that asks for a resource with a domain (`example.com/gpu`) needs them, and there is no
watch to keep alive in a process that otherwise only answers requests. A pod that asks
for a domain-qualified name the cache does not know is answered from a list started after
its request arrived, not from the cache: a DeviceClass created just before its pods (one
manifest, the pattern upstream's examples use) serves them. Concurrent requests share one
list (the lock; a list that started after a request arrived is fresh enough for it), so
the cost is one DeviceClass list per pod burst that names a resource no class backs
(a device plugin's `nvidia.com/gpu`, say). When the list fails, the pod is admitted
without the extended-resource gate (a warning is logged; the webhook never blocks pods).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp

from draco.api.quota import NO_CLASSES, QuotaNames
from draco.errors import KubeError
from draco.kube.client import DEVICE_CLASSES, Kube
from draco.logs import get_logger
from draco.scheduling.extendedresources import resource_class_map
from draco.webhook.pods import (
    PodBinding,
    changed_claims_warnings,
    native_claim_warnings,
    pod_patch,
    reapply_patch,
    requested_resource_names,
)
from draco.webhook.workloads import template_patch

__all__ = ["ClassCache", "pod_operations", "workload_operations"]

log = get_logger(__name__)


class ClassCache:
    """`await cache(names)`: extended resource name → DeviceClass name, at most `ttl` s
    old, and read after the call began when one of `names` is not in it."""

    def __init__(self, kube: Kube | None, *, ttl: float = 5.0) -> None:
        self.kube = kube
        self.ttl = ttl
        self._mapping: dict[str, str] = {}
        #: The classes' extended resource names, for device quota (read with the mapping).
        self.quota_names = NO_CLASSES
        #: When the list in the cache was started (monotonic).
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()
        #: Lists made (tests and logs).
        self.reads = 0

    async def __call__(self, names: Iterable[str] = ()) -> Mapping[str, str]:
        arrived = time.monotonic()
        async with self._lock:
            if self.kube is None:
                return self._mapping
            fresh = time.monotonic() - self._read_at < self.ttl
            missed = any("/" in name and name not in self._mapping for name in names)
            if fresh and not (missed and self._read_at < arrived):
                return self._mapping
            started = time.monotonic()
            try:
                classes = await self.kube.list(DEVICE_CLASSES)
            except (KubeError, aiohttp.ClientError, TimeoutError) as err:
                log.warning("Could not list DeviceClasses; extended resources not gated", error=str(err))
                return self._mapping
            self.reads += 1
            self._mapping = resource_class_map(classes)
            self.quota_names = QuotaNames.of(classes)
            self._read_at = started
            return self._mapping


async def pod_operations(
    body: Mapping[str, Any],
    *,
    old: Mapping[str, Any] | None,
    operation: str | None,
    classes: ClassCache,
    translate: bool,
    binding: PodBinding = "kube-scheduler",
) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSONPatch operations for a pod CREATE (and, where it translates, an UPDATE that
    re-applies the native claims it translated), and the warnings for the user: draco's
    gate (or scheduler name, with ``binding="draco"``) and the translation
    (`draco.webhook.pods`), or nothing."""
    if operation == "UPDATE":
        if not translate or old is None:
            return [], []
        return reapply_patch(body, old=old), changed_claims_warnings(body, old=old)
    if operation != "CREATE":
        return [], []
    # Only resource names with a domain can be extended resources backed by a class.
    mapping: Mapping[str, str] = {}
    names = requested_resource_names(body)
    if any("/" in name for name in names):
        mapping = await classes(names)
    warnings = native_claim_warnings(body) if translate else []
    if warnings:
        log.warning("Pod names native claims without a source", warnings=warnings)
    return pod_patch(body, extended_resources=mapping, translate=translate, binding=binding), warnings


def workload_operations(
    kind: str, body: Mapping[str, Any], *, operation: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """A workload's CREATE or UPDATE: its pod template's native claims translated
    (`draco.webhook.workloads`), and the warnings for the user."""
    if operation not in ("CREATE", "UPDATE"):
        return [], []
    ops, warnings = template_patch(kind, body)
    if warnings:
        log.warning("Pod template names native claims without a source", kind=kind, warnings=warnings)
    return ops, warnings
