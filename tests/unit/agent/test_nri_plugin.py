"""The NRI plugin against a runtime peer speaking the protocol over a real unix socket.

The peer does what containerd's NRI adaptation does with an external plugin: accept the
connection, answer RegisterPlugin on mux connection 2, call Configure, Synchronize and
CreateContainer on connection 1. (The e2e tests run the same plugin against containerd.)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from draco.agent.nri import Adjustment, Container, Mount, NriPlugin, PodSandbox
from draco.agent.nri import messages as m
from draco.agent.nri.wire import (
    PLUGIN_CONN,
    RUNTIME_CONN,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    MuxDecoder,
    TtrpcDecoder,
    encode_message,
    encode_mux,
)
from draco.errors import AgentError


@dataclass
class Handler:
    adjust: Adjustment | None = None
    error: str | None = None
    delay: float = 0.0
    synced: list[tuple[list[str], list[str]]] = field(default_factory=list)
    created: list[tuple[str, str]] = field(default_factory=list)

    async def synchronize(self, pods: Sequence[PodSandbox], containers: Sequence[Container]) -> None:
        self.synced.append(([p.name for p in pods], [c.name for c in containers]))

    async def create_container(self, pod: PodSandbox, container: Container) -> Adjustment | None:
        self.created.append((pod.name, container.name))
        await asyncio.sleep(self.delay)
        if self.error:
            raise AgentError(self.error)
        return self.adjust


@dataclass
class Peer:
    """The runtime side of one plugin connection."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    registered: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    _streams: itertools.count[int] = field(default_factory=lambda: itertools.count(1, 2))
    _pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        mux, decoders = MuxDecoder(), {PLUGIN_CONN: TtrpcDecoder(), RUNTIME_CONN: TtrpcDecoder()}
        while data := await self.reader.read(4096):
            for conn, piece in mux.feed(data):
                for msg in decoders[conn].feed(piece):
                    if conn == RUNTIME_CONN and msg.type == TYPE_REQUEST:
                        req = m.decode("ttrpc.Request", msg.payload)
                        assert (req.service, req.method) == (m.RUNTIME_SERVICE, "RegisterPlugin")
                        self.registered.set_result(m.decode("RegisterPluginRequest", req.payload))
                        reply = m.message("ttrpc.Response", payload=m.message("Empty").SerializeToString())
                        self.writer.write(
                            encode_mux(
                                RUNTIME_CONN,
                                encode_message(msg.stream_id, TYPE_RESPONSE, reply.SerializeToString()),
                            )
                        )
                    elif conn == PLUGIN_CONN and msg.type == TYPE_RESPONSE:
                        self._pending.pop(msg.stream_id).set_result(m.decode("ttrpc.Response", msg.payload))

    async def call(self, method: str, request: Any, *, service: str = m.PLUGIN_SERVICE) -> Any:
        stream = next(self._streams)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[stream] = future
        envelope = m.message(
            "ttrpc.Request", service=service, method=method, payload=request.SerializeToString()
        )
        self.writer.write(
            encode_mux(PLUGIN_CONN, encode_message(stream, TYPE_REQUEST, envelope.SerializeToString()))
        )
        return await asyncio.wait_for(future, 5)

    async def configure(self, *, request_timeout_ms: int = 2000) -> int:
        response = await self.call(
            "Configure",
            m.message(
                "ConfigureRequest",
                runtime_name="peer",
                runtime_version="1",
                request_timeout=request_timeout_ms,
            ),
        )
        assert response.status.code == 0, response.status.message
        return int(m.decode("ConfigureResponse", response.payload).events)

    async def create(self, pod: PodSandbox, container: Container) -> Any:
        request = m.message("CreateContainerRequest")
        request.pod.CopyFrom(m.pod_message(pod))
        request.container.CopyFrom(m.container_message(container))
        return await self.call("CreateContainer", request)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self.writer.wait_closed()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


@dataclass
class Runtime:
    path: Path
    peers: asyncio.Queue[Peer] = field(default_factory=asyncio.Queue)

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(reader, writer)
        peer.start()
        await self.peers.put(peer)

    async def next_peer(self) -> Peer:
        return await asyncio.wait_for(self.peers.get(), 5)


POD = PodSandbox(id="sb1", name="pod", namespace="ns", uid="uid-1", annotations={"a": "1"})
MAIN = Container(id="c1", pod_sandbox_id="sb1", name="main")


@contextlib.asynccontextmanager
async def running(tmp_path: Path, handler: Handler) -> AsyncIterator[tuple[Runtime, NriPlugin]]:
    runtime = Runtime(tmp_path / "nri.sock")
    server = await asyncio.start_unix_server(runtime.accept, path=str(runtime.path))
    plugin = NriPlugin(socket_path=runtime.path, handler=handler, reconnect_seconds=0.05)
    task = asyncio.ensure_future(plugin.run())
    try:
        yield runtime, plugin
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        server.close()
        await server.wait_closed()


async def test_registers_and_subscribes_to_container_creation(tmp_path: Path) -> None:
    async with running(tmp_path, Handler()) as (runtime, plugin):
        peer = await runtime.next_peer()
        registration = await asyncio.wait_for(peer.registered, 5)
        assert (registration.plugin_name, registration.plugin_idx) == ("draco", "10")
        assert await peer.configure() == m.event_mask(m.CREATE_CONTAINER_EVENT)
        await asyncio.wait_for(plugin.ready.wait(), 5)
        await peer.close()


async def test_create_container_answers_the_handlers_adjustment(tmp_path: Path) -> None:
    adjust = Adjustment(
        env=(("DEVICE", "gpu-0"),), mounts=(Mount(destination="/m", source="/h", options=("ro",)),)
    )
    handler = Handler(adjust=adjust)
    async with running(tmp_path, handler) as (runtime, _plugin):
        peer = await runtime.next_peer()
        await peer.configure()
        response = await peer.create(POD, MAIN)
        assert response.status.code == 0
        reply = m.decode("CreateContainerResponse", response.payload)
        assert m.adjustment_from_message(reply.adjust) == adjust
        assert handler.created == [("pod", "main")]
        await peer.close()


async def test_nothing_to_add_is_an_empty_answer(tmp_path: Path) -> None:
    async with running(tmp_path, Handler(adjust=None)) as (runtime, _plugin):
        peer = await runtime.next_peer()
        await peer.configure()
        response = await peer.create(POD, MAIN)
        assert response.status.code == 0
        assert not m.decode("CreateContainerResponse", response.payload).HasField("adjust")
        await peer.close()


async def test_handler_error_fails_the_container_with_its_message(tmp_path: Path) -> None:
    async with running(tmp_path, Handler(error="claim ns/c is not prepared on this node")) as (
        runtime,
        _plugin,
    ):
        peer = await runtime.next_peer()
        await peer.configure()
        response = await peer.create(POD, MAIN)
        assert response.status.code != 0
        assert "claim ns/c is not prepared on this node" in response.status.message
        await peer.close()


async def test_slow_handler_answers_an_error_before_the_runtime_gives_up(tmp_path: Path) -> None:
    async with running(tmp_path, Handler(delay=5)) as (runtime, _plugin):
        peer = await runtime.next_peer()
        await peer.configure(request_timeout_ms=400)
        started = asyncio.get_running_loop().time()
        response = await peer.create(POD, MAIN)
        elapsed = asyncio.get_running_loop().time() - started
        # An error (the container fails and is retried), well inside the runtime's 400 ms.
        assert response.status.code != 0
        assert "did not answer in time" in response.status.message
        assert elapsed < 0.4
        await peer.close()


async def test_synchronize_chunks_reach_the_handler_once(tmp_path: Path) -> None:
    handler = Handler()
    async with running(tmp_path, handler) as (runtime, _plugin):
        peer = await runtime.next_peer()
        await peer.configure()
        first = m.message("SynchronizeRequest", more=True)
        first.pods.append(m.pod_message(POD))
        second = m.message("SynchronizeRequest", more=False)
        second.containers.append(m.container_message(MAIN))
        assert m.decode("SynchronizeResponse", (await peer.call("Synchronize", first)).payload).more
        assert handler.synced == []
        assert not m.decode("SynchronizeResponse", (await peer.call("Synchronize", second)).payload).more
        assert handler.synced == [(["pod"], ["main"])]
        await peer.close()


async def test_unknown_methods_are_unimplemented(tmp_path: Path) -> None:
    async with running(tmp_path, Handler()) as (runtime, _plugin):
        peer = await runtime.next_peer()
        await peer.configure()
        response = await peer.call("RunPodSandbox", m.message("Empty"))
        assert response.status.code == 12
        response = await peer.call("Other", m.message("Empty"), service="some.Service")
        assert response.status.code == 12
        await peer.close()


async def test_reconnects_after_the_runtime_goes_away(tmp_path: Path) -> None:
    async with running(tmp_path, Handler()) as (runtime, plugin):
        peer = await runtime.next_peer()
        await peer.configure()
        await asyncio.wait_for(plugin.ready.wait(), 5)
        await peer.close()
        again = await runtime.next_peer()
        await asyncio.wait_for(again.registered, 5)
        await again.configure()
        await asyncio.wait_for(plugin.ready.wait(), 5)
        await again.close()


async def test_index_must_be_two_digits(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="two digits"):
        NriPlugin(socket_path=tmp_path / "x", handler=Handler(), index="7")
