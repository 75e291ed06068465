"""What ``draco simulate`` reads: files, folders or stdin, sorted into the objects it uses.

The input is what ``kubectl get ... -o yaml`` prints (a ``kind: List`` or many documents)
or manifests written by hand. draco's kinds (or ``resource.k8s.io/v1``'s) become API
models, as the allocator reads them; the core, apps and storage objects kube-scheduler's
rules read stay JSON bodies, as the operator's watches hand them to its view. Anything
else in a dump (ConfigMaps, Deployments, Events, ...) takes no part.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import yaml

from draco.api import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    iter_documents,
    load_object,
)
from draco.api.bodies import ObjView, key_of
from draco.api.constants import GROUP, VERSION
from draco.errors import AgentError, InvalidObjectError
from draco.scheduling.view import StorageKind

__all__ = ["InputError", "Objects", "fake_slices", "load", "read"]


_RESOURCE_GROUPS: Final = ("resource.k8s.io", "resource.draco.dev")
#: PodGroups: draco's and upstream's (one shape), and the coscheduling plugin's.
_GROUP_GROUPS: Final = ("scheduling.draco.dev", "scheduling.k8s.io")
_COSCHEDULING_GROUP: Final = "scheduling.x-k8s.io"
_FOLDER_SUFFIXES: Final = (".yaml", ".yml", ".json")

#: (API group, kind) of the storage objects the volume rules read, by the view's names.
_STORAGE: Final[dict[tuple[str, str], StorageKind]] = {
    ("", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("", "PersistentVolume"): "persistentvolumes",
    ("storage.k8s.io", "StorageClass"): "storageclasses",
    ("storage.k8s.io", "CSINode"): "csinodes",
    ("storage.k8s.io", "CSIDriver"): "csidrivers",
    ("storage.k8s.io", "CSIStorageCapacity"): "csistoragecapacities",
    ("storage.k8s.io", "VolumeAttachment"): "volumeattachments",
}
#: Namespaced storage kinds (keyed ``namespace/name``; the others by name).
_NAMESPACED_STORAGE: Final = frozenset({"persistentvolumeclaims", "csistoragecapacities"})
#: (API group, kind) of what kube-scheduler's default spreading selects a pod's siblings by.
#: The kinds keyed ``namespace/name`` whose namespace is ``default`` when the input leaves it out
#: (as the API server defaults it): (group, kind), the group ``*`` for any of the resource groups.
_DEFAULTED: Final = frozenset(
    {("", "Pod"), ("", "PersistentVolumeClaim"), ("storage.k8s.io", "CSIStorageCapacity")}
    | {(group, kind) for group in _RESOURCE_GROUPS for kind in ("ResourceClaim", "ResourceClaimTemplate")}
    | {(group, "PodGroup") for group in (*_GROUP_GROUPS, _COSCHEDULING_GROUP)}
)
_WORKLOADS: Final = frozenset(
    {("", "Service"), ("", "ReplicationController"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")}
)


class InputError(Exception):
    """Input the simulator cannot use; the message says what to fix."""


@dataclass
class Objects:
    """Everything read, by kind (claims and templates keyed ``namespace/name``)."""

    classes: list[DeviceClass] = field(default_factory=list)
    slices: list[ResourceSlice] = field(default_factory=list)
    claims: dict[str, ResourceClaim] = field(default_factory=dict)
    templates: dict[str, ResourceClaimTemplate] = field(default_factory=dict)
    rules: list[DeviceTaintRule] = field(default_factory=list)
    #: Node bodies by name.
    nodes: dict[str, ObjView] = field(default_factory=dict)
    pods: list[ObjView] = field(default_factory=list)
    #: Namespace name -> labels.
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    storage: dict[StorageKind, dict[str, ObjView]] = field(
        default_factory=lambda: {kind: {} for kind in _STORAGE.values()}
    )
    #: (kind, body) of Services, ReplicationControllers, ReplicaSets and StatefulSets.
    workloads: list[tuple[str, ObjView]] = field(default_factory=list)
    #: PodGroups by ``namespace/name``: draco's (or upstream's) and the coscheduling plugin's.
    pod_groups: dict[str, ObjView] = field(default_factory=dict)
    coscheduling_groups: dict[str, ObjView] = field(default_factory=dict)
    #: policy/v1 PodDisruptionBudgets (preemption avoids violating them).
    budgets: list[ObjView] = field(default_factory=list)


# --- reading ------------------------------------------------------------------------------


def _expand(path: str) -> list[str]:
    """A folder stands for its YAML/JSON files (not recursive, like `kubectl apply -f DIR`)."""
    if path != "-" and os.path.isdir(path):
        files = sorted(
            str(child)
            for child in Path(path).iterdir()
            if child.is_file() and child.suffix in _FOLDER_SUFFIXES
        )
        if not files:
            raise InputError(f"{path}: a folder with no .yaml, .yml or .json files")
        return files
    return [path]


def read(path: str) -> str:
    """The text of ``path`` (``-``: standard input)."""
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)
            return stream.read().decode("utf-8") if stream is not None else sys.stdin.read()
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "standard input" if path == "-" else path
        raise InputError(
            f"{where}: not UTF-8 text (byte {exc.start}): pass the YAML or JSON that kubectl prints"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def load(paths: Sequence[str]) -> Objects:
    """Every object of the files, folders or stdin (``-``) named by ``paths``."""
    objects = Objects()
    for given in paths:
        for path in _expand(given):
            text = read(path)
            try:
                documents = list(iter_documents(text))
            except yaml.YAMLError as exc:
                raise InputError(f"{path}: not valid YAML or JSON: {exc}") from None
            except InvalidObjectError as exc:
                raise InputError(f"{path}: {exc}") from None
            for document in documents:
                _add(objects, document, path=path)
    return objects


#: Kinds of the resource groups that are not allocation's input: a ResourcePoolStatusRequest
#: asks the operator for pool status (`kubectl get draco` lists it with the rest).
_NOT_ALLOCATION_INPUT: Final = frozenset({"ResourcePoolStatusRequest"})


def _add(objects: Objects, document: ObjView, *, path: str) -> None:
    kind = str(document.get("kind") or "")
    api_version = str(document.get("apiVersion") or "")
    group = api_version.rpartition("/")[0]
    metadata = document.get("metadata") or {}
    if (group, kind) in _DEFAULTED and not metadata.get("namespace"):
        # As the API server defaults it: every namespaced object read has its namespace.
        metadata = {**metadata, "namespace": "default"}
        document = {**document, "metadata": metadata}
    if group in _RESOURCE_GROUPS:
        if kind in _NOT_ALLOCATION_INPUT:
            return  # in `kubectl get draco`'s dump, but no input of an allocation
        _add_resource(objects, document, path=path)
        return
    if kind == "PodGroup" and group in (*_GROUP_GROUPS, _COSCHEDULING_GROUP):
        if not metadata.get("name"):
            raise InputError(f"{path}: a PodGroup without metadata.name")
        groups = objects.coscheduling_groups if group == _COSCHEDULING_GROUP else objects.pod_groups
        groups[key_of(document)] = document
        return
    if (group, kind) == ("policy", "PodDisruptionBudget"):
        objects.budgets.append(document)
        return
    if group == "" and api_version != "v1":
        return  # no apiVersion, or one that is not an API's
    if (
        (group, kind) not in _STORAGE
        and (group, kind) not in _WORKLOADS
        and (kind not in ("Node", "Pod", "Namespace") or group)
    ):
        return  # other objects in a dump (config maps, deployments, ...) do not take part
    if not metadata.get("name"):
        raise InputError(f"{path}: a {kind} without metadata.name")
    name = str(metadata["name"])
    if kind == "Pod":
        objects.pods.append(document)
    elif kind == "Node":
        objects.nodes[name] = document
    elif kind == "Namespace":
        objects.namespaces[name] = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    elif (group, kind) in _WORKLOADS:
        objects.workloads.append((kind, document))
    else:
        storage = _STORAGE[(group, kind)]
        key = key_of(document) if storage in _NAMESPACED_STORAGE else name
        objects.storage[storage][key] = document


def _add_resource(objects: Objects, document: ObjView, *, path: str) -> None:
    try:
        model = load_object(document)
    except InvalidObjectError as exc:
        raise InputError(f"{path}: {exc}") from None
    if isinstance(model, DeviceClass):
        objects.classes.append(model)
    elif isinstance(model, ResourceSlice):
        objects.slices.append(model)
    elif isinstance(model, ResourceClaim):
        objects.claims[model.key] = model
    elif isinstance(model, ResourceClaimTemplate):
        objects.templates[model.key] = model
    elif isinstance(model, DeviceTaintRule):
        objects.rules.append(model)


def fake_slices(path: str, nodes: Sequence[str]) -> list[ResourceSlice]:
    """The slices a node agent on the fake driver publishes from ``path``, on ``nodes``."""
    # Imported here: the agent's drivers are only needed for this option.
    from draco.agent.drivers.fake import FakeDriver, parse_fake_config
    from draco.agent.publisher import desired_slices

    text = read(path)
    try:
        config = parse_fake_config(text, source=path)
    except AgentError as exc:
        raise InputError(str(exc)) from None
    # A fixed time keeps the output reproducible; timeAdded does not change allocation.
    now = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    slices = []
    for node in nodes:
        for spec in config.drivers:
            pool = desired_slices(
                driver=spec.name, node=node, inventory=FakeDriver(spec).inventory(node), now=now
            )
            for name, slice_spec in pool:
                body = {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ResourceSlice",
                    "metadata": {"name": name},
                    "spec": {
                        **slice_spec,
                        "pool": {**slice_spec["pool"], "generation": 1, "resourceSliceCount": len(pool)},
                    },
                }
                try:
                    model = load_object(body)
                except InvalidObjectError as exc:
                    raise InputError(f"{path}: {exc}") from None
                assert isinstance(model, ResourceSlice)
                slices.append(model)
    return slices
