"""``draco simulate --node-template FILE``: would the pods fit a new node of a node group?

Each template (`draco.scheduling.nodetemplates`: the NodeTemplate document a node-template
ConfigMap holds) becomes one new, empty node of its group: a Node with the template's
labels, taints and allocatable, and the template's devices as its ResourceSlices. The
input's own nodes and their node-local slices are set aside (the question is about a new
node); DeviceClasses, claims, pods and slices that reach every node are kept. Then the
pods are placed as ``draco simulate`` always places them, with every rule of
kube-scheduler's profile: each unit's line names the template's node it fits
(``new-<template>``), or says why it fits none.

``--template-resources`` prints instead, per template, the extended resources such a node
would carry once draco's agent published its devices (per DeviceClass of the input, the
names the operator advertises), and how to tell them to the autoscalers: the
cluster-autoscaler node-group tags (``k8s.io/cluster-autoscaler/node-template/resources/...``)
and the ``resources`` of a Karpenter kwok instance type or the ``capacity`` of a NodeOverlay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from draco.api import ResourceSlice, load_object
from draco.errors import InvalidObjectError
from draco.scheduling.nodetemplates import NodeTemplate, NodeTemplateError, parse_template, template_resources
from draco.tools.simulation.inputs import InputError, Objects, read

__all__ = ["CA_RESOURCE_TAG", "apply_templates", "load_templates", "resources_document"]

#: cluster-autoscaler's node-group tag for a resource a new node would have.
CA_RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/"


def load_templates(paths: Sequence[str]) -> list[NodeTemplate]:
    """Every NodeTemplate document of ``paths``, each checked whole (:class:`InputError`
    naming the file and the field otherwise)."""
    templates = []
    for path in paths:
        try:
            documents = [d for d in yaml.safe_load_all(read(path)) if d is not None]
        except yaml.YAMLError as exc:
            raise InputError(f"{path}: not YAML: {exc}") from None
        if not documents:
            raise InputError(f"{path}: no NodeTemplate document")
        for document in documents:
            try:
                templates.append(parse_template(document, source=path))
            except NodeTemplateError as exc:
                raise InputError(f"{path}: {exc}") from None
    return templates


def node_name(template: NodeTemplate) -> str:
    return "new-" + template.name.removeprefix("node template ")


def apply_templates(objects: Objects, templates: Sequence[NodeTemplate]) -> None:
    """Replace the input's nodes (and their node-local slices) by one new node per template."""
    objects.nodes = {}
    objects.slices = [s for s in objects.slices if not s.spec.node_name]
    for template in templates:
        name = node_name(template)
        allocatable = dict(template.allocatable or {"cpu": "1000", "memory": "1000Ti", "pods": "110"})
        objects.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {**template.labels, "kubernetes.io/hostname": name}},
            "spec": {"taints": [dict(t) for t in template.taints]},
            "status": {"allocatable": allocatable, "capacity": allocatable},
        }
        for body in template.slice_bodies(name):
            try:
                model = load_object(body)
            except InvalidObjectError as exc:
                raise InputError(f"{template.name}: {exc}") from None
            assert isinstance(model, ResourceSlice)
            objects.slices.append(model)


def resources_document(objects: Objects, templates: Sequence[NodeTemplate]) -> dict[str, Any]:
    """What each template's new node would carry, in the autoscalers' terms."""
    classes = [c.to_dict() for c in objects.classes]
    out = []
    for template in templates:
        resources = template_resources(template, classes)
        out.append(
            {
                "template": template.name.removeprefix("node template "),
                "resources": {name: str(count) for name, count in sorted(resources.items())},
                "clusterAutoscalerTags": {
                    CA_RESOURCE_TAG + name: str(count) for name, count in sorted(resources.items())
                },
            }
        )
    return {"templates": out}
