"""The node templates of the cluster, read when a demand is decided.

Karpenter's NodePools that carry ``autoscaling.resource.draco.dev/devices`` and the
ConfigMaps of draco's namespace labelled ``autoscaling.resource.draco.dev/node-template``
(`draco.scheduling.nodetemplates`); one being deleted is none (Karpenter launches nothing
from a NodePool going away). They are few and change rarely, so they are listed when
asked for rather than watched (a cluster without Karpenter has no NodePool kind to
watch), at most once a second: a pod's first decision waits for a reading begun after
its report (a template made before the pod is always seen), later ones take a reading up
to :data:`TTL_S` old. A template that cannot be read is used not at all: a Warning Event
``InvalidNodeTemplate`` on its object says why (once per version of it), and the log; its
node group is then one draco asks nothing of (the pods that no other template takes say
so in their ``NotTriggerScaleUp`` Event), never one it asks of blindly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from draco.errors import KubeError
from draco.kube.client import Kube, Obj, Resource
from draco.logs import get_logger
from draco.scheduling.nodetemplates import (
    TEMPLATE_KEY,
    TEMPLATE_LABEL,
    NodeTemplate,
    NodeTemplateError,
    from_nodepool,
    nodepool_headroom,
    parse_template,
    template_resources,
)

__all__ = ["CONFIG_MAPS", "NODE_POOLS", "REASON_INVALID_TEMPLATE", "TemplateSet", "Templates"]

log = get_logger(__name__)

NODE_POOLS: Final = Resource("karpenter.sh", "v1", "nodepools", "NodePool", False)
CONFIG_MAPS: Final = Resource("", "v1", "configmaps", "ConfigMap", True)
REASON_INVALID_TEMPLATE: Final = "InvalidNodeTemplate"
#: How long one reading of the templates is reused when no newer one is asked for.
TTL_S: Final = 5.0
#: The least time between two readings (a burst of new pods shares one).
MIN_INTERVAL_S: Final = 1.0


@dataclass(frozen=True)
class TemplateSet:
    """The cluster's node templates: those usable, and why each of the others is refused."""

    usable: tuple[NodeTemplate, ...] = ()
    #: One message per template that could not be read (what its Event says).
    invalid: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        """Whether any node group has a template (then only templates are asked of)."""
        return bool(self.usable or self.invalid)


@dataclass
class Templates:
    kube: Kube
    namespace: str
    clock: Any = time.monotonic
    #: When the cached reading began (``clock()``).
    _read_at: float = -1e9
    _cached: TemplateSet = field(default_factory=TemplateSet)
    #: ``kind/name`` -> the resourceVersion whose refusal was told.
    _told: dict[str, str] = field(default_factory=dict)
    _reading: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def current(
        self, classes: Sequence[Mapping[str, Any]], *, not_before: float | None = None
    ) -> TemplateSet:
        """Every template, NodePools first, each in name order, from a reading begun at
        ``not_before`` or later (default: up to TTL_S ago)."""
        async with self._reading:
            since = self.clock() - TTL_S if not_before is None else not_before
            if self._read_at >= since:
                return self._cached
            await asyncio.sleep(max(0.0, self._read_at + MIN_INTERVAL_S - self.clock()))
            started = self.clock()
            self._cached = await self._read_all(classes)
            self._read_at = started
            return self._cached

    async def _read_all(self, classes: Sequence[Mapping[str, Any]]) -> TemplateSet:
        usable: list[NodeTemplate] = []
        invalid: list[str] = []
        for pool in sorted(await self._list(NODE_POOLS), key=_name):
            template = await self._read(pool, lambda obj: from_nodepool(obj), invalid)
            if template is not None:
                per_node = template_resources(template, classes)
                usable.append(nodepool_headroom(template, pool, per_node))
        selector = f"{TEMPLATE_LABEL}=true"
        for config_map in sorted(await self._list(CONFIG_MAPS, label_selector=selector), key=_name):
            template = await self._read(config_map, _from_config_map, invalid)
            if template is not None:
                usable.append(template)
        return TemplateSet(usable=tuple(usable), invalid=tuple(invalid))

    async def _list(self, resource: Resource, *, label_selector: str | None = None) -> list[Obj]:
        try:
            listed = await self.kube.list(
                resource,
                namespace=self.namespace if resource.namespaced else None,
                label_selector=label_selector,
            )
            return [obj for obj in listed if not (obj.get("metadata") or {}).get("deletionTimestamp")]
        except KubeError as exc:
            if resource is not NODE_POOLS:  # no Karpenter: no NodePool kind served
                log.warning("Could not list node templates", kind=resource.kind, error=str(exc))
            return []

    async def _read(self, obj: Obj, read: Any, invalid: list[str]) -> NodeTemplate | None:
        """``obj``'s template, or None (none, or refused: its message added to ``invalid``)."""
        meta = obj.get("metadata") or {}
        key = f"{obj.get('kind', '')}/{meta.get('namespace', '')}/{meta.get('name', '')}"
        try:
            template: NodeTemplate | None = read(obj)
        except NodeTemplateError as exc:
            invalid.append(str(exc))
            version = str(meta.get("resourceVersion", ""))
            if self._told.get(key) != version:
                self._told[key] = version
                log.warning("Node template refused", object=key, error=str(exc))
                await self.kube.emit_event(
                    obj,
                    reason=REASON_INVALID_TEMPLATE,
                    message=f"{exc}; the template is not used until it is fixed",
                )
            return None
        self._told.pop(key, None)
        return template


def _from_config_map(config_map: Obj) -> NodeTemplate:
    meta = config_map.get("metadata") or {}
    source = f"ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}"
    text = (config_map.get("data") or {}).get(TEMPLATE_KEY)
    if text is None:
        raise NodeTemplateError(f"{source} is invalid: data.{TEMPLATE_KEY} is missing")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise NodeTemplateError(f"{source} is invalid: data.{TEMPLATE_KEY} is not YAML: {exc}") from None
    try:
        return parse_template(document, source=source)
    except NodeTemplateError as exc:
        raise NodeTemplateError(f"{source}: {exc}") from None


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))
