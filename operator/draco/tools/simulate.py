"""``draco simulate``: allocate claims offline and explain why they do (or do not) fit.

Users pipe what the cluster has into it, or point it at manifests and folders, and get back
the claims with ``status.allocation`` filled in, exactly as the operator would write them,
or an explanation of what kept them from fitting. No cluster access, no side effects: it
runs the same allocator the operator embeds.

    kubectl get deviceclasses.resource.draco.dev,resourceslices.resource.draco.dev,\\
        resourceclaims.resource.draco.dev,resourceclaimtemplates.resource.draco.dev,pods,nodes \\
        -A -o yaml | draco simulate -f -

Inputs (``-f`` repeatable: files, folders — their ``*.yaml``/``*.yml``/``*.json`` — or ``-``
for stdin; multi-document YAML/JSON or ``kind: List``): DeviceClasses, ResourceSlices,
ResourceClaims (those with ``status.allocation`` count as in use), ResourceClaimTemplates,
Pods, DeviceTaintRules and Nodes, in ``resource.k8s.io/v1`` or ``resource.draco.dev/v1``.
``--fake-devices FILE`` adds the slices a node agent would publish from a fake device file.

What is allocated, one unit at a time, each unit's result counting as in use for the next:

- every Pod that names claims (the ``resource.draco.dev/claims`` annotation, or the native
  ``spec.resourceClaims``) and still has one without an allocation, in creation order:
  its claims together on one node, template entries as the claims the operator would
  generate (named ``<pod>-<claim>-`` plus a stable suffix);
- then every claim without an allocation that no Pod in the input uses, on its own.

``--pod NS/NAME`` or ``--claim NS/NAME`` (repeatable) choose instead: the named pods, or
the named claims together as one pod. ``--node`` allocates on that node only; otherwise
on the first node (by ``--policy``) that fits. Each unit gets one line on stderr.

Exit status: 0 every unit allocated; 1 some unit does not fit; 3 the search budget ran out
before some unit's answer was known; 2 invalid input (a file that cannot be read or
parsed, or a unit whose objects are invalid: that unit is reported and the others still
run). When units end differently, 2 wins over 3, and 3 over 1.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from draco.allocator import Allocated, Inventory, Node, Placement, SearchBudget, allocate, place
from draco.allocator.nodeselect import node_selector_matches
from draco.allocator.outcome import DEFAULT_MAX_STEPS, DEFAULT_MAX_TOTAL_STEPS
from draco.api import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    iter_documents,
    load_object,
)
from draco.api.constants import GROUP, POD_CLAIM_NAME_ANNOTATION, VERSION
from draco.errors import (
    AgentError,
    AllocationInputError,
    AllocationTimeoutError,
    DracoError,
    InvalidObjectError,
)
from draco.scheduling.podclaims import (
    PodClaim,
    PodClaimsError,
    claim_statuses,
    generate_claim_name,
    parse_pod_claims,
)

__all__ = ["main"]

EXIT_ALLOCATED = 0
EXIT_UNFIT = 1
EXIT_INVALID = 2
EXIT_TIMEOUT = 3
# When units end differently, the exit status is the most severe of theirs.
_SEVERITY = {EXIT_ALLOCATED: 0, EXIT_UNFIT: 1, EXIT_TIMEOUT: 2, EXIT_INVALID: 3}

_RESOURCE_GROUPS = ("resource.k8s.io", "resource.draco.dev")
_FOLDER_SUFFIXES = (".yaml", ".yml", ".json")


class _InputError(Exception):
    """Input the simulator cannot use; the message says what to fix."""


@dataclass
class _Objects:
    classes: list[DeviceClass] = field(default_factory=list)
    slices: list[ResourceSlice] = field(default_factory=list)
    claims: dict[str, ResourceClaim] = field(default_factory=dict)
    templates: dict[str, ResourceClaimTemplate] = field(default_factory=dict)
    rules: list[DeviceTaintRule] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: list[Mapping[str, Any]] = field(default_factory=list)


@dataclass
class _Unit:
    """What is allocated together: one pod's claims, a lone claim, or the `--claim` set."""

    label: str
    claims: list[ResourceClaim]
    #: Claims of the unit that are allocated already: they constrain the node.
    allocated: list[ResourceClaim] = field(default_factory=list)
    #: Why the unit cannot be simulated (a missing claim or template, a broken annotation).
    problem: str | None = None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draco simulate",
        description="Allocate ResourceClaims offline, as the operator would, and explain the outcome.",
        epilog=(
            "Example: kubectl get deviceclasses.resource.draco.dev,resourceslices.resource.draco.dev,"
            "resourceclaims.resource.draco.dev,resourceclaimtemplates.resource.draco.dev,pods,nodes "
            "-A -o yaml | draco simulate -f -. Exit status: 0 allocated, 1 does not fit, "
            "2 invalid input, 3 search budget exhausted."
        ),
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        default=[],
        metavar="PATH",
        help="YAML/JSON file or folder of DeviceClasses, ResourceSlices, ResourceClaims, "
        "ResourceClaimTemplates, Pods, DeviceTaintRules, Nodes ('-': stdin); repeatable",
    )
    parser.add_argument(
        "--fake-devices",
        metavar="FILE",
        help="a fake device file (as `draco agent --driver fake --config FILE` reads): "
        "add the slices the agent would publish, on every --fake-node",
    )
    parser.add_argument(
        "--fake-node",
        action="append",
        default=[],
        metavar="NAME",
        help="a node that has the --fake-devices (repeatable; default: fake-node-1)",
    )
    parser.add_argument(
        "--node", help="allocate on this node only (default: the first node, by --policy, that fits)"
    )
    parser.add_argument(
        "--pod",
        action="append",
        default=[],
        metavar="NS/NAME",
        help="allocate the claims of these pods, each on its own (default: every pod that waits "
        "for an allocation); repeatable",
    )
    parser.add_argument(
        "--claim",
        action="append",
        default=[],
        metavar="NS/NAME",
        help="allocate these claims together, as one pod would (default: see --pod); repeatable",
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


# --- reading ------------------------------------------------------------------------------


def _expand(path: str) -> list[str]:
    """A folder stands for its YAML/JSON files (not recursive, like `kubectl apply -f DIR`)."""
    if path != "-" and os.path.isdir(path):
        files = sorted(
            str(child)
            for child in Path(path).iterdir()
            if child.is_file() and child.suffix in _FOLDER_SUFFIXES
        )
        if not files:
            raise _InputError(f"{path}: a folder with no .yaml, .yml or .json files")
        return files
    return [path]


def _read(path: str) -> str:
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)
            return stream.read().decode("utf-8") if stream is not None else sys.stdin.read()
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "standard input" if path == "-" else path
        raise _InputError(
            f"{where}: not UTF-8 text (byte {exc.start}): pass the YAML or JSON that kubectl prints"
        ) from None
    except OSError as exc:
        raise _InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _load(paths: Sequence[str]) -> _Objects:
    objects = _Objects()
    for given in paths:
        for path in _expand(given):
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


def _key(metadata: Mapping[str, Any]) -> str:
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def _add(objects: _Objects, document: Mapping[str, Any], *, path: str) -> None:
    kind = document.get("kind")
    api_version = str(document.get("apiVersion") or "")
    metadata = document.get("metadata") or {}
    if api_version == "v1" and kind in ("Node", "Pod"):
        if not metadata.get("name"):
            raise _InputError(f"{path}: a {kind} without metadata.name")
        if kind == "Pod":
            objects.pods.append(document)
        else:
            labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
            objects.nodes[str(metadata["name"])] = Node(str(metadata["name"]), labels)
        return
    if api_version.split("/", 1)[0] not in _RESOURCE_GROUPS:
        return  # other objects in a dump (services, config maps, ...) do not take part
    try:
        model = load_object(document)
    except InvalidObjectError as exc:
        raise _InputError(f"{path}: {exc}") from None
    if isinstance(model, DeviceClass):
        objects.classes.append(model)
    elif isinstance(model, ResourceSlice):
        objects.slices.append(model)
    elif isinstance(model, ResourceClaim):
        objects.claims[_claim_key(model)] = model
    elif isinstance(model, ResourceClaimTemplate):
        objects.templates[_claim_key(model)] = model
    elif isinstance(model, DeviceTaintRule):
        objects.rules.append(model)


def _fake_slices(path: str, nodes: Sequence[str]) -> list[ResourceSlice]:
    # Imported here: the agent's drivers are only needed for this option.
    from draco.agent.drivers.fake import FakeDriver, parse_fake_config
    from draco.agent.publisher import desired_slices

    text = _read(path)
    try:
        config = parse_fake_config(text, source=path)
    except AgentError as exc:
        raise _InputError(str(exc)) from None
    # A fixed time keeps the output reproducible; timeAdded does not change allocation.
    now = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    slices = []
    for node in nodes:
        for spec in config.drivers:
            pool = desired_slices(
                driver=spec.name, node=node, inventory=FakeDriver(spec).inventory(node), now=now
            )
            for name, slice_spec in pool:
                body = {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ResourceSlice",
                    "metadata": {"name": name},
                    "spec": {
                        **slice_spec,
                        "pool": {**slice_spec["pool"], "generation": 1, "resourceSliceCount": len(pool)},
                    },
                }
                try:
                    model = load_object(body)
                except InvalidObjectError as exc:
                    raise _InputError(f"{path}: {exc}") from None
                assert isinstance(model, ResourceSlice)
                slices.append(model)
    return slices


# --- what to allocate ---------------------------------------------------------------------


def _claim_key(model: ResourceClaim | ResourceClaimTemplate) -> str:
    return f"{model.metadata.namespace or 'default'}/{model.metadata.name}"


def _pod_entries(pod: Mapping[str, Any]) -> list[PodClaim]:
    """The pod's claims: draco's annotation, else the native `spec.resourceClaims`."""
    entries = parse_pod_claims(pod)
    if entries:
        return entries
    native = (pod.get("spec") or {}).get("resourceClaims") or []
    return [
        PodClaim(
            name=str(item.get("name")),
            resource_claim_name=item.get("resourceClaimName"),
            resource_claim_template_name=item.get("resourceClaimTemplateName"),
        )
        for item in native
        if isinstance(item, Mapping)
    ]


def _generated_claim(
    pod: Mapping[str, Any], entry: PodClaim, template: ResourceClaimTemplate
) -> ResourceClaim:
    metadata = pod.get("metadata") or {}
    pod_name = str(metadata.get("name"))
    # A stable suffix instead of the API server's random one: the same input gives the same output.
    suffix = hashlib.sha256(f"{_key(metadata)}/{entry.name}".encode()).hexdigest()[:5]
    template_data = template.to_dict()
    template_meta = (template_data.get("spec") or {}).get("metadata") or {}
    body = {
        "apiVersion": template_data.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": "ResourceClaim",
        "metadata": {
            "name": generate_claim_name(pod_name, entry.name) + suffix,
            "namespace": metadata.get("namespace") or "default",
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": {
                **(template_meta.get("annotations") or {}),
                POD_CLAIM_NAME_ANNOTATION: entry.name,
            },
        },
        "spec": (template_data.get("spec") or {}).get("spec") or {},
    }
    if not body["metadata"]["labels"]:
        del body["metadata"]["labels"]
    model = load_object(body)
    assert isinstance(model, ResourceClaim)
    return model


def _pod_unit(objects: _Objects, pod: Mapping[str, Any]) -> _Unit:
    metadata = pod.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "default")
    unit = _Unit(label=f"pod {_key(metadata)}", claims=[])
    try:
        entries = _pod_entries(pod)
        recorded = claim_statuses(pod)
    except PodClaimsError as exc:
        unit.problem = str(exc)
        return unit
    for entry in entries:
        if entry.resource_claim_name is not None:
            claim = objects.claims.get(f"{namespace}/{entry.resource_claim_name}")
            if claim is None:
                unit.problem = (
                    f"claim {entry.name!r}: ResourceClaim {namespace}/{entry.resource_claim_name} "
                    "is not in the input"
                )
                return unit
        elif recorded.get(entry.name) and f"{namespace}/{recorded[entry.name]}" in objects.claims:
            claim = objects.claims[f"{namespace}/{recorded[entry.name]}"]
        elif entry.name in recorded and recorded[entry.name] is None:
            continue  # the template's claim was deliberately skipped (upstream: no claim needed)
        else:
            template = objects.templates.get(f"{namespace}/{entry.resource_claim_template_name}")
            if template is None:
                unit.problem = (
                    f"claim {entry.name!r}: ResourceClaimTemplate "
                    f"{namespace}/{entry.resource_claim_template_name} is not in the input"
                )
                return unit
            try:
                claim = _generated_claim(pod, entry, template)
            except InvalidObjectError as exc:
                unit.problem = f"claim {entry.name!r}: {exc}"
                return unit
        (unit.allocated if claim.is_allocated else unit.claims).append(claim)
    return unit


def _units(objects: _Objects, *, pods: Sequence[str], claims: Sequence[str]) -> list[_Unit]:
    if claims:
        missing = [key for key in claims if key not in objects.claims]
        if missing:
            raise _InputError(
                "no ResourceClaim "
                + ", ".join(missing)
                + " in the input; name claims as NAMESPACE/NAME (known: "
                + (", ".join(sorted(objects.claims)) or "none")
                + ")"
            )
        chosen = list(dict.fromkeys(claims))
        return [_Unit(label="claims " + ", ".join(chosen), claims=[objects.claims[k] for k in chosen])]
    by_key = {_key(pod.get("metadata") or {}): pod for pod in objects.pods}
    if pods:
        missing = [key for key in pods if key not in by_key]
        if missing:
            raise _InputError(
                "no Pod "
                + ", ".join(missing)
                + " in the input; name pods as NAMESPACE/NAME (known: "
                + (", ".join(sorted(by_key)) or "none")
                + ")"
            )
        return [_pod_unit(objects, by_key[key]) for key in dict.fromkeys(pods)]
    units = []
    used: set[str] = set()
    ordered = sorted(
        objects.pods, key=lambda pod: str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    )
    for pod in ordered:
        unit = _pod_unit(objects, pod)
        used.update(_claim_key(claim) for claim in [*unit.claims, *unit.allocated])
        if unit.claims or unit.problem:
            units.append(unit)
    for key, claim in objects.claims.items():
        if key not in used and not claim.is_allocated:
            units.append(_Unit(label=f"claim {key}", claims=[claim]))
    if not units:
        raise _InputError(
            "nothing to allocate: every ResourceClaim in the input is allocated and no Pod waits for "
            "one; name a claim with --claim NS/NAME (did `kubectl get` fetch draco's kinds? name them "
            "in full, e.g. resourceclaims.resource.draco.dev)"
        )
    return units


def _nodes(objects: _Objects, requested: str | None) -> list[Node]:
    # Node objects give labels; a node a slice names but the input lacks still counts
    # (a partial dump, or slices written by hand), without labels.
    names = {s.spec.node_name for s in objects.slices if s.spec.node_name}
    names.update(d.node_name for s in objects.slices for d in s.spec.devices or () if d.node_name)
    nodes = {name: Node(name) for name in names if name is not None}
    nodes.update(objects.nodes)
    if requested is not None:
        return [nodes.get(requested, Node(requested))]
    if not nodes:
        raise _InputError("no nodes: include Node objects or slices with spec.nodeName, or pass --node NAME")
    return sorted(nodes.values(), key=lambda node: node.name)


# --- allocating ---------------------------------------------------------------------------


@dataclass
class _Answer:
    code: int
    message: str
    claims: list[ResourceClaim] = field(default_factory=list)
    results: Mapping[str, Any] = field(default_factory=dict)


def _allowed_nodes(unit: _Unit, nodes: Iterable[Node]) -> list[Node]:
    """The nodes where every already-allocated claim of the unit is usable."""
    allowed = []
    for node in nodes:
        selectors = [c.allocation.node_selector for c in unit.allocated if c.allocation is not None]
        if all(
            selector is None or node_selector_matches(selector.to_dict(), name=node.name, labels=node.labels)
            for selector in selectors
        ):
            allowed.append(node)
    return allowed


def _simulate(
    unit: _Unit,
    *,
    objects: _Objects,
    nodes: list[Node],
    in_use: list[ResourceClaim],
    args: argparse.Namespace,
) -> _Answer:
    if unit.problem is not None:
        return _Answer(EXIT_INVALID, f"{unit.label}: invalid: {unit.problem}")
    if not unit.claims:
        return _Answer(EXIT_ALLOCATED, f"{unit.label}: nothing to allocate")
    budget = SearchBudget(
        max_steps=args.max_steps, max_total_steps=max(args.max_steps, DEFAULT_MAX_TOTAL_STEPS)
    )
    candidates = _allowed_nodes(unit, nodes)
    if not candidates:
        return _Answer(
            EXIT_UNFIT,
            f"{unit.label}: does not fit: its allocated claims are usable on none of {len(nodes)} node(s)",
        )
    try:
        inventory = Inventory.build(
            classes=objects.classes, slices=objects.slices, taint_rules=objects.rules, allocated_claims=in_use
        )
        outcome: Any
        if args.node is not None:
            outcome = allocate(inventory=inventory, node=candidates[0], claims=unit.claims, budget=budget)
        else:
            outcome = place(
                inventory=inventory, nodes=candidates, claims=unit.claims, policy=args.policy, budget=budget
            )
    except AllocationTimeoutError as exc:
        return _Answer(EXIT_TIMEOUT, f"{unit.label}: search budget exhausted: {exc}")
    except (AllocationInputError, DracoError) as exc:
        return _Answer(EXIT_INVALID, f"{unit.label}: invalid: {exc}")
    if isinstance(outcome, Allocated | Placement):
        keys = ", ".join(_claim_key(claim) for claim in unit.claims)
        return _Answer(
            EXIT_ALLOCATED,
            f"allocated {keys} on node {outcome.node}",
            claims=unit.claims,
            results=outcome.results,
        )
    explanation = str(outcome.explanation)
    return _Answer(EXIT_UNFIT, f"{unit.label}: does not fit:\n{explanation}")


def _with_allocation(claim: ResourceClaim, result: Any) -> ResourceClaim:
    data = claim.to_dict()
    data["status"] = {**(data.get("status") or {}), "allocation": result.to_dict()}
    model = load_object(data)
    assert isinstance(model, ResourceClaim)
    return model


def _render(claims: list[ResourceClaim], fmt: str) -> str:
    document = {"apiVersion": "v1", "kind": "List", "items": [claim.to_dict() for claim in claims]}
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    return str(yaml.safe_dump(document, sort_keys=False))


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.filename and not args.fake_devices:
        parser.print_usage(sys.stderr)
        print("error: give the input with -f PATH (or '-' for stdin) or --fake-devices FILE", file=sys.stderr)
        return EXIT_INVALID
    if args.max_steps < 1:
        print("error: --max-steps must be at least 1", file=sys.stderr)
        return EXIT_INVALID
    try:
        objects = _load(args.filename)
        if args.fake_devices:
            objects.slices.extend(_fake_slices(args.fake_devices, args.fake_node or ["fake-node-1"]))
        units = _units(objects, pods=args.pod, claims=args.claim)
        nodes = _nodes(objects, args.node)
    except _InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    in_use = [claim for claim in objects.claims.values() if claim.is_allocated]
    allocated: list[ResourceClaim] = []
    code = EXIT_ALLOCATED
    for unit in units:
        # A claim named to be allocated again (`--claim`) does not block its own devices.
        again = {_claim_key(claim) for claim in unit.claims}
        others = [claim for claim in in_use if _claim_key(claim) not in again]
        answer = _simulate(unit, objects=objects, nodes=nodes, in_use=others, args=args)
        print(answer.message, file=sys.stderr)
        if _SEVERITY[answer.code] > _SEVERITY[code]:
            code = answer.code
        for claim in answer.claims:
            done = _with_allocation(claim, answer.results[_claim_key(claim)])
            allocated.append(done)
            in_use.append(done)
    if allocated:
        sys.stdout.write(_render(allocated, args.output))
    return code


if __name__ == "__main__":
    sys.exit(main())
