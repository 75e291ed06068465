"""`draco operator`: run every controller of the operator in this process with Kopf.

Logging is already configured by `draco.cli` (structlog JSON by default); Kopf is started
with `kopf.operator(...)`, which, unlike the `kopf run` command, leaves logging alone, so
Kopf's own records go through our handler and format. Metrics are served on
`--metrics-port`, the probes (`/healthz`, `/readyz`) on `--health-port`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

import kopf

from draco.logs import get_logger
from draco.operator.options import OperatorOptions
from draco.runtime.health import Health
from draco.runtime.metrics import serve_metrics

__all__ = ["build_parser", "main", "parse_options"]

log = get_logger(__name__)


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
        help="serve only this namespace (repeatable; Kopf glob patterns allowed); default: all",
    )
    parser.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port (0: off)")
    parser.add_argument("--health-port", type=int, default=8081, help="/healthz and /readyz port (0: off)")
    parser.add_argument("--workers", type=int, default=8, help="workers per work queue (default 8)")
    parser.add_argument(
        "--placement-policy",
        choices=("first", "pack", "spread"),
        default="first",
        help="how to choose among nodes that fit: first by name, most used (pack), least used (spread)",
    )
    parser.add_argument(
        "--binding-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long a pod waits for its devices' binding conditions before the allocation is "
        "cleared and retried (default 600, as upstream)",
    )
    return parser


def parse_options(argv: Sequence[str]) -> OperatorOptions:
    args = build_parser().parse_args(list(argv))
    if args.workers < 1:
        raise SystemExit("draco operator: --workers must be at least 1")
    if args.binding_timeout <= 0:
        raise SystemExit("draco operator: --binding-timeout must be more than 0 seconds")
    return OperatorOptions(
        namespaces=tuple(args.namespace),
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        workers=args.workers,
        placement_policy=args.placement_policy,
        binding_timeout_s=args.binding_timeout,
    )


async def run(options: OperatorOptions) -> None:
    """Run the operator until SIGINT/SIGTERM (Kopf handles the signals)."""
    import draco.operator  # noqa: F401  (registers every handler with Kopf)

    memo = kopf.Memo()
    memo.options = options
    # Shared before any startup handler runs, so every part can add readiness conditions.
    memo.health = Health()
    await kopf.operator(
        standalone=True,
        clusterwide=not options.namespaces,
        namespaces=options.namespaces,
        memo=memo,
    )


def main(argv: Sequence[str]) -> int:
    options = parse_options(argv)
    serve_metrics(port=options.metrics_port)
    log.info(
        "Starting operator",
        namespaces=list(options.namespaces) or "all",
        metrics_port=options.metrics_port,
        health_port=options.health_port,
        placement_policy=options.placement_policy,
    )
    asyncio.run(run(options))
    return 0
