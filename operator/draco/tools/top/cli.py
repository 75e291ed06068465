"""``draco top``: what is free and who holds what, per node and per DeviceClass, and the pods
that wait for devices and why.

    draco top [--kubeconfig FILE] [--context NAME] [-n NAMESPACE] [--node NODE] [-o json]

It reads the API as kubectl does (``--kubeconfig``, else ``$KUBECONFIG``, the in-cluster
service account or ``~/.kube/config``; ``--context``): draco's DeviceClasses,
ResourceSlices, DeviceTaintRules, ResourceClaims and templates, and the pods, Events and
PodGroups, one LIST each, and computes the view (`draco.tools.top.view`) as the operator's
allocation sees the cluster. Nothing is written. It needs to list those cluster-wide
(the pool counts need every allocated claim); ``-n`` only narrows what is shown to one
namespace's holders and waiting pods.

Exit status: 0, or 1 when the cluster cannot be read (the message says why).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from collections.abc import Sequence

from draco.api.constants import KIND_POD_GROUP, PLURAL_POD_GROUPS, SCHEDULING_GROUP, SCHEDULING_VERSION
from draco.errors import DracoError, NotFoundError
from draco.kube.client import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    EVENTS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Kube,
    Obj,
    Resource,
)
from draco.kube.config import load_configuration, new_api_client
from draco.tools.top.render import render
from draco.tools.top.view import Objects, build

__all__ = ["main"]

#: (Not `draco.operator.informers`'s: importing the operator's package starts loading Kopf.)
POD_GROUPS = Resource(SCHEDULING_GROUP, SCHEDULING_VERSION, PLURAL_POD_GROUPS, KIND_POD_GROUP, True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draco top",
        description="What is free and who holds what, per node and per DeviceClass, and the pods that wait "
        "for devices and why (read from the API, as the operator's allocation sees it).",
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="the kubeconfig to use (as kubectl's flag)")
    parser.add_argument("--context", metavar="NAME", help="the kubeconfig context to use (as kubectl's flag)")
    parser.add_argument(
        "-n",
        "--namespace",
        help="show only this namespace's holders and waiting pods (the counts stay the cluster's)",
    )
    parser.add_argument("--node", help="show only this node's pools and devices")
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="tables (default) or JSON (every device)",
    )
    return parser


async def _list(kube: Kube, resource: Resource, *, optional: bool = False) -> list[Obj]:
    try:
        return await kube.list(resource)
    except NotFoundError:
        if optional:
            return []  # (the kind is not served: PodGroups' CRD not installed)
        raise


async def read(kube: Kube) -> Objects:
    """One LIST of each kind `draco top` reads, at once."""
    classes, slices, rules, claims, templates, pods, events, groups = await asyncio.gather(
        _list(kube, DEVICE_CLASSES),
        _list(kube, RESOURCE_SLICES),
        _list(kube, DEVICE_TAINT_RULES),
        _list(kube, RESOURCE_CLAIMS),
        _list(kube, RESOURCE_CLAIM_TEMPLATES),
        _list(kube, PODS),
        _list(kube, EVENTS),
        _list(kube, POD_GROUPS, optional=True),
    )
    return Objects(
        classes=classes,
        slices=slices,
        taint_rules=rules,
        claims=claims,
        templates=templates,
        pods=pods,
        events=events,
        pod_groups=groups,
    )


async def _run(args: argparse.Namespace) -> str:
    configuration = await load_configuration(kubeconfig=args.kubeconfig, context=args.context)
    kube = Kube(await new_api_client(configuration))
    try:
        objects = await read(kube)
    finally:
        await kube.close()
    top = build(objects, now=datetime.datetime.now(datetime.UTC), node=args.node, namespace=args.namespace)
    return json.dumps(top.to_json(), indent=2) + "\n" if args.output == "json" else render(top)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        out = asyncio.run(_run(args))
    except DracoError as exc:
        print(f"draco top: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(out)
    return 0
