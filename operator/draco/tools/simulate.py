"""``draco simulate``: allocate claims offline and explain why they do (or do not) fit.

Users pipe what the cluster has into it (``kubectl get resourceslices,deviceclasses,
resourceclaims,nodes -o yaml``), or point it at manifests, and get back the claims with
``status.allocation`` filled in, exactly as the operator would write them, or an
explanation of what kept them from fitting. No cluster access, no side effects: it runs
the same allocator the operator embeds.

    draco simulate -f FILE... [--node NAME] [--claim NS/NAME]... [-o yaml|json]

Inputs (multi-document YAML/JSON or ``kind: List``, ``-`` for stdin): DeviceClasses,
ResourceSlices, ResourceClaims (those with ``status.allocation`` count as in use),
optionally DeviceTaintRules and Nodes (for labels), in ``resource.k8s.io/v1`` or
``resource.draco.dev/v1``. Without Nodes, the nodes are those the slices name, plus
``--node``. The claims without an allocation (or those named by ``--claim``) are
allocated together as one pod, on ``--node`` or on the first node (by name) that fits.

Exit status: 0 all allocated, 1 they do not fit (explanation on stderr), 2 invalid
input (error on stderr), 3 the search budget ran out before the answer was known.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from draco.allocator import Allocated, Inventory, Node, Placement, SearchBudget, allocate, place
from draco.allocator.outcome import DEFAULT_MAX_STEPS, DEFAULT_MAX_TOTAL_STEPS
from draco.api import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceSlice,
    iter_documents,
    load_object,
)
from draco.errors import AllocationInputError, AllocationTimeoutError, DracoError, InvalidObjectError

__all__ = ["main"]

EXIT_ALLOCATED = 0
EXIT_UNFIT = 1
EXIT_INVALID = 2
EXIT_TIMEOUT = 3

_RESOURCE_GROUPS = ("resource.k8s.io", "resource.draco.dev")


class _InputError(Exception):
    """Input the simulator cannot use; the message says what to fix."""


@dataclass
class _Objects:
    classes: list[DeviceClass] = field(default_factory=list)
    slices: list[ResourceSlice] = field(default_factory=list)
    claims: list[ResourceClaim] = field(default_factory=list)
    rules: list[DeviceTaintRule] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draco simulate",
        description="Allocate ResourceClaims offline, as the operator would, and explain the outcome.",
        epilog=(
            "Example: kubectl get deviceclasses,resourceslices,resourceclaims,nodes -A -o yaml | "
            "draco simulate -f - -f my-claim.yaml. Exit status: 0 allocated, 1 does not fit, "
            "2 invalid input, 3 search budget exhausted."
        ),
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML/JSON file with DeviceClasses, ResourceSlices, ResourceClaims, DeviceTaintRules, Nodes ('-': stdin)",
    )
    parser.add_argument(
        "--node", help="allocate on this node only (default: the first node, by name, that fits)"
    )
    parser.add_argument(
        "--claim",
        action="append",
        default=[],
        metavar="NS/NAME",
        help="allocate these claims (default: every claim without an allocation); repeatable",
    )
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format")
    parser.add_argument(
        "--policy",
        choices=("first", "pack", "spread"),
        default="first",
        help="node choice without --node: first fit by name, pack (busiest first), spread (idlest first)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=DEFAULT_MAX_STEPS,
        help=f"search budget per node, in candidate devices tried (default {DEFAULT_MAX_STEPS})",
    )
    return parser


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise _InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _load(paths: Sequence[str]) -> _Objects:
    objects = _Objects()
    for path in paths:
        text = _read(path)
        try:
            documents = list(iter_documents(text))
        except yaml.YAMLError as exc:
            raise _InputError(f"{path}: not valid YAML or JSON: {exc}") from None
        except InvalidObjectError as exc:
            raise _InputError(f"{path}: {exc}") from None
        for document in documents:
            _add(objects, document, path=path)
    return objects


def _add(objects: _Objects, document: Mapping[str, Any], *, path: str) -> None:
    kind = document.get("kind")
    api_version = str(document.get("apiVersion") or "")
    if kind == "Node" and api_version == "v1":
        metadata = document.get("metadata") or {}
        name = str(metadata.get("name") or "")
        if not name:
            raise _InputError(f"{path}: a Node without metadata.name")
        labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
        objects.nodes[name] = Node(name, labels)
        return
    if api_version.split("/", 1)[0] not in _RESOURCE_GROUPS or kind == "ResourceClaimTemplate":
        return  # other objects in a dump (pods, templates, ...) do not take part
    try:
        model = load_object(document)
    except InvalidObjectError as exc:
        raise _InputError(f"{path}: {exc}") from None
    if isinstance(model, DeviceClass):
        objects.classes.append(model)
    elif isinstance(model, ResourceSlice):
        objects.slices.append(model)
    elif isinstance(model, ResourceClaim):
        objects.claims.append(model)
    elif isinstance(model, DeviceTaintRule):
        objects.rules.append(model)


def _claim_key(claim: ResourceClaim) -> str:
    return f"{claim.metadata.namespace or 'default'}/{claim.metadata.name}"


def _select_claims(
    objects: _Objects, wanted: Sequence[str]
) -> tuple[list[ResourceClaim], list[ResourceClaim]]:
    """(claims to allocate, claims whose allocation stays in use)."""
    by_key = {_claim_key(claim): claim for claim in objects.claims}
    if wanted:
        missing = [key for key in wanted if key not in by_key]
        if missing:
            raise _InputError(
                "no ResourceClaim "
                + ", ".join(missing)
                + " in the input; name claims as NAMESPACE/NAME (known: "
                + (", ".join(sorted(by_key)) or "none")
                + ")"
            )
        chosen = list(dict.fromkeys(wanted))
        to_allocate = [by_key[key] for key in chosen]
        keep = [claim for key, claim in by_key.items() if key not in chosen and claim.is_allocated]
        return to_allocate, keep
    to_allocate = [claim for claim in by_key.values() if not claim.is_allocated]
    if not to_allocate:
        raise _InputError(
            "every ResourceClaim in the input is already allocated; name one with --claim NS/NAME"
        )
    return to_allocate, [claim for claim in by_key.values() if claim.is_allocated]


def _nodes(objects: _Objects, requested: str | None) -> list[Node]:
    if objects.nodes:
        nodes = dict(objects.nodes)
    else:
        names = {s.spec.node_name for s in objects.slices if s.spec.node_name}
        names.update(d.node_name for s in objects.slices for d in s.spec.devices or () if d.node_name)
        nodes = {name: Node(name) for name in names}
    if requested is not None:
        return [nodes.get(requested, Node(requested))]
    if not nodes:
        raise _InputError("no nodes: include Node objects or slices with spec.nodeName, or pass --node NAME")
    return sorted(nodes.values(), key=lambda node: node.name)


def _render(claims: list[ResourceClaim], results: Mapping[str, Any], fmt: str) -> str:
    items = []
    for claim in claims:
        data = claim.to_dict()
        status = dict(data.get("status") or {})
        status["allocation"] = results[_claim_key(claim)].to_dict()
        data["status"] = status
        items.append(data)
    document = {"apiVersion": "v1", "kind": "List", "items": items}
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    return str(yaml.safe_dump(document, sort_keys=False))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.max_steps < 1:
        print("error: --max-steps must be at least 1", file=sys.stderr)
        return EXIT_INVALID
    try:
        objects = _load(args.filename)
        to_allocate, in_use = _select_claims(objects, args.claim)
        nodes = _nodes(objects, args.node)
        inventory = Inventory.build(
            classes=objects.classes, slices=objects.slices, taint_rules=objects.rules, allocated_claims=in_use
        )
        budget = SearchBudget(
            max_steps=args.max_steps, max_total_steps=max(args.max_steps, DEFAULT_MAX_TOTAL_STEPS)
        )
        if args.node is not None:
            outcome: Any = allocate(inventory=inventory, node=nodes[0], claims=to_allocate, budget=budget)
        else:
            outcome = place(
                inventory=inventory, nodes=nodes, claims=to_allocate, policy=args.policy, budget=budget
            )
    except (_InputError, AllocationInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except AllocationTimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_TIMEOUT
    except DracoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if isinstance(outcome, Allocated | Placement):
        sys.stdout.write(_render(to_allocate, outcome.results, args.output))
        keys = ", ".join(_claim_key(claim) for claim in to_allocate)
        print(f"allocated {keys} on node {outcome.node}", file=sys.stderr)
        return EXIT_ALLOCATED
    print(outcome.explanation, file=sys.stderr)
    return EXIT_UNFIT


if __name__ == "__main__":
    sys.exit(main())
