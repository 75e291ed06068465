"""`draco agent`: options, driver construction, signal handling.

    draco agent --node-name worker --driver fake --config devices.yaml
    draco agent --node-name sim --nodes 500 --create-nodes --driver fake --config devices.yaml
    draco agent --node-name "$NODE_NAME" --driver nvidia
    draco agent --node-name "$NODE_NAME" --driver nvidia --nvidia-compat
    draco agent --node-name "$NODE_NAME" --driver nvidia --nvidia-shares memory
    draco agent --node-name "$NODE_NAME" --driver fake --config devices.yaml --nri-socket /var/run/nri/nri.sock

With `--nodes N` the agent simulates nodes `<node-name>-0` ... `<node-name>-<N-1>` (fake
driver only: a real driver sees one machine). `--create-nodes` also creates their Node
objects, for clusters without kubelets (the test control plane, demos).

With `--nri-socket` the agent also registers with the container runtime's NRI socket and
puts the prepared devices of a pod's claims into its containers (`injection`); that takes
a real node, so it is refused with `--nodes`.

With `--health-port` it serves the DaemonSet's probes: `/readyz` once its ResourceSlices
are published for the inventory it read at start (every pool of every node complete, at
its current generation), its claims are listed and, with `--nri-socket`, while it is
registered with the runtime (a container created meanwhile would miss its devices);
`/healthz` while the agent runs.

An agent of one node also watches that node's pods, to say which container holds which
device it prepared: the metric `draco_device_allocation` (`draco.agent.nodepods`) and,
with `--pod-resources-socket`, the kubelet's PodResources API served on a socket of its
own with draco's devices added (`draco.agent.podresources`), for dcgm-exporter and
other tools that attribute devices to pods.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from draco.agent.drivers.base import DeviceDriver
from draco.agent.injection import ClaimInjector
from draco.agent.main import Agent, AgentConfig
from draco.agent.metrics import NRI_CONNECTED, register_nri
from draco.agent.nodepods import AllocationCollector, NodePods
from draco.agent.nri import NriPlugin
from draco.agent.podresources import DEFAULT_KUBELET_SOCKET
from draco.errors import AgentError, UnsupportedServerError
from draco.kube.capabilities import require_supported_server
from draco.kube.client import RESOURCE_CLAIMS, connect
from draco.kube.delegated import DelegatedAuthorizer
from draco.kube.reachable import until_answered
from draco.logs import get_logger
from draco.runtime.health import Health, serve_health
from draco.runtime.metrics import REGISTRY
from draco.runtime.metricsserver import add_metrics_arguments, metrics_serving, serve_metrics

__all__ = ["build_parser", "main"]

log = get_logger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="draco agent", description="Publish a node's devices and prepare its claims."
    )
    p.add_argument(
        "--node-name", required=True, help="this node's name (with --nodes: the prefix of the names)"
    )
    p.add_argument("--nodes", type=int, default=1, help="simulate N nodes <node-name>-<i> (fake driver only)")
    p.add_argument(
        "--driver",
        action="append",
        choices=("fake", "nvidia"),
        help="device driver; repeat for several (default: fake)",
    )
    p.add_argument(
        "--config", type=Path, help="the fake driver's device file (YAML, re-read when it changes)"
    )
    p.add_argument(
        "--nvidia-compat",
        action="store_true",
        help="publish NVIDIA GPUs under NVIDIA's driver name gpu.nvidia.com (drop-in for NVIDIA's DRA "
        "driver's device classes, selectors and GpuConfig configs) instead of gpu.nvidia.draco.dev",
    )
    p.add_argument(
        "--nvml-replay",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="run the nvidia driver on a recording of NVML's answers instead of the real NVML "
        "(tests and demos without a GPU); repeat to add files",
    )
    p.add_argument(
        "--nvidia-dev-root",
        type=Path,
        default=Path("/dev"),
        metavar="DIR",
        help="the host folder holding the NVIDIA device nodes containers get (default: /dev)",
    )
    p.add_argument(
        "--nvidia-shares",
        metavar="MODE[:GPUS]",
        help="publish GPUs as shared devices, their memory consumable capacity: memory (a claim without a "
        "memory request takes the whole GPU) or unlimited (it takes none), optionally for some GPUs only "
        "(:0,1 or :GPU-uuid,...); default off",
    )
    p.add_argument(
        "--nvidia-taint-effect",
        choices=("NoSchedule", "NoExecute"),
        default="NoSchedule",
        help="the effect of an unhealthy GPU's taint: NoSchedule (keep its pods, as NVIDIA's driver) or "
        "NoExecute (evict them)",
    )
    p.add_argument(
        "--nvidia-mps-shm-dir",
        type=Path,
        metavar="HOST_DIR",
        help="the host folder mounted as the agent's /dev/shm, shared with MPS clients; without it a "
        "GpuConfig with sharing strategy MPS is refused",
    )
    p.add_argument(
        "--nvidia-health-events",
        type=Path,
        metavar="FILE",
        help="also read GPU health events appended to FILE: '<gpu> xid <n>', '<gpu> lost', '<gpu> recovered'",
    )
    p.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"), help="where CDI specs go")
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path("/var/lib/draco-agent"),
        help="checkpoint and device metadata files",
    )
    p.add_argument(
        "--binding-conditions",
        action="store_true",
        help="devices declare the binding condition draco.dev/prepared (default of the fake file, NVIDIA devices)",
    )
    p.add_argument(
        "--create-nodes", action="store_true", help="create the Node objects (clusters without kubelets)"
    )
    add_metrics_arguments(p, port=0)
    p.add_argument(
        "--health-port", type=int, default=0, help="serve /healthz and /readyz on this port (0: off)"
    )
    p.add_argument(
        "--resync-seconds", type=float, default=60.0, help="re-check every pool and claim this often"
    )
    p.add_argument("--workers", type=int, default=8, help="concurrent pool and claim syncs")
    p.add_argument(
        "--poll-interval", type=float, default=0.5, help="how often the fake device file is checked"
    )
    p.add_argument(
        "--nri-socket",
        type=Path,
        help="the container runtime's NRI socket (containerd: /var/run/nri/nri.sock): inject claimed "
        "devices into containers (default: off)",
    )
    p.add_argument(
        "--pod-resources-socket",
        type=Path,
        help="serve the kubelet's PodResources v1 API on this unix socket, with draco's devices added "
        "(point dcgm-exporter at it; default: off)",
    )
    p.add_argument(
        "--kubelet-pod-resources-socket",
        type=Path,
        default=DEFAULT_KUBELET_SOCKET,
        help="the kubelet's PodResources socket, whose answers --pod-resources-socket passes on "
        "(default: /var/lib/kubelet/pod-resources/kubelet.sock; used when it exists)",
    )
    p.add_argument(
        "--nri-plugin-index",
        default="10",
        help="two digits: the plugin's place among the runtime's NRI plugins",
    )
    return p


Watcher = Callable[[Callable[[], None]], Coroutine[Any, Any, None]]


def make_drivers(args: argparse.Namespace) -> tuple[list[DeviceDriver], list[Watcher]]:
    kinds = args.driver or ["fake"]
    drivers: list[DeviceDriver] = []
    watchers: list[Watcher] = []
    if "fake" in kinds:
        from draco.agent.drivers.fake import load_fake_drivers

        if args.config is None:
            raise AgentError("the fake driver needs its device file: pass --config devices.yaml")
        fakes, watcher = load_fake_drivers(
            args.config, binding_conditions=args.binding_conditions, interval=args.poll_interval
        )
        drivers.extend(fakes)
        watchers.append(watcher.run)
    if "nvidia" in kinds:
        if args.nodes != 1:
            raise AgentError("--nodes simulates nodes with the fake driver only; NVML sees this machine")
        from draco.agent.drivers.nvidia import (
            NVIDIA_COMPAT_DRIVER_NAME,
            NVIDIA_DRIVER_NAME,
            NvidiaDriver,
            NvidiaOptions,
        )
        from draco.agent.drivers.nvidia_shares import SharePolicy

        options = NvidiaOptions(
            shares=SharePolicy.parse(args.nvidia_shares),
            taint_effect=args.nvidia_taint_effect,
            mps_dir=args.state_dir / "nvidia-mps",
            mps_shm_dir=args.nvidia_mps_shm_dir,
            health_events=args.nvidia_health_events,
        )
        drivers.append(
            NvidiaDriver.from_nvml(
                binding_conditions=args.binding_conditions,
                name=NVIDIA_COMPAT_DRIVER_NAME if args.nvidia_compat else NVIDIA_DRIVER_NAME,
                replay=args.nvml_replay,
                dev_root=args.nvidia_dev_root,
                options=options,
            )
        )
    names = [d.name for d in drivers]
    if len(set(names)) != len(names):
        raise AgentError(f"two drivers publish the same driver name: {sorted(names)}")
    return drivers, watchers


def node_names(prefix: str, count: int) -> list[str]:
    if count < 1:
        raise AgentError("--nodes must be at least 1")
    return [prefix] if count == 1 else [f"{prefix}-{i}" for i in range(count)]


def nri_plugin(
    agent: Agent, *, socket: Path, index: str, on_state: Callable[[bool], None] | None = None
) -> NriPlugin:
    """The NRI plugin that injects the agent's prepared claims on its (only) node."""
    (preparer,) = agent.preparers.values()

    def lookup(namespace: str, name: str) -> dict[str, Any] | None:
        for obj in list(agent.claims.values()):
            meta = obj["metadata"]
            if meta.get("name") == name and meta.get("namespace") == namespace:
                return obj
        return None

    async def fetch(namespace: str, name: str) -> dict[str, Any] | None:
        return await agent.kube.get_or_none(RESOURCE_CLAIMS, name, namespace=namespace)

    register_nri()

    def state(up: bool) -> None:
        NRI_CONNECTED.set(1 if up else 0)
        if on_state is not None:
            on_state(up)

    injector = ClaimInjector(preparer=preparer, lookup=lookup, fetch=fetch, synced=agent.claims_listed)
    return NriPlugin(
        socket_path=socket,
        handler=injector,
        index=index,
        on_state=state,
    )


def _attribution(agent: Agent, args: argparse.Namespace) -> list[Coroutine[Any, Any, None]]:
    """The node's pods watched, `draco_device_allocation` registered and, when asked for,
    the PodResources server (its gRPC imported only then)."""
    pods = NodePods(agent)
    REGISTRY.register(AllocationCollector(pods))
    runs = [pods.run()]
    if args.pod_resources_socket is not None:
        from draco.agent.podresources.server import PodResourcesServer

        server = PodResourcesServer(
            pods, socket=args.pod_resources_socket, kubelet_socket=args.kubelet_pod_resources_socket
        )
        runs.append(server.run())
    return runs


async def _mark_when(health: Health, name: str, event: asyncio.Event) -> None:
    await event.wait()
    health.mark_ready(name)


async def run(args: argparse.Namespace) -> None:
    drivers, watchers = make_drivers(args)
    config = AgentConfig(
        nodes=node_names(args.node_name, args.nodes),
        drivers=drivers,
        cdi_dir=args.cdi_dir,
        state_dir=args.state_dir,
        create_nodes=args.create_nodes,
        resync_seconds=args.resync_seconds,
        workers=args.workers,
        watchers=watchers,
    )
    if args.nri_socket is not None and args.nodes != 1:
        raise AgentError("--nri-socket serves one real node; it cannot be used with --nodes")
    if args.pod_resources_socket is not None and args.nodes != 1:
        raise AgentError("--pod-resources-socket serves one real node; it cannot be used with --nodes")
    kube = await connect(field_manager="draco-agent")
    probes = None
    try:
        try:
            await until_answered(lambda: require_supported_server(kube), what="read the server version")
        except UnsupportedServerError as exc:
            raise AgentError(str(exc)) from exc
        agent = Agent(config, kube=kube)
        health = Health()
        health.require("slices-published")
        health.require("claims-listed")
        runs = [
            agent.run(),
            _mark_when(health, "slices-published", agent.slices_published),
            _mark_when(health, "claims-listed", agent.claims_listed),
        ]
        if args.nri_socket is not None:
            health.require("nri-registered")

            def nri_state(up: bool) -> None:
                (health.mark_ready if up else health.require)("nri-registered")

            plugin = nri_plugin(
                agent, socket=args.nri_socket, index=args.nri_plugin_index, on_state=nri_state
            )
            runs.append(plugin.run())
        if len(config.nodes) == 1:
            runs.extend(_attribution(agent, args))

        async def all_of() -> object:
            return await asyncio.gather(*runs)

        task = asyncio.create_task(all_of())
        health.watch("agent", task)
        if args.health_port:
            probes = await serve_health(health, port=args.health_port)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        log.info("Agent stopped")
    finally:
        if probes is not None:
            await probes.cleanup()
        for driver in drivers:
            driver.close()
        await kube.close()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    serve_metrics(
        metrics_serving(args, prog="draco agent"), component="agent", authorizer=DelegatedAuthorizer.connect
    )
    try:
        asyncio.run(run(args))
    except AgentError as exc:
        log.error("Agent cannot run", error=str(exc))
        return 1
    return 0
