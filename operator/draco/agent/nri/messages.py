"""The protobuf messages draco exchanges with the runtime over NRI, and typed views of them.

Only the messages and fields draco reads or writes are declared, with the names and field
numbers of NRI's `pkg/api/api.proto` (package `nri.pkg.api.v1alpha1`) and ttrpc's
`request.proto`; everything else a runtime sends is kept as unknown fields and ignored.
The declarations below are built into message classes at import time
(`draco.agent.protoschema`), so there is no generated code and no protoc step.
Enumerations travel as their integer values (they are varints on the wire).

The rest of the agent never touches protobuf: `PodSandbox`, `Container` and
`Adjustment` are plain dataclasses, converted here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf import descriptor_pool
from google.protobuf.message import DecodeError

from draco.agent.protoschema import MAP, Schema, message_classes
from draco.errors import NriError

__all__ = [
    "CREATE_CONTAINER_EVENT",
    "HOOK_STAGES",
    "NRI_PACKAGE",
    "PLUGIN_SERVICE",
    "RUNTIME_SERVICE",
    "Adjustment",
    "Container",
    "DeviceNode",
    "Hook",
    "Mount",
    "PodSandbox",
    "adjustment_from_message",
    "container_message",
    "decode",
    "encode_adjustment",
    "event_mask",
    "message",
    "parse_container",
    "parse_pod",
    "pod_message",
]

NRI_PACKAGE: Final = "nri.pkg.api.v1alpha1"
PLUGIN_SERVICE: Final = f"{NRI_PACKAGE}.Plugin"
RUNTIME_SERVICE: Final = f"{NRI_PACKAGE}.Runtime"
#: NRI's `Event` enumeration value of container creation.
CREATE_CONTAINER_EVENT: Final = 4

_NRI: Final[Schema] = {
    "Empty": [],
    "RegisterPluginRequest": [
        ("plugin_name", 1, "string", False),
        ("plugin_idx", 2, "string", False),
        ("NRI_version", 3, "string", False),
    ],
    "ConfigureRequest": [
        ("config", 1, "string", False),
        ("runtime_name", 2, "string", False),
        ("runtime_version", 3, "string", False),
        ("registration_timeout", 4, "int64", False),
        ("request_timeout", 5, "int64", False),
        ("NRI_version", 6, "string", False),
    ],
    "ConfigureResponse": [("events", 2, "int32", False)],
    "SynchronizeRequest": [
        ("pods", 1, "PodSandbox", True),
        ("containers", 2, "Container", True),
        ("more", 3, "bool", False),
    ],
    "SynchronizeResponse": [("update", 1, "ContainerUpdate", True), ("more", 2, "bool", False)],
    "ContainerUpdate": [("container_id", 1, "string", False)],
    "PodSandbox": [
        ("id", 1, "string", False),
        ("name", 2, "string", False),
        ("uid", 3, "string", False),
        ("namespace", 4, "string", False),
        ("labels", 5, MAP, False),
        ("annotations", 6, MAP, False),
    ],
    "Container": [
        ("id", 1, "string", False),
        ("pod_sandbox_id", 2, "string", False),
        ("name", 3, "string", False),
        ("state", 4, "int32", False),
        ("labels", 5, MAP, False),
        ("annotations", 6, MAP, False),
        ("args", 7, "string", True),
        ("env", 8, "string", True),
        ("mounts", 9, "Mount", True),
    ],
    "Mount": [
        ("destination", 1, "string", False),
        ("type", 2, "string", False),
        ("source", 3, "string", False),
        ("options", 4, "string", True),
    ],
    "CreateContainerRequest": [("pod", 1, "PodSandbox", False), ("container", 2, "Container", False)],
    "CreateContainerResponse": [("adjust", 1, "ContainerAdjustment", False)],
    "ContainerAdjustment": [
        ("annotations", 2, MAP, False),
        ("mounts", 3, "Mount", True),
        ("env", 4, "KeyValue", True),
        ("hooks", 5, "Hooks", False),
        ("linux", 6, "LinuxContainerAdjustment", False),
    ],
    "KeyValue": [("key", 1, "string", False), ("value", 2, "string", False)],
    "Hooks": [
        ("prestart", 1, "Hook", True),
        ("create_runtime", 2, "Hook", True),
        ("create_container", 3, "Hook", True),
        ("start_container", 4, "Hook", True),
        ("poststart", 5, "Hook", True),
        ("poststop", 6, "Hook", True),
    ],
    "Hook": [
        ("path", 1, "string", False),
        ("args", 2, "string", True),
        ("env", 3, "string", True),
        ("timeout", 4, "OptionalInt", False),
    ],
    "OptionalInt": [("value", 1, "int64", False)],
    "OptionalUInt32": [("value", 1, "uint32", False)],
    "OptionalFileMode": [("value", 1, "uint32", False)],
    "LinuxContainerAdjustment": [("devices", 1, "LinuxDevice", True)],
    "LinuxDevice": [
        ("path", 1, "string", False),
        ("type", 2, "string", False),
        ("major", 3, "int64", False),
        ("minor", 4, "int64", False),
        ("file_mode", 5, "OptionalFileMode", False),
        ("uid", 6, "OptionalUInt32", False),
        ("gid", 7, "OptionalUInt32", False),
    ],
    "StateChangeEvent": [
        ("event", 1, "int32", False),
        ("pod", 2, "PodSandbox", False),
        ("container", 3, "Container", False),
    ],
}

# ttrpc's envelope (package `ttrpc`) and the status it carries (`google.rpc.Status`,
# declared in the same package here: only the field numbers matter on the wire).
_TTRPC: Final[Schema] = {
    "Request": [
        ("service", 1, "string", False),
        ("method", 2, "string", False),
        ("payload", 3, "bytes", False),
        ("timeout_nano", 4, "int64", False),
        ("metadata", 5, "KeyValue", True),
    ],
    "Response": [("status", 1, "Status", False), ("payload", 2, "bytes", False)],
    "Status": [("code", 1, "int32", False), ("message", 2, "string", False)],
    "KeyValue": [("key", 1, "string", False), ("value", 2, "string", False)],
}


_POOL: Final = descriptor_pool.DescriptorPool()
_CLASSES: Final[dict[str, Any]] = {
    **message_classes(_POOL, file="draco/nri_minimal.proto", package=NRI_PACKAGE, schema=_NRI),
    **{
        f"ttrpc.{name}": cls
        for name, cls in message_classes(
            _POOL, file="draco/ttrpc_minimal.proto", package="ttrpc", schema=_TTRPC
        ).items()
    },
}


def message(type_name: str, /, **fields: Any) -> Any:
    """A new message: `message("RegisterPluginRequest", plugin_name="draco")`; ttrpc's
    envelope types are `ttrpc.Request`, `ttrpc.Response`, `ttrpc.Status`."""
    return _CLASSES[type_name](**fields)


def decode(name: str, data: bytes) -> Any:
    """Parse `data` as message `name`; raises `NriError` when it is not one."""
    msg = _CLASSES[name]()
    try:
        msg.ParseFromString(data)
    except DecodeError as exc:
        raise NriError(f"malformed {name} message: {exc}") from exc
    return msg


def event_mask(*events: int) -> int:
    """NRI's event subscription bit mask (`1 << (event - 1)` per event)."""
    mask = 0
    for event in events:
        mask |= 1 << (event - 1)
    return mask


# ---- typed views -------------------------------------------------------------------


@dataclass(frozen=True)
class PodSandbox:
    id: str
    name: str
    namespace: str
    uid: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Container:
    id: str
    pod_sandbox_id: str
    name: str
    env: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Mount:
    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceNode:
    """A device node to create in the container and allow in its device cgroup."""

    path: str
    type: str
    major: int
    minor: int
    file_mode: int | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class Hook:
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


#: OCI hook stages as NRI's `Hooks` fields, keyed by their CDI `hookName`.
HOOK_STAGES: Final = {
    "prestart": "prestart",
    "createRuntime": "create_runtime",
    "createContainer": "create_container",
    "startContainer": "start_container",
    "poststart": "poststart",
    "poststop": "poststop",
}


@dataclass(frozen=True)
class Adjustment:
    """What a plugin adds to a container being created."""

    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    hooks: tuple[tuple[str, Hook], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.env or self.mounts or self.devices or self.hooks or self.annotations)


def parse_pod(msg: Any) -> PodSandbox:
    return PodSandbox(
        id=msg.id,
        name=msg.name,
        namespace=msg.namespace,
        uid=msg.uid,
        annotations=dict(msg.annotations),
        labels=dict(msg.labels),
    )


def parse_container(msg: Any) -> Container:
    return Container(
        id=msg.id,
        pod_sandbox_id=msg.pod_sandbox_id,
        name=msg.name,
        env=tuple(msg.env),
        annotations=dict(msg.annotations),
    )


def _hook_message(hook: Hook) -> Any:
    msg = message("Hook", path=hook.path, args=list(hook.args), env=list(hook.env))
    if hook.timeout is not None:
        msg.timeout.value = hook.timeout
    return msg


def encode_adjustment(adjust: Adjustment) -> Any:
    """The `ContainerAdjustment` message of `adjust`."""
    msg = message("ContainerAdjustment")
    for key, value in adjust.annotations.items():
        msg.annotations[key] = value
    for key, value in adjust.env:
        msg.env.add(key=key, value=value)
    for mount in adjust.mounts:
        msg.mounts.add(
            destination=mount.destination, source=mount.source, type=mount.type, options=list(mount.options)
        )
    for stage, hook in adjust.hooks:
        if stage not in HOOK_STAGES.values():
            raise NriError(f"unknown OCI hook stage {stage!r}")
        getattr(msg.hooks, stage).append(_hook_message(hook))
    for device in adjust.devices:
        dev = msg.linux.devices.add(
            path=device.path, type=device.type, major=device.major, minor=device.minor
        )
        if device.file_mode is not None:
            dev.file_mode.value = device.file_mode
        if device.uid is not None:
            dev.uid.value = device.uid
        if device.gid is not None:
            dev.gid.value = device.gid
    return msg


def adjustment_from_message(msg: Any) -> Adjustment:
    """The inverse of `encode_adjustment`: what the runtime reads (used by tests)."""
    hooks: list[tuple[str, Hook]] = []
    for stage in HOOK_STAGES.values():
        for h in getattr(msg.hooks, stage):
            hooks.append(
                (
                    stage,
                    Hook(
                        path=h.path,
                        args=tuple(h.args),
                        env=tuple(h.env),
                        timeout=h.timeout.value if h.HasField("timeout") else None,
                    ),
                )
            )
    return Adjustment(
        env=tuple((kv.key, kv.value) for kv in msg.env),
        mounts=tuple(
            Mount(destination=m.destination, source=m.source, type=m.type, options=tuple(m.options))
            for m in msg.mounts
        ),
        devices=tuple(
            DeviceNode(
                path=d.path,
                type=d.type,
                major=d.major,
                minor=d.minor,
                file_mode=d.file_mode.value if d.HasField("file_mode") else None,
                uid=d.uid.value if d.HasField("uid") else None,
                gid=d.gid.value if d.HasField("gid") else None,
            )
            for d in msg.linux.devices
        ),
        hooks=tuple(hooks),
        annotations=dict(msg.annotations),
    )


def pod_message(pod: PodSandbox) -> Any:
    """The `PodSandbox` message of `pod` (what the runtime sends; used by tests)."""
    msg = message("PodSandbox", id=pod.id, name=pod.name, namespace=pod.namespace, uid=pod.uid)
    msg.annotations.update(pod.annotations)
    msg.labels.update(pod.labels)
    return msg


def container_message(container: Container) -> Any:
    """The `Container` message of `container` (what the runtime sends; used by tests)."""
    msg = message(
        "Container",
        id=container.id,
        pod_sandbox_id=container.pod_sandbox_id,
        name=container.name,
        env=list(container.env),
    )
    msg.annotations.update(container.annotations)
    return msg
