"""NRI's two framing layers, without I/O: the connection multiplexer and ttrpc messages.

An NRI plugin holds one unix socket to the runtime and runs two ttrpc conversations over
it (containerd/nri `pkg/net/multiplex`): on logical connection 1 the plugin is the
ttrpc *server* (the runtime calls Configure, Synchronize, CreateContainer on it), on
logical connection 2 it is the *client* (it calls RegisterPlugin). Each write to a
logical connection travels as frames of

    conn id (uint32, big endian) | length (uint32, big endian) | length bytes

and the bytes of one connection, once the frames are stripped, are a ttrpc stream: each
message is

    length (uint32 BE) | stream id (uint32 BE) | type (uint8) | flags (uint8) | payload

with type 1 a request, 2 a response and 3 streaming data (unused by NRI's unary calls).
Clients number their streams with odd ids from 1 upwards. A ttrpc message is at most
4 MiB; a mux frame at most that plus the ttrpc header, so one message may span frames
and one frame may hold several messages: the decoders here buffer across both.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from draco.errors import NriError

__all__ = [
    "MAX_MESSAGE",
    "MAX_MUX_PAYLOAD",
    "PLUGIN_CONN",
    "RUNTIME_CONN",
    "TYPE_DATA",
    "TYPE_REQUEST",
    "TYPE_RESPONSE",
    "MuxDecoder",
    "TtrpcDecoder",
    "TtrpcMessage",
    "encode_message",
    "encode_mux",
]

#: The logical connection on which the runtime calls the plugin's services.
PLUGIN_CONN: Final = 1
#: The logical connection on which the plugin calls the runtime's services.
RUNTIME_CONN: Final = 2

TYPE_REQUEST: Final = 1
TYPE_RESPONSE: Final = 2
TYPE_DATA: Final = 3

_MUX_HEADER: Final = struct.Struct(">II")
_TTRPC_HEADER: Final = struct.Struct(">IIBB")
#: ttrpc's largest message payload.
MAX_MESSAGE: Final = 4 << 20
#: The multiplexer's largest frame payload: one full ttrpc message with its header.
MAX_MUX_PAYLOAD: Final = _TTRPC_HEADER.size + MAX_MESSAGE


def encode_mux(conn_id: int, data: bytes) -> bytes:
    """The frames that carry `data` on logical connection `conn_id`."""
    if conn_id <= 0:
        raise ValueError(f"mux connection id {conn_id} is reserved")
    out = bytearray()
    for start in range(0, max(len(data), 1), MAX_MUX_PAYLOAD):
        chunk = data[start : start + MAX_MUX_PAYLOAD]
        out += _MUX_HEADER.pack(conn_id, len(chunk))
        out += chunk
    return bytes(out)


class MuxDecoder:
    """Splits the socket's byte stream back into (connection id, bytes) pieces."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        self._buf += data
        while len(self._buf) >= _MUX_HEADER.size:
            conn_id, length = _MUX_HEADER.unpack_from(self._buf)
            if length > MAX_MUX_PAYLOAD:
                raise NriError(f"NRI mux frame of {length} bytes exceeds {MAX_MUX_PAYLOAD}")
            end = _MUX_HEADER.size + length
            if len(self._buf) < end:
                return
            payload = bytes(self._buf[_MUX_HEADER.size : end])
            del self._buf[:end]
            yield conn_id, payload

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buf)


@dataclass(frozen=True)
class TtrpcMessage:
    stream_id: int
    type: int
    flags: int
    payload: bytes


def encode_message(stream_id: int, msg_type: int, payload: bytes, *, flags: int = 0) -> bytes:
    if len(payload) > MAX_MESSAGE:
        raise NriError(f"ttrpc message of {len(payload)} bytes exceeds {MAX_MESSAGE}")
    return _TTRPC_HEADER.pack(len(payload), stream_id, msg_type, flags) + payload


class TtrpcDecoder:
    """Splits one logical connection's bytes into ttrpc messages."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[TtrpcMessage]:
        self._buf += data
        while len(self._buf) >= _TTRPC_HEADER.size:
            length, stream_id, msg_type, flags = _TTRPC_HEADER.unpack_from(self._buf)
            if length > MAX_MESSAGE:
                raise NriError(f"ttrpc message of {length} bytes exceeds {MAX_MESSAGE}")
            end = _TTRPC_HEADER.size + length
            if len(self._buf) < end:
                return
            payload = bytes(self._buf[_TTRPC_HEADER.size : end])
            del self._buf[:end]
            yield TtrpcMessage(stream_id=stream_id, type=msg_type, flags=flags, payload=payload)
