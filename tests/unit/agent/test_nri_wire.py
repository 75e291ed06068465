"""NRI framing and messages: the mux and ttrpc layers, and the protobuf codec."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draco.agent.nri import messages as m
from draco.agent.nri.wire import (
    MAX_MESSAGE,
    MAX_MUX_PAYLOAD,
    PLUGIN_CONN,
    RUNTIME_CONN,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    MuxDecoder,
    TtrpcDecoder,
    TtrpcMessage,
    encode_message,
    encode_mux,
)
from draco.errors import NriError


def test_mux_frame_layout_matches_containerd() -> None:
    # conn id and length, both uint32 big endian, then the bytes.
    assert encode_mux(2, b"abc") == b"\x00\x00\x00\x02\x00\x00\x00\x03abc"


def test_ttrpc_header_layout_matches_containerd() -> None:
    # length, stream id (uint32 BE), type, flags, then the payload.
    assert encode_message(5, TYPE_RESPONSE, b"xy", flags=1) == b"\x00\x00\x00\x02\x00\x00\x00\x05\x02\x01xy"


def test_mux_reserved_connection_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_mux(0, b"x")


def test_large_write_is_split_into_frames_and_joined_again() -> None:
    data = bytes(range(256)) * ((MAX_MUX_PAYLOAD // 256) + 10)
    encoded = encode_mux(PLUGIN_CONN, data)
    pieces = list(MuxDecoder().feed(encoded))
    assert len(pieces) == 2
    assert [len(p) for _, p in pieces] == [MAX_MUX_PAYLOAD, len(data) - MAX_MUX_PAYLOAD]
    assert b"".join(p for _, p in pieces) == data


@given(
    st.lists(
        st.tuples(st.sampled_from([PLUGIN_CONN, RUNTIME_CONN]), st.binary(max_size=300)),
        min_size=1,
        max_size=8,
    ),
    st.integers(min_value=1, max_value=50),
)
def test_mux_decoder_survives_any_split_of_the_stream(frames: list[tuple[int, bytes]], chunk: int) -> None:
    stream = b"".join(encode_mux(c, d) for c, d in frames)
    decoder = MuxDecoder()
    got = []
    for start in range(0, len(stream), chunk):
        got.extend(decoder.feed(stream[start : start + chunk]))
    assert got == frames
    assert decoder.pending == 0


@given(
    st.lists(
        st.tuples(
            st.integers(1, 2**31), st.sampled_from([1, 2, 3]), st.integers(0, 7), st.binary(max_size=200)
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(min_value=1, max_value=40),
)
def test_ttrpc_messages_span_and_share_mux_frames(
    messages: list[tuple[int, int, int, bytes]], chunk: int
) -> None:
    # The bytes of one logical connection arrive cut anywhere: messages are rebuilt whole.
    stream = b"".join(encode_message(s, t, p, flags=f) for s, t, f, p in messages)
    wire = b"".join(encode_mux(RUNTIME_CONN, stream[i : i + chunk]) for i in range(0, len(stream), chunk))
    mux, ttrpc = MuxDecoder(), TtrpcDecoder()
    got = [msg for _, piece in mux.feed(wire) for msg in ttrpc.feed(piece)]
    assert got == [TtrpcMessage(stream_id=s, type=t, flags=f, payload=p) for s, t, f, p in messages]


def test_oversized_messages_are_refused() -> None:
    with pytest.raises(NriError):
        encode_message(1, TYPE_REQUEST, b"\0" * (MAX_MESSAGE + 1))
    with pytest.raises(NriError):
        list(TtrpcDecoder().feed(struct.pack(">IIBB", MAX_MESSAGE + 1, 1, 1, 0)))
    with pytest.raises(NriError):
        list(MuxDecoder().feed(struct.pack(">II", 1, MAX_MUX_PAYLOAD + 1)))


def test_field_numbers_match_nri_api_proto() -> None:
    # RegisterPluginRequest{plugin_name=1, plugin_idx=2, NRI_version=3}: tag bytes 0x0a, 0x12, 0x1a.
    msg = m.message("RegisterPluginRequest", plugin_name="d", plugin_idx="10", NRI_version="v")
    assert msg.SerializeToString() == b"\x0a\x01d\x12\x0210\x1a\x01v"
    # ConfigureResponse{events=2}: tag 0x10 (field 2, varint).
    assert m.message("ConfigureResponse", events=8).SerializeToString() == b"\x10\x08"
    # ttrpc Request{service=1, method=2, payload=3}.
    req = m.message("ttrpc.Request", service="s", method="m", payload=b"p")
    assert req.SerializeToString() == b"\x0a\x01s\x12\x01m\x1a\x01p"


def test_event_mask_is_one_bit_per_event() -> None:
    assert m.event_mask(m.CREATE_CONTAINER_EVENT) == 0b1000
    assert m.event_mask(1, 4) == 0b1001


def test_adjustment_round_trips_through_the_wire_format() -> None:
    adjust = m.Adjustment(
        env=(("GPU", "0"), ("MODE", "fast")),
        mounts=(m.Mount(destination="/var/run/x.json", source="/host/x.json", options=("ro", "bind")),),
        devices=(m.DeviceNode(path="/dev/fake0", type="c", major=1, minor=3, file_mode=0o666, uid=0),),
        hooks=(("create_container", m.Hook(path="/bin/hook", args=("hook", "a"), timeout=5)),),
        annotations={"draco.dev/claims": "ns/claim"},
    )
    wire = m.encode_adjustment(adjust).SerializeToString()
    assert m.adjustment_from_message(m.decode("ContainerAdjustment", wire)) == adjust


def test_unknown_fields_from_a_newer_runtime_are_ignored() -> None:
    # Container.user (field 21) and .image (22) are not declared here.
    known = m.container_message(m.Container(id="c1", pod_sandbox_id="p1", name="main", env=("A=1",)))
    extra = b"\xaa\x01\x04\x08\x01\x10\x02" + b"\xb2\x01\x03\x0a\x01x"
    parsed = m.parse_container(m.decode("Container", known.SerializeToString() + extra))
    assert parsed == m.Container(id="c1", pod_sandbox_id="p1", name="main", env=("A=1",))


def test_pod_annotations_and_labels_are_maps() -> None:
    pod = m.PodSandbox(id="p", name="n", namespace="ns", uid="u", annotations={"a": "1"}, labels={"l": "2"})
    assert m.parse_pod(m.decode("PodSandbox", m.pod_message(pod).SerializeToString())) == pod


def test_garbage_is_an_nri_error() -> None:
    with pytest.raises(NriError, match="malformed Container"):
        m.decode("Container", b"\xff\xff\xff")


def test_unknown_hook_stage_is_refused() -> None:
    with pytest.raises(NriError, match="hook stage"):
        m.encode_adjustment(m.Adjustment(hooks=(("later", m.Hook(path="/x")),)))
