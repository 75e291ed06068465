"""`draco operator`: run every controller of the operator in this process with Kopf.

Logging is already configured by `draco.cli` (structlog JSON by default); Kopf is started
with `kopf.operator(...)`, which, unlike the `kopf run` command, leaves logging alone, so
Kopf's own records go through our handler and format. Metrics are served on
`--metrics-port` (`draco.runtime.metricsserver`: plain HTTP on 127.0.0.1, or with
`--metrics-secure` HTTPS to callers the API server authorizes), the probes (`/healthz`,
`/readyz`) on `--health-port`, a port of their own.

With `--leader-elect` (the default) the process first takes the `draco-operator` Lease
(`draco.kube.leader`) and only then starts Kopf: a standby runs no controller, no watch,
no cache, so it cannot write anything. It serves its probes and metrics meanwhile (ready,
not leading). Losing the lease exits the process at once (status 1), as client-go's
controllers do; the Deployment restarts it as a standby. A clean stop (SIGTERM) stops
Kopf first, then releases the Lease so a standby takes over without waiting it out.
Kopf's own peering stays off (`standalone=True`): it is not a lock.

The event loop is uvloop's when it is installed (a dependency on Linux), as `kopf run`
chooses: its transports and TLS are compiled, and most of the operator's CPU goes to
API requests and watch events.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable, Sequence

import kopf

from draco.errors import UnsupportedServerError
from draco.kube.capabilities import require_supported_server
from draco.kube.client import connect
from draco.kube.delegated import DelegatedAuthorizer
from draco.kube.leader import (
    DEFAULT_LEASE_NAME,
    ElectionConfig,
    ElectionThread,
    default_identity,
    default_lease_namespace,
)
from draco.kube.reachable import until_answered
from draco.logs import get_logger
from draco.operator.options import OperatorOptions
from draco.runtime.health import Health, serve_health
from draco.runtime.metricsserver import add_metrics_arguments, metrics_serving, serve_metrics
from draco.runtime.offload import shutdown_shared
from draco.runtime.taskdump import install_task_dump

__all__ = ["LOST_LEADERSHIP_EXIT", "build_parser", "main", "parse_options"]

log = get_logger(__name__)

#: The exit status after the lease was lost (the Deployment restarts the container).
LOST_LEADERSHIP_EXIT = 1


def _flag(value: str) -> bool:
    """`--leader-elect=true|false` as Kubernetes components spell booleans."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {value!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draco operator",
        description="Run the draco operator: claims from templates, allocation, lifecycle.",
    )
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="act only on pods and claims of this namespace (repeatable; Kopf glob patterns allowed); "
        "default: all. Allocation still sees every claim, pod and node of the cluster",
    )
    add_metrics_arguments(parser, port=8080)
    parser.add_argument("--health-port", type=int, default=8081, help="/healthz and /readyz port (0: off)")
    parser.add_argument(
        "--workers",
        type=int,
        default=16,
        help="workers per work queue; allocation runs four times as many (default 16)",
    )
    parser.add_argument(
        "--placement-policy",
        choices=("scheduler", "pack", "spread", "first"),
        default="scheduler",
        help="how to choose among nodes that fit: kube-scheduler's default scores (scheduler), most "
        "devices in use first (pack), fewest first (spread), each with the scores between equals; "
        "or the first by name, unscored (first)",
    )
    parser.add_argument(
        "--refusal-grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long kube-scheduler's refusal of a pod on the node draco pinned it to must last "
        "before draco releases the pod's devices and places it again (default 5)",
    )
    _add_wait_flags(parser)
    _add_group_flags(parser)
    _add_leader_flags(parser)
    _add_feature_flags(parser)
    _add_stall_flags(parser)
    _add_autoscaling_flags(parser)
    return parser


def _add_feature_flags(parser: argparse.ArgumentParser) -> None:
    """Flags that turn a controller's feature off."""
    parser.add_argument(
        "--no-device-taint-eviction",
        action="store_true",
        help="do not delete pods whose devices carry a NoExecute taint, nor write DeviceTaintRule status",
    )
    parser.add_argument(
        "--no-extended-resources",
        action="store_true",
        help="do not map pods' extended-resource requests to DeviceClasses (no special claims) "
        "nor advertise those resources on the Nodes; such pods are left to the scheduler",
    )


def _add_wait_flags(parser: argparse.ArgumentParser) -> None:
    """How long a pod waits for its devices' binding conditions, and for its victims."""
    parser.add_argument(
        "--binding-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long a pod waits for its devices' binding conditions before the allocation is "
        "cleared and retried (default 600, as upstream)",
    )
    parser.add_argument(
        "--preemption-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long a pod that preempted waits for its victims to go before preemption is "
        "decided again (default 60; docs/preemption.md)",
    )


def _add_group_flags(parser: argparse.ArgumentParser) -> None:
    """Flags of groups of pods placed all or nothing (docs/pods.md, "Groups of pods")."""
    parser.add_argument(
        "--group-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long a group of pods placed all or nothing may hold devices without all of them "
        "released (binding conditions pending, writes failing) before it is released whole and placed "
        "again (default 60; a coscheduling PodGroup's scheduleTimeoutSeconds wins)",
    )


def _add_leader_flags(parser: argparse.ArgumentParser) -> None:
    """Flags of leader election (the Lease that keeps replicas from acting at once)."""
    parser.add_argument(
        "--leader-elect",
        type=_flag,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="take a Lease before running the controllers, so replicas never act at once "
        "(default true; --leader-elect=false runs at once, for a single replica)",
    )
    parser.add_argument(
        "--leader-election-namespace",
        default=None,
        metavar="NS",
        help="namespace of the Lease (default: the pod's own namespace, else 'default')",
    )
    parser.add_argument(
        "--leader-election-id",
        default=DEFAULT_LEASE_NAME,
        metavar="NAME",
        help=f"name of the Lease (default {DEFAULT_LEASE_NAME}); every operator of a cluster must use the same",
    )


def _add_autoscaling_flags(parser: argparse.ArgumentParser) -> None:
    """Flags of the autoscaling controller (docs/autoscaling.md)."""
    group = parser.add_argument_group("autoscaling")
    group.add_argument(
        "--autoscaling",
        action="store_true",
        help="make the device demand of pods that fit nowhere visible to Karpenter and "
        "cluster-autoscaler (demand pods asking for the devices' extended resources), and keep "
        "nodes whose devices are in use from scale-down",
    )
    group.add_argument(
        "--autoscaling-namespace",
        default=None,
        metavar="NS",
        help="where demand pods live and node-template ConfigMaps are read (default: the pod's own "
        "namespace, else 'default')",
    )
    group.add_argument(
        "--autoscaling-provisioning-requests",
        action="store_true",
        help="a group of pods placed all or nothing asks cluster-autoscaler for its nodes with one "
        "ProvisioningRequest (best-effort-atomic-scale-up) instead of a demand pod per member",
    )


def _add_stall_flags(parser: argparse.ArgumentParser) -> None:
    """Flags that keep long work from stalling the event loop (kept apart from the others)."""
    group = parser.add_argument_group("long work")
    group.add_argument(
        "--allocation-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="wall-clock budget of one allocation attempt (evaluating the claims' CEL selectors "
        "and searching for devices, off the event loop), like the scheduler's DRA filter timeout "
        "upstream; when it runs out the pod gets a FailedScheduling Warning saying so and is "
        "retried with backoff (default 10, as upstream; 0: no budget)",
    )


def parse_options(argv: Sequence[str]) -> OperatorOptions:
    args = build_parser().parse_args(list(argv))
    if args.workers < 1:
        raise SystemExit("draco operator: --workers must be at least 1")
    if args.binding_timeout <= 0:
        raise SystemExit("draco operator: --binding-timeout must be more than 0 seconds")
    if args.preemption_timeout <= 0:
        raise SystemExit("draco operator: --preemption-timeout must be more than 0 seconds")
    if args.group_timeout <= 0:
        raise SystemExit("draco operator: --group-timeout must be more than 0 seconds")
    if args.allocation_timeout < 0:
        raise SystemExit("draco operator: --allocation-timeout must be 0 (none) or more seconds")
    return OperatorOptions(
        namespaces=tuple(args.namespace),
        metrics=metrics_serving(args, prog="draco operator"),
        health_port=args.health_port,
        workers=args.workers,
        placement_policy=args.placement_policy,
        refusal_grace_s=args.refusal_grace,
        binding_timeout_s=args.binding_timeout,
        preemption_timeout_s=args.preemption_timeout,
        group_timeout_s=args.group_timeout,
        device_taint_eviction=not args.no_device_taint_eviction,
        extended_resources=not args.no_extended_resources,
        leader_elect=args.leader_elect,
        leader_election_namespace=args.leader_election_namespace or default_lease_namespace(),
        leader_election_id=args.leader_election_id,
        allocation_timeout_s=args.allocation_timeout,
        autoscaling=args.autoscaling or args.autoscaling_provisioning_requests,
        autoscaling_namespace=args.autoscaling_namespace or default_lease_namespace(),
        autoscaling_provisioning_requests=args.autoscaling_provisioning_requests,
    )


async def run(options: OperatorOptions) -> None:
    """Run the operator until SIGINT/SIGTERM (Kopf handles the signals once it runs)."""
    import draco.operator  # noqa: F401  (registers every handler with Kopf)

    install_task_dump(asyncio.get_running_loop())
    await _require_supported_server()
    memo = kopf.Memo()
    memo.options = options
    # Shared before any startup handler runs, so every part can add readiness conditions.
    health = Health()
    memo.health = health
    election: ElectionThread | None = None
    if options.leader_elect:
        if options.health_port:
            # Served before the election: a standby answers its probes too.
            memo.health_runner = await serve_health(health, port=options.health_port)
        election = ElectionThread(
            ElectionConfig(
                name=options.leader_election_id,
                namespace=options.leader_election_namespace,
                identity=default_identity(),
            ),
            on_lost=_exit_lost_leadership,
        )
        health.describe("leader", lambda: election.leading if election else True)
        election.start()
        watch = asyncio.create_task(_watch_election(election), name="leader-election")
        health.watch("leader-election", watch)
        if not await _until_leading(election):
            died = not election.alive
            watch.cancel()
            await asyncio.get_running_loop().run_in_executor(None, election.stop)
            runner = memo.get("health_runner")
            if runner is not None:
                await runner.cleanup()
            if died:
                raise SystemExit(f"draco operator: leader election stopped: {election.error!r}")
            return
    try:
        # Kopf watches every namespace: allocation must see the whole cluster (see
        # `OperatorOptions`); the handlers themselves keep to `options.namespaces`.
        await kopf.operator(standalone=True, clusterwide=True, memo=memo)
    finally:
        shutdown_shared()  # the CEL worker process and the threads, once every handler is done
        if election is not None:
            # Only now, with every controller stopped: a standby may start at once.
            watch.cancel()
            await asyncio.get_running_loop().run_in_executor(None, election.stop)


async def _require_supported_server() -> None:
    """Refuse to start, saying why, against a Kubernetes draco cannot run on."""
    kube = await connect()
    try:
        await until_answered(lambda: require_supported_server(kube), what="read the server version")
    except UnsupportedServerError as exc:
        raise SystemExit(f"draco operator: {exc}") from exc
    finally:
        await kube.close()


async def _until_leading(election: ElectionThread) -> bool:
    """Wait for the lease; False when SIGTERM/SIGINT came first (or the election died)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        leading = asyncio.create_task(election.wait_leading())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({leading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not leading.done():
            leading.cancel()
            log.info("Stopped while waiting for leadership")
            return False
        return leading.result() and not stop.is_set()
    finally:
        # Kopf installs its own handlers for the same signals.
        for sig in signals:
            loop.remove_signal_handler(sig)


async def _watch_election(election: ElectionThread) -> None:
    """Ends (so /healthz fails) once the election thread died or stopped renewing."""
    while True:
        await asyncio.sleep(1.0)
        if not election.healthy():
            break
    log.error("Leader election is not healthy", error=repr(election.error) if election.error else None)


def _exit_lost_leadership() -> None:
    """Stop every controller now: another replica may already be leading."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(LOST_LEADERSHIP_EXIT)


def main(argv: Sequence[str]) -> int:
    options = parse_options(argv)
    serve_metrics(options.metrics, component="operator", authorizer=DelegatedAuthorizer.connect)
    loop_factory = _loop_factory()
    log.info(
        "Starting operator",
        event_loop="asyncio" if loop_factory is None else "uvloop",
        namespaces=list(options.namespaces) or "all",
        metrics_port=options.metrics.port,
        metrics_secure=options.metrics.secure,
        health_port=options.health_port,
        placement_policy=options.placement_policy,
        device_taint_eviction=options.device_taint_eviction,
        extended_resources=options.extended_resources,
        leader_elect=options.leader_elect,
        lease=f"{options.leader_election_namespace}/{options.leader_election_id}"
        if options.leader_elect
        else None,
    )
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run(options))
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None  # asyncio's own loop
    return uvloop.new_event_loop
