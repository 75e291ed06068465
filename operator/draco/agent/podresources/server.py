"""The agent's PodResources v1 server: the kubelet's answers plus draco's devices.

Tools that attribute devices to pods (dcgm-exporter, node-feature-discovery's topology
updater) ask the kubelet's PodResources API on ``/var/lib/kubelet/pod-resources/kubelet.sock``;
the kubelet knows only the devices it prepared. The agent serves the same API (gRPC on a
unix socket, service ``v1.PodResourcesLister``) on a socket of its own
(``--pod-resources-socket``), and such a tool pointed at it sees both:

- ``List``: the kubelet's answer (asked on ``--kubelet-pod-resources-socket`` at each
  call, when that socket exists), each pod's containers with draco's devices added
  (`proto`); pods the kubelet did not list (no kubelet socket, or a pod it does not list
  yet) are added with their containers. Without a kubelet socket the answer is every
  pod of the node that is not done, as the kubelet's is;
- ``Get``: the same for one pod; a pod neither knows is the kubelet's error (``pod <name>
  in namespace <namespace> not found``);
- ``GetAllocatableResources``: the kubelet's answer plus draco's devices of this node
  under their device-plugin names (those whose driver names one: NVIDIA's GPUs and MIG
  devices).

When the kubelet does not answer (within 5 s) the answer is draco's part alone and a
warning is logged: a metrics exporter then still labels draco's devices.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, Protocol

import grpc
from grpc import aio

from draco.agent.attribution import PodDevices
from draco.agent.podresources.proto import (
    SERVICE,
    add_pod,
    merge_allocatable,
    message,
    message_class,
    pods_response,
)
from draco.logs import get_logger

__all__ = ["PodResourcesServer", "PodsSource"]

log = get_logger(__name__)

#: How long the kubelet has to answer one call.
KUBELET_TIMEOUT_S: Final = 5.0

_METHODS: Final = {
    "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
    "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
    "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse"),
}


class PodsSource(Protocol):
    """What the server asks about the node's pods (`draco.agent.nodepods.NodePods`)."""

    def devices(self) -> list[PodDevices]: ...

    def pod(self, namespace: str, name: str) -> PodDevices | None: ...

    def allocatable(self) -> list[tuple[str, str]]: ...


def _serialize(msg: Any) -> bytes:
    return bytes(msg.SerializeToString())


class PodResourcesServer:
    """Serves ``v1.PodResourcesLister`` on `socket` (see the module docstring)."""

    def __init__(self, pods: PodsSource, *, socket: Path, kubelet_socket: Path | None) -> None:
        self.pods = pods
        self.socket = socket
        self.kubelet_socket = kubelet_socket
        self._channel: aio.Channel | None = None
        self._kubelet_failing = False
        #: Set once the socket answers.
        self.serving = asyncio.Event()

    async def run(self) -> None:
        handlers: dict[str, Callable[[Any, Any], Awaitable[Any]]] = {
            "List": self.list,
            "Get": self.get,
            "GetAllocatableResources": self.allocatable,
        }
        server = aio.server()
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    SERVICE,
                    {
                        name: grpc.unary_unary_rpc_method_handler(
                            handler,
                            request_deserializer=message_class(_METHODS[name][0]).FromString,
                            response_serializer=_serialize,
                        )
                        for name, handler in handlers.items()
                    },
                ),
            )
        )
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)  # left by an agent that did not stop cleanly
        server.add_insecure_port(f"unix://{self.socket.absolute()}")
        await server.start()
        self.serving.set()
        log.info(
            "Serving PodResources",
            socket=str(self.socket),
            kubelet_socket=str(self.kubelet_socket) if self.kubelet_socket else None,
        )
        try:
            # Wait on a future of our own, not `server.wait_for_termination()`: cancelling
            # that cancels the server's own shutdown future, and the `stop` below then
            # raised CancelledError at once, skipping the unlink (a dead socket left for the
            # next agent and for the tools pointed at it).
            await asyncio.get_running_loop().create_future()
        finally:
            await self._close(server)

    async def _close(self, server: aio.Server) -> None:
        """Stop serving, close the kubelet channel and remove the socket, whatever fails
        or is cancelled on the way: the socket is gone once this returns or raises."""
        try:
            await server.stop(grace=1)
        finally:
            try:
                if self._channel is not None:
                    await self._channel.close()
            finally:
                self._channel = None
                with contextlib.suppress(OSError):
                    self.socket.unlink()

    async def _kubelet(self, method: str, request: Any) -> Any | None:
        """The kubelet's answer, or None when there is no kubelet socket; raises the
        kubelet's error (`aio.AioRpcError`)."""
        if self.kubelet_socket is None or not self.kubelet_socket.exists():
            return None
        if self._channel is None:
            self._channel = aio.insecure_channel(f"unix://{self.kubelet_socket.absolute()}")
        call = self._channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=_serialize,
            response_deserializer=message_class(_METHODS[method][1]).FromString,
        )
        return await call(request, timeout=KUBELET_TIMEOUT_S)

    async def _kubelet_or_none(self, method: str, request: Any) -> Any | None:
        """The kubelet's answer; None (and a warning, once per outage) when it has none."""
        try:
            answer = await self._kubelet(method, request)
        except aio.AioRpcError as err:
            if not self._kubelet_failing:
                log.warning(
                    "The kubelet's PodResources did not answer; answering draco's devices only",
                    method=method,
                    code=err.code().name,
                    error=err.details(),
                )
            self._kubelet_failing = True
            return None
        self._kubelet_failing = False
        return answer

    async def list(self, request: Any, context: Any) -> Any:
        kubelet = await self._kubelet_or_none("List", request)
        return pods_response(self.pods.devices(), kubelet)

    async def get(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        ours = self.pods.pod(request.pod_namespace, request.pod_name)
        try:
            kubelet = await self._kubelet("Get", request)
        except aio.AioRpcError as err:
            if ours is None:
                await context.abort(err.code(), err.details() or "")
            kubelet = None
        if kubelet is None and ours is None:
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        response = message("GetPodResourcesResponse")
        if kubelet is not None:
            response.CopyFrom(kubelet)
        if ours is not None:
            holder = message("ListPodResourcesResponse")
            if response.HasField("pod_resources"):
                holder.pod_resources.add().CopyFrom(response.pod_resources)
            add_pod(holder.pod_resources, ours)
            response.pod_resources.CopyFrom(holder.pod_resources[0])
        return response

    async def allocatable(self, request: Any, context: Any) -> Any:
        response = message("AllocatableResourcesResponse")
        kubelet = await self._kubelet_or_none("GetAllocatableResources", request)
        if kubelet is not None:
            response.CopyFrom(kubelet)
        merge_allocatable(response, self.pods.allocatable())
        return response
