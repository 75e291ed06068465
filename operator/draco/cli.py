"""The `draco` command: one entry point, one subcommand per process we ship.

    draco operator   the control plane (Kopf): claims, allocation, lifecycle
    draco webhook    admission for draco's kinds: validation and defaults (HTTPS)
    draco agent      the node agent: publishes ResourceSlices, prepares devices
    draco simulate   offline allocation: why does (or doesn't) a claim fit?
    draco top        what is free and who holds what, per node and class; who waits and why
    draco crds       print the CustomResourceDefinitions generated from the models
    draco dev        a local control plane (etcd + kube-apiserver) for tests and demos

Global options (`--log-format`, `--log-level`) come before the subcommand and configure
logging once; everything after the subcommand belongs to it. Each subcommand lives in its
own package as `main(argv) -> int` and is imported only when chosen, so `draco --help`
stays fast and one broken optional extra (NVML, say) cannot break the others.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from draco import __version__
from draco.logs import configure_logging

__all__ = ["main"]

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "operator": ("draco.operator.cli", "run the operator (claims, allocation, lifecycle)"),
    "webhook": ("draco.webhook.cli", "serve admission for draco's kinds (validation, defaults)"),
    "agent": ("draco.agent.cli", "run the node agent (publish devices, prepare claims)"),
    "simulate": ("draco.tools.simulate", "allocate claims offline from YAML and explain the outcome"),
    "top": (
        "draco.tools.top.cli",
        "what is free and who holds what, per node and class; the pods waiting and why",
    ),
    "crds": ("draco.api.cli", "print or write the CustomResourceDefinitions"),
    "dev": ("draco.tools.dev.cli", "start a local control plane (etcd + kube-apiserver) for development"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draco",
        description="Kubernetes Dynamic Resource Allocation for any cluster.",
        epilog="Run `draco <command> --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"draco {__version__}")
    parser.add_argument(
        "--log-format",
        choices=("json", "text"),
        default="json",
        help="json: one JSON object per line (default); text: human-readable",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING or ERROR")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Split at the subcommand: what follows it is parsed by the subcommand itself.
    split = next((i for i, a in enumerate(args) if a in SUBCOMMANDS), len(args))
    options = parser.parse_args(args[: split + 1])
    if options.command is None:
        parser.print_help()
        return 2
    try:
        configure_logging(fmt=options.log_format, level=options.log_level)
    except ValueError as exc:
        parser.error(str(exc))
    module = importlib.import_module(SUBCOMMANDS[options.command][0])
    entry: Callable[[list[str]], int] = module.main
    return entry(args[split + 1 :])


if __name__ == "__main__":
    sys.exit(main())
