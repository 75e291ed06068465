"""Protobuf messages declared in Python: a schema of names, field numbers and types turned
into descriptors and message classes by the `protobuf` runtime at import time.

The agent speaks two protobuf APIs (NRI to the container runtime, the kubelet's
PodResources to metrics exporters) and declares only the messages and fields it reads or
writes, with the names and numbers of their `.proto` files: no generated code and no
protoc step. A schema maps each message to its fields ``(name, number, type, repeated)``;
a type is a scalar (``string``, ``int64``, ...), a proto3 ``optional`` scalar
(``optional string``: its presence is kept), ``map<string,string>``, or the name of
another message of the same package.
"""

from __future__ import annotations

from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["MAP", "Schema", "message_classes"]

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS: Final = {
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
}
#: The one map type the declarations use.
MAP: Final = "map<string,string>"

#: message -> [(field, number, type, repeated)]
Schema = dict[str, list[tuple[str, int, str, bool]]]


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _file(name: str, package: str, schema: Schema) -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")
    for msg_name, fields in schema.items():
        msg = fdp.message_type.add(name=msg_name)
        for field_name, number, kind, repeated in fields:
            f = msg.field.add(name=field_name, number=number)
            if kind == MAP:
                entry = msg.nested_type.add(name=f"{_camel(field_name)}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
                entry.field.add(name="value", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
                f.type = _F.TYPE_MESSAGE
                f.type_name = f".{package}.{msg_name}.{entry.name}"
                f.label = _F.LABEL_REPEATED
                continue
            f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if kind.startswith("optional "):
                kind = kind.removeprefix("optional ")
                f.proto3_optional = True
                f.oneof_index = len(msg.oneof_decl)  # its synthetic oneof, as protoc makes it
                msg.oneof_decl.add(name=f"_{field_name}")
            if kind in _SCALARS:
                f.type = _SCALARS[kind]
            else:
                if kind not in schema:
                    raise AssertionError(f"{msg_name}.{field_name}: unknown message type {kind}")
                f.type = _F.TYPE_MESSAGE
                f.type_name = f".{package}.{kind}"
    return fdp


def message_classes(
    pool: descriptor_pool.DescriptorPool, *, file: str, package: str, schema: Schema
) -> dict[str, Any]:
    """Add the schema to `pool` as file `file` of `package`; its message classes by name."""
    pool.Add(_file(file, package, schema))
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in schema
    }
