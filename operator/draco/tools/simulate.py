"""``draco simulate``: place pods and allocate claims offline, and explain why they do (or
do not) fit.

Users pipe what the cluster has into it, or point it at manifests and folders, and get back
the claims with ``status.allocation`` filled in, exactly as the operator would write them,
or an explanation of what kept them from fitting. No cluster access, no side effects: it
makes the operator's decision (`draco.scheduling.plan`), with the same allocator and every
rule of kube-scheduler's default profile the operator places pods by.

    kubectl get draco,pods,nodes,namespaces,services,replicasets,statefulsets,\\
        replicationcontrollers,persistentvolumeclaims,persistentvolumes,storageclasses,\\
        csinodes,csidrivers,csistoragecapacities,volumeattachments -A -o yaml \\
        | draco simulate -f -

Inputs (``-f`` repeatable: files, folders — their ``*.yaml``/``*.yml``/``*.json`` — or ``-``
for stdin; multi-document YAML/JSON or ``kind: List``): DeviceClasses, ResourceSlices,
ResourceClaims (those with ``status.allocation`` count as in use), ResourceClaimTemplates
and DeviceTaintRules, in ``resource.k8s.io/v1`` or ``resource.draco.dev/v1``; Pods and
Nodes; and what kube-scheduler's rules read besides: Namespaces (their labels),
PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes, CSIDrivers,
CSIStorageCapacities, VolumeAttachments, and the selectors of Services, ReplicaSets,
StatefulSets and ReplicationControllers (kube-scheduler's default spreading).
``--fake-devices FILE`` adds the slices a node agent would publish from a fake device file.
How the cluster is built from them (a node without ``status.allocatable``, extended
resources advertised, which pods occupy nodes): `draco.tools.simulation.cluster`.

What is allocated, one unit at a time, each unit's result counting for the next (its
devices in use, its pod on its node: resources, ports, affinity, spreading):

- every Pod that still has a claim to allocate, in creation order: the claims it names
  (the ``resource.draco.dev/claims`` annotation, or the native ``spec.resourceClaims``;
  template entries as the claims the operator would generate, named ``<pod>-<claim>-``
  plus a stable suffix) and the special claim of its extended-resource requests when a
  DeviceClass maps one (named ``<pod>-extended-resources-`` plus a stable suffix), together
  on one node that kube-scheduler's rules admit the pod to; a pod with neither is no unit;
- then every claim without an allocation that no Pod in the input uses, on its own (as a
  pod that asks for nothing else and tolerates every taint would be placed).

Pods of a group placed all or nothing (a PodGroup in the input, ``scheduling.draco.dev`` or
``scheduling.k8s.io``, or the coscheduling plugin's; Kueue's pod-group label and count) are
one unit, decided as the operator decides a group (`draco.scheduling.groups`): placed
whole, or the group's line says how many fit, how many are needed and why each other
member does not (nothing of it is allocated). A claim of the group is made once for all its
members.

``--node-template FILE`` (repeatable) answers "would this pod fit on a new node of node
group X": the input's nodes are replaced by one new node per template (its labels, taints,
allocatable and devices; `draco.tools.simulation.nodetemplates`), and
``--template-resources`` prints the extended resources such a node would carry instead.
An invalid template is refused whole (exit 2) with the file and the field.

``--pod NS/NAME`` or ``--claim NS/NAME`` (repeatable) choose instead: the named pods, or
the named claims together as one pod. ``--node`` considers that node only; otherwise
``--policy`` orders the nodes (``scheduler``, the default: kube-scheduler's sampling and
scores, as the operator does). Each unit gets one line on stderr, or, when it does not
fit, the operator's FailedScheduling message (``0/N nodes are available: ...``, then what
the devices lack).

Exit status: 0 every unit allocated; 1 some unit does not fit; 3 the search budget ran out
before some unit's answer was known; 2 invalid input (a file that cannot be read or
parsed, or a unit whose objects are invalid: that unit is reported and the others still
run). When units end differently, 2 wins over 3, and 3 over 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from draco.allocator.inventory import Inventory
from draco.allocator.outcome import DEFAULT_MAX_STEPS
from draco.api import ResourceClaim, load_object
from draco.api.bodies import key_of
from draco.errors import AllocationInputError, DracoError
from draco.scheduling.preemption import budget_of
from draco.tools.simulation.cluster import snapshot
from draco.tools.simulation.gangs import decide_group
from draco.tools.simulation.inputs import InputError, Objects, fake_slices, load
from draco.tools.simulation.nodetemplates import apply_templates, load_templates, resources_document
from draco.tools.simulation.placement import (
    EXIT_ALLOCATED,
    EXIT_INVALID,
    EXIT_TIMEOUT,
    EXIT_UNFIT,
    Answer,
    Simulator,
    held_claims,
)
from draco.tools.simulation.units import GroupUnit, Unit, units

__all__ = ["EXIT_ALLOCATED", "EXIT_INVALID", "EXIT_TIMEOUT", "EXIT_UNFIT", "main"]

# When units end differently, the exit status is the most severe of theirs.
_SEVERITY = {EXIT_ALLOCATED: 0, EXIT_UNFIT: 1, EXIT_TIMEOUT: 2, EXIT_INVALID: 3}

_KUBECTL = (
    "kubectl get draco,pods,nodes,namespaces,services,replicasets,statefulsets,replicationcontrollers,"
    "persistentvolumeclaims,persistentvolumes,storageclasses,csinodes,csidrivers,csistoragecapacities,"
    "volumeattachments -A -o yaml | draco simulate -f -"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draco simulate",
        description="Place pods and allocate ResourceClaims offline, as the operator would (its allocator "
        "and kube-scheduler's rules), and explain the outcome.",
        epilog=(
            f"Example: {_KUBECTL}. Exit status: 0 allocated, 1 does not fit, "
            "2 invalid input, 3 search budget exhausted."
        ),
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        default=[],
        metavar="PATH",
        help="YAML/JSON file or folder ('-': stdin) of DeviceClasses, ResourceSlices, ResourceClaims, "
        "ResourceClaimTemplates, DeviceTaintRules, Pods, Nodes, Namespaces, storage objects (PVCs, PVs, "
        "StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities, VolumeAttachments) and Services, "
        "ReplicaSets, StatefulSets, ReplicationControllers; repeatable",
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
        "--node-template",
        action="append",
        default=[],
        metavar="FILE",
        help="a NodeTemplate file (what a new node of a node group brings: labels, taints, allocatable, "
        "devices; docs/autoscaling.md): place the pods on one new node per template instead of the input's "
        "nodes, answering whether they would fit a new node of that group; repeatable",
    )
    parser.add_argument(
        "--template-resources",
        action="store_true",
        help="with --node-template: print the extended resources each template's new node would be "
        "advertised with (per DeviceClass of the input), and cluster-autoscaler's node-group tags for them",
    )
    parser.add_argument(
        "--node", help="consider this node only (default: every node, in the order of --policy)"
    )
    parser.add_argument(
        "--pod",
        action="append",
        default=[],
        metavar="NS/NAME",
        help="place these pods and allocate their claims, one after the other (default: every pod "
        "that waits for an allocation); repeatable",
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
        choices=("scheduler", "pack", "spread", "first"),
        default="scheduler",
        help="how to choose among nodes that fit, as the operator's --placement-policy: kube-scheduler's "
        "sampling and default scores (scheduler, the default), most devices in use first (pack), fewest "
        "first (spread), each with the scores between equals; or the first by name, unscored (first)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=DEFAULT_MAX_STEPS,
        help=f"search budget per node, in candidate devices tried (default {DEFAULT_MAX_STEPS})",
    )
    return parser


def _with_allocation(claim: ResourceClaim, result: Any) -> ResourceClaim:
    data = claim.to_dict()
    allocation = result if isinstance(result, dict) else result.to_dict()
    data["status"] = {**(data.get("status") or {}), "allocation": allocation}
    model = load_object(data)
    assert isinstance(model, ResourceClaim)
    return model


def _render(claims: list[ResourceClaim], fmt: str) -> str:
    document = {"apiVersion": "v1", "kind": "List", "items": [claim.to_dict() for claim in claims]}
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    return str(yaml.safe_dump(document, sort_keys=False))


def _check_nodes(objects: Objects, requested: str | None) -> None:
    if (
        requested is None
        and not objects.nodes
        and not any(
            s.spec.node_name or any(d.node_name for d in s.spec.devices or ()) for s in objects.slices
        )
    ):
        raise InputError("no nodes: include Node objects or slices with spec.nodeName, or pass --node NAME")


def _refresh(unit: Unit | GroupUnit, done: dict[str, ResourceClaim]) -> None:
    """Claims an earlier unit allocated (a claim two pods share) constrain this one."""
    if isinstance(unit, GroupUnit):
        for member in unit.members:
            _refresh(member, done)
        return
    allocated = [done[claim.key] for claim in unit.claims if claim.key in done]
    if allocated:
        unit.claims = [claim for claim in unit.claims if claim.key not in done]
        unit.allocated = [*unit.allocated, *allocated]


def _singles(found: list[Unit | GroupUnit]) -> list[Unit]:
    return [m for unit in found for m in (unit.members if isinstance(unit, GroupUnit) else [unit])]


def _run(
    objects: Objects, found: list[Unit | GroupUnit], args: argparse.Namespace
) -> tuple[int, list[ResourceClaim]]:
    """Decide unit after unit; the exit status and the claims allocated."""
    # A claim named to be allocated again (`--claim`) does not block its own devices.
    again = {claim.key for unit in _singles(found) for claim in unit.claims}
    in_use = [c for key, c in objects.claims.items() if c.is_allocated and key not in again]
    try:
        inventory = Inventory.build(
            classes=objects.classes, slices=objects.slices, taint_rules=objects.rules, allocated_claims=in_use
        )
    except (AllocationInputError, DracoError) as exc:
        for unit in found:
            print(f"{unit.label}: invalid: {exc}", file=sys.stderr)
        return EXIT_INVALID, []
    simulated = {key_of(unit.pod) for unit in _singles(found) if unit.pod is not None}
    cluster = snapshot(
        objects, inventory, simulated=simulated, extra_nodes=[args.node] if args.node is not None else ()
    )
    simulator = Simulator(
        cluster=cluster,
        inventory=inventory,
        policy=args.policy,
        node=args.node,
        max_steps=args.max_steps,
        held=held_claims(in_use),
        budgets=[budget_of(body) for body in objects.budgets],
    )
    done: dict[str, ResourceClaim] = {}
    code = EXIT_ALLOCATED
    for unit in found:
        _refresh(unit, done)
        answer: Answer = (
            decide_group(simulator, unit) if isinstance(unit, GroupUnit) else simulator.decide(unit)
        )
        print(answer.message, file=sys.stderr)
        if _SEVERITY[answer.code] > _SEVERITY[code]:
            code = answer.code
        for claim in answer.claims:
            allocated = _with_allocation(claim, answer.results[claim.key])
            done[claim.key] = allocated
            if not answer.counted:
                inventory.mark_allocated(allocated)
        if answer.placed is not None and not answer.counted:
            cluster.place(answer.placed)
    return code, list(done.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.template_resources and not args.node_template:
        print("error: --template-resources needs --node-template FILE", file=sys.stderr)
        return EXIT_INVALID
    if not args.filename and not args.fake_devices and not args.node_template:
        parser.print_usage(sys.stderr)
        print("error: give the input with -f PATH (or '-' for stdin) or --fake-devices FILE", file=sys.stderr)
        return EXIT_INVALID
    if args.max_steps < 1:
        print("error: --max-steps must be at least 1", file=sys.stderr)
        return EXIT_INVALID
    try:
        objects = load(args.filename)
        if args.fake_devices:
            objects.slices.extend(fake_slices(args.fake_devices, args.fake_node or ["fake-node-1"]))
        if args.node_template:
            templates = load_templates(args.node_template)
            if args.template_resources:
                document = resources_document(objects, templates)
                sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
                return EXIT_ALLOCATED
            apply_templates(objects, templates)
        found = units(objects, pods=args.pod, claims=args.claim)
        _check_nodes(objects, args.node)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    code, allocated = _run(objects, found, args)
    if allocated:
        sys.stdout.write(_render(allocated, args.output))
    return code


if __name__ == "__main__":
    sys.exit(main())
