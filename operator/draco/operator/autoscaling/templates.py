"""The node templates of the cluster, read when a demand is decided (a few seconds cached).

Karpenter's NodePools that carry ``autoscaling.resource.draco.dev/devices`` and the
ConfigMaps of draco's namespace labelled ``autoscaling.resource.draco.dev/node-template``
(`draco.scheduling.nodetemplates`). They are few and change rarely, so they are listed
when asked for rather than watched (a cluster without Karpenter has no NodePool kind to
watch). A template that cannot be read is used not at all: a Warning Event
``InvalidNodeTemplate`` on its object says why (once per version of it), and the log.
"""

from __future__ import annotations

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

__all__ = ["CONFIG_MAPS", "NODE_POOLS", "REASON_INVALID_TEMPLATE", "Templates"]

log = get_logger(__name__)

NODE_POOLS: Final = Resource("karpenter.sh", "v1", "nodepools", "NodePool", False)
CONFIG_MAPS: Final = Resource("", "v1", "configmaps", "ConfigMap", True)
REASON_INVALID_TEMPLATE: Final = "InvalidNodeTemplate"
#: How long one reading of the templates is reused.
TTL_S: Final = 5.0


@dataclass
class Templates:
    kube: Kube
    namespace: str
    clock: Any = time.monotonic
    _read_at: float = -1e9
    _cached: list[NodeTemplate] = field(default_factory=list)
    #: ``kind/name`` -> the resourceVersion whose refusal was told.
    _told: dict[str, str] = field(default_factory=dict)

    async def current(self, classes: Sequence[Mapping[str, Any]]) -> list[NodeTemplate]:
        """Every usable template, NodePools first, each in name order."""
        now = self.clock()
        if now - self._read_at < TTL_S:
            return self._cached
        templates: list[NodeTemplate] = []
        for pool in sorted(await self._list(NODE_POOLS), key=_name):
            template = await self._read(pool, lambda obj: from_nodepool(obj))
            if template is not None:
                per_node = template_resources(template, classes)
                templates.append(nodepool_headroom(template, pool, per_node))
        selector = f"{TEMPLATE_LABEL}=true"
        for config_map in sorted(await self._list(CONFIG_MAPS, label_selector=selector), key=_name):
            template = await self._read(config_map, _from_config_map)
            if template is not None:
                templates.append(template)
        self._cached, self._read_at = templates, now
        return templates

    async def _list(self, resource: Resource, *, label_selector: str | None = None) -> list[Obj]:
        try:
            return await self.kube.list(
                resource,
                namespace=self.namespace if resource.namespaced else None,
                label_selector=label_selector,
            )
        except KubeError as exc:
            if resource is not NODE_POOLS:  # no Karpenter: no NodePool kind served
                log.warning("Could not list node templates", kind=resource.kind, error=str(exc))
            return []

    async def _read(self, obj: Obj, read: Any) -> NodeTemplate | None:
        meta = obj.get("metadata") or {}
        key = f"{obj.get('kind', '')}/{meta.get('namespace', '')}/{meta.get('name', '')}"
        try:
            template: NodeTemplate | None = read(obj)
        except NodeTemplateError as exc:
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
