"""An NRI plugin connection in asyncio: register with the runtime, answer its calls.

The sequence, as containerd/nri's Go stub does it: connect to the runtime's NRI socket,
serve the `Plugin` service on mux connection 1, call `Runtime.RegisterPlugin` on mux
connection 2, answer `Configure` with the events the plugin wants (container creation
only), answer `Synchronize` (the pods and containers that already exist), then answer
one `CreateContainer` per container the runtime creates, with the adjustment the handler
returns. When the runtime goes away (a restart, `Shutdown`) the plugin connects again.

Two rules keep injection safe:

- the runtime gives a plugin `request_timeout` (2 s by default) per call, and a plugin
  that misses it is disconnected and the container is created *without* its adjustment.
  So the handler gets a shorter deadline, and missing it answers an error, which fails
  the container's creation (the kubelet retries) instead;
- a handler error is sent back as the call's status: the runtime fails that container's
  creation with the message, which the kubelet reports in the pod's events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from draco.agent.nri.messages import (
    CREATE_CONTAINER_EVENT,
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    Adjustment,
    Container,
    PodSandbox,
    decode,
    encode_adjustment,
    event_mask,
    message,
    parse_container,
    parse_pod,
)
from draco.agent.nri.wire import (
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
from draco.errors import DracoError, NriError
from draco.logs import get_logger

__all__ = ["NriHandler", "NriPlugin", "NriSession"]

log = get_logger(__name__)

#: The NRI version this plugin speaks (the runtime only logs it).
NRI_VERSION: Final = "v0.12.3"
#: gRPC status codes used in ttrpc responses. A handler that runs out of time answers
#: UNKNOWN, not DEADLINE_EXCEEDED: the runtime must fail the container, not drop the plugin.
_OK, _UNKNOWN, _UNIMPLEMENTED, _INTERNAL = 0, 2, 12, 13
#: NRI's default per-call timeout, until `Configure` says otherwise.
_DEFAULT_REQUEST_TIMEOUT: Final = 2.0
#: The share of the runtime's per-call timeout the handler may use.
_HANDLER_SHARE: Final = 0.75


class NriHandler(Protocol):
    """What the plugin asks of its owner (the agent)."""

    async def synchronize(self, pods: Sequence[PodSandbox], containers: Sequence[Container]) -> None:
        """The pods and containers that exist when the plugin (re)connects."""

    async def create_container(self, pod: PodSandbox, container: Container) -> Adjustment | None:
        """What to add to `container` of `pod`, being created; raise `DracoError` to fail
        its creation with that message."""


@dataclass
class NriSession:
    """One connection to the runtime, from registration to disconnection."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    handler: NriHandler
    name: str
    index: str
    configured: asyncio.Event = field(default_factory=asyncio.Event)
    runtime: str = ""
    request_timeout: float = _DEFAULT_REQUEST_TIMEOUT
    _next_stream: int = 1
    _pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _sync_pods: list[PodSandbox] = field(default_factory=list)
    _sync_containers: list[Container] = field(default_factory=list)
    _closed: asyncio.Event = field(default_factory=asyncio.Event)

    # ---- the whole exchange

    async def run(
        self, *, registration_timeout: float = 5.0, on_ready: Callable[[], None] | None = None
    ) -> None:
        """Register, wait to be configured, then serve until the runtime disconnects."""
        reading = asyncio.ensure_future(self._read())
        try:
            await asyncio.wait_for(
                self.call(
                    RUNTIME_SERVICE,
                    "RegisterPlugin",
                    message(
                        "RegisterPluginRequest",
                        plugin_name=self.name,
                        plugin_idx=self.index,
                        NRI_version=NRI_VERSION,
                    ),
                    "Empty",
                ),
                registration_timeout,
            )
            await asyncio.wait_for(self._wait_configured(reading), registration_timeout)
            if on_ready is not None:
                on_ready()
            await reading
        except TimeoutError as exc:
            raise NriError(
                f"the runtime did not register and configure plugin {self.index}-{self.name}"
            ) from exc
        finally:
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading
            await self.close()

    async def _wait_configured(self, reading: asyncio.Future[None]) -> None:
        configured: asyncio.Future[Any] = asyncio.ensure_future(self.configured.wait())
        try:
            await asyncio.wait([configured, reading], return_when=asyncio.FIRST_COMPLETED)
        finally:
            configured.cancel()
        if not self.configured.is_set():
            reading.result()  # raises what ended the connection
            raise NriError("the runtime closed the NRI connection before configuring the plugin")

    async def close(self) -> None:
        self._closed.set()
        for task in list(self._tasks):
            task.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(NriError("NRI connection closed"))
        self._pending.clear()
        self.writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self.writer.wait_closed()

    # ---- frames in

    async def _read(self) -> None:
        mux = MuxDecoder()
        decoders = {PLUGIN_CONN: TtrpcDecoder(), RUNTIME_CONN: TtrpcDecoder()}
        while True:
            data = await self.reader.read(65536)
            if not data:
                if mux.pending:
                    raise NriError("the runtime closed the NRI connection in the middle of a frame")
                return
            for conn_id, payload in mux.feed(data):
                decoder = decoders.get(conn_id)
                if decoder is None:
                    log.debug("NRI frame for an unknown connection", conn=conn_id)
                    continue
                for msg in decoder.feed(payload):
                    self._dispatch(conn_id, msg)

    def _dispatch(self, conn_id: int, msg: TtrpcMessage) -> None:
        if conn_id == PLUGIN_CONN and msg.type == TYPE_REQUEST:
            task = asyncio.ensure_future(self._serve(msg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif conn_id == RUNTIME_CONN and msg.type == TYPE_RESPONSE:
            future = self._pending.pop(msg.stream_id, None)
            if future is not None and not future.done():
                future.set_result(msg.payload)
        else:
            log.debug("Ignoring an NRI message", conn=conn_id, type=msg.type, stream=msg.stream_id)

    def _send(self, conn_id: int, stream_id: int, msg_type: int, payload: bytes) -> None:
        if self._closed.is_set():
            raise NriError("NRI connection closed")
        self.writer.write(encode_mux(conn_id, encode_message(stream_id, msg_type, payload)))

    # ---- calling the runtime

    async def call(self, service: str, method: str, request: Any, response_type: str) -> Any:
        stream_id = self._next_stream
        self._next_stream += 2
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        envelope = message(
            "ttrpc.Request", service=service, method=method, payload=request.SerializeToString()
        )
        self._send(RUNTIME_CONN, stream_id, TYPE_REQUEST, envelope.SerializeToString())
        await self.writer.drain()
        response = decode("ttrpc.Response", await future)
        if response.status.code != _OK:
            raise NriError(f"{service}.{method} failed: {response.status.message or response.status.code}")
        return decode(response_type, response.payload)

    # ---- serving the runtime

    async def _serve(self, msg: TtrpcMessage) -> None:
        code, text, payload = _OK, "", b""
        try:
            request = decode("ttrpc.Request", msg.payload)
            if request.service != PLUGIN_SERVICE:
                code, text = _UNIMPLEMENTED, f"service {request.service} is not served by this plugin"
            else:
                method = self._methods().get(request.method)
                if method is None:
                    code, text = _UNIMPLEMENTED, f"method {request.method} is not implemented by this plugin"
                else:
                    payload = (await method(request.payload)).SerializeToString()
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            code, text = _UNKNOWN, "draco: the node agent did not answer in time"
        except DracoError as exc:
            code, text = _UNKNOWN, f"draco: {exc}"
        except Exception as exc:
            log.exception("NRI request failed")
            code, text = _INTERNAL, f"draco: internal error: {exc!r}"
        response = message("ttrpc.Response", payload=payload)
        response.status.code = code
        response.status.message = text
        with contextlib.suppress(NriError):
            self._send(PLUGIN_CONN, msg.stream_id, TYPE_RESPONSE, response.SerializeToString())
            with contextlib.suppress(OSError, ConnectionError):
                await self.writer.drain()

    def _methods(self) -> dict[str, Callable[[bytes], Awaitable[Any]]]:
        return {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "CreateContainer": self._create_container,
            "Shutdown": self._shutdown,
            "StateChange": self._state_change,
        }

    async def _configure(self, payload: bytes) -> Any:
        req = decode("ConfigureRequest", payload)
        if req.request_timeout > 0:
            self.request_timeout = req.request_timeout / 1000
        self.runtime = f"{req.runtime_name}/{req.runtime_version}"
        log.info(
            "NRI plugin configured",
            plugin=f"{self.index}-{self.name}",
            runtime=self.runtime,
            nri_version=req.NRI_version,
            request_timeout=self.request_timeout,
        )
        self.configured.set()
        return message("ConfigureResponse", events=event_mask(CREATE_CONTAINER_EVENT))

    async def _synchronize(self, payload: bytes) -> Any:
        req = decode("SynchronizeRequest", payload)
        self._sync_pods.extend(parse_pod(p) for p in req.pods)
        self._sync_containers.extend(parse_container(c) for c in req.containers)
        if not req.more:
            pods, containers = self._sync_pods, self._sync_containers
            self._sync_pods, self._sync_containers = [], []
            await asyncio.wait_for(self.handler.synchronize(pods, containers), self._deadline())
        return message("SynchronizeResponse", more=req.more)

    async def _create_container(self, payload: bytes) -> Any:
        req = decode("CreateContainerRequest", payload)
        adjust = await asyncio.wait_for(
            self.handler.create_container(parse_pod(req.pod), parse_container(req.container)),
            self._deadline(),
        )
        response = message("CreateContainerResponse")
        if adjust is not None and not adjust.empty:
            response.adjust.CopyFrom(encode_adjustment(adjust))
        return response

    async def _shutdown(self, payload: bytes) -> Any:
        log.info("The runtime asked the NRI plugin to shut down", runtime=self.runtime)
        return message("Empty")

    async def _state_change(self, payload: bytes) -> Any:
        return message("Empty")

    def _deadline(self) -> float:
        return self.request_timeout * _HANDLER_SHARE


@dataclass
class NriPlugin:
    """Keeps a plugin registered with the runtime at `socket_path`, reconnecting as needed."""

    socket_path: Path
    handler: NriHandler
    name: str = "draco"
    index: str = "10"
    reconnect_seconds: float = 1.0
    #: Set while a session is registered and configured (tests and health).
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    #: Called with True when registered, False when the connection is lost (metrics).
    on_state: Callable[[bool], None] | None = None

    def __post_init__(self) -> None:
        if len(self.index) != 2 or not self.index.isdigit():
            raise NriError(f"NRI plugin index {self.index!r} must be two digits (00-99)")

    async def connect(self) -> NriSession:
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
        except OSError as exc:
            raise NriError(
                f"cannot connect to the NRI socket {self.socket_path}: {exc.strerror or exc}"
            ) from exc
        return NriSession(
            reader=reader, writer=writer, handler=self.handler, name=self.name, index=self.index
        )

    async def run(self) -> None:
        """Until cancelled: connect, register, serve; after a disconnection, again."""
        failures = 0
        while True:
            try:
                session = await self.connect()
                await session.run(on_ready=self._on_ready)
                log.warning(
                    "The runtime closed the NRI connection; reconnecting", socket=str(self.socket_path)
                )
                failures = 0
            except (NriError, OSError, ConnectionError) as exc:
                failures += 1
                # The first failure and then every 30th: a runtime that is down stays quiet.
                if failures == 1 or failures % 30 == 0:
                    log.warning("NRI plugin not connected", socket=str(self.socket_path), error=str(exc))
            finally:
                if self.ready.is_set() and self.on_state is not None:
                    self.on_state(False)
                self.ready.clear()
            await asyncio.sleep(self.reconnect_seconds)

    def _on_ready(self) -> None:
        log.info("NRI plugin registered", socket=str(self.socket_path), plugin=f"{self.index}-{self.name}")
        self.ready.set()
        if self.on_state is not None:
            self.on_state(True)
