"""Judging one case: what draco did against what upstream did and against the rules.

Upstream's *top* nodes are those its last scoring cycle for the pod gave the highest
total score (from its own log, see :mod:`.systems`): kube-scheduler picks one of them at
random, so upstream has a **tie** when there are two or more. When only one node passed
its filters it does not score at all: that node is the top, no tie. Its *feasible* nodes
are those it scored (or that one node).

Draco's outcome falls in one category:

- agreements: both bound, same node and same devices; both bound, upstream had a tie and
  draco's node is another of the top ones (the devices there must then be the
  allocator's first fit on that node, as upstream's would have been); both unschedulable;
- mismatches: any pin of draco's that kube-scheduler refused, whatever happened next
  (the safety net placing the pod again elsewhere, or finding no node: before, a refused
  pin followed by "no node" was judged "both unschedulable"); draco left a pod unbound
  that upstream bound (no node fits, pinned but
  refused by kube-scheduler, or no verdict in time); draco left a pod that upstream could
  not place either pinned where kube-scheduler refuses it, or holding devices; draco's
  node breaks a rule
  (:mod:`.rules`); draco bound a pod upstream could place nowhere; draco's node was not
  feasible for upstream though no rule here says why; draco's node is feasible but
  scored below upstream's top (``preference``); same node, other devices.

Apart from draco, the harness checks itself on every case, and any doubt is a mismatch
too (``harness: ...``): upstream reached no verdict; upstream's node breaks a rule here;
the nodes where the rules admit the pod differ from upstream's feasible nodes; upstream's
devices differ from the first fit the rules compute on its node.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from . import rules
from .generator import Json
from .systems import Cycle, Outcome


@dataclass
class Verdict:
    category: str
    mismatch: bool
    harness: list[str] = field(default_factory=list)
    detail: Json = field(default_factory=dict)


def _upstream_view(upstream: Outcome, cycles: list[Cycle]) -> tuple[set[str], set[str], Cycle | None]:
    """(feasible nodes, top nodes, the cycle) of upstream's decision."""
    if upstream.kind != "bound":
        return set(), set(), None
    cycle = next((c for c in reversed(cycles) if upstream.node in c.totals), None)
    if cycle is None:
        return {upstream.node}, {upstream.node}, None
    best = max(cycle.totals.values())
    return set(cycle.totals), {n for n, s in cycle.totals.items() if s == best}, cycle


def judge(
    world: rules.World, pod: Json, claim: Json, upstream: Outcome, cycles: list[Cycle], draco: Outcome
) -> Verdict:
    feasible, top, cycle = _upstream_view(upstream, cycles)
    fits = rules.feasible_nodes(world, pod, claim)
    harness: list[str] = []
    if upstream.kind == "timeout":
        harness.append("harness: upstream reached no verdict")
    if upstream.kind == "bound":
        broken = rules.check_node(world, pod, upstream.node) + rules.check_devices(
            world, claim, upstream.node, upstream.devices
        )
        if broken:
            harness.append("harness: upstream's choice breaks " + _rule_names(broken))
        if sorted(feasible) != sorted(fits):
            harness.append("harness: the rules admit other nodes than upstream's feasible ones")
        elif fits.get(upstream.node) != upstream.devices:
            harness.append("harness: upstream's devices are not the first fit on its node")
    elif upstream.kind == "unschedulable" and fits:
        harness.append("harness: the rules admit nodes where upstream found none")

    detail: Json = {
        "upstream": upstream.json(),
        "draco": draco.json(),
        "upstream feasible": sorted(feasible),
        "upstream top": sorted(top),
        "upstream scores": {"totals": cycle.totals, "plugins": cycle.plugins} if cycle else None,
        "rules admit": {n: [list(d) for d in devices] for n, devices in fits.items()},
    }
    category, mismatch = _draco_category(world, pod, claim, upstream, draco, feasible, top, fits, detail)
    return Verdict(category, mismatch or bool(harness), harness, detail)


def _rule_names(problems: list[str]) -> str:
    return ",".join(sorted({p.split(":", 1)[0] for p in problems}))


def _draco_category(
    world: rules.World,
    pod: Json,
    claim: Json,
    upstream: Outcome,
    draco: Outcome,
    feasible: set[str],
    top: set[str],
    fits: dict[str, list[rules.Result]],
    detail: Json,
) -> tuple[str, bool]:
    if draco.refusals and draco.kind != "refused":
        # A pin refused on the way is a difference even when the safety net then placed the
        # pod again, or found no node: draco chose a node kube-scheduler would not take.
        detail["draco's refused pins"] = [list(r) for r in draco.refusals]
        nodes = sorted({node for node, _ in draco.refusals if node in world.nodes})
        broken = sorted({p for node in nodes for p in rules.check_node(world, pod, node)})
        detail["draco's refused pins break"] = broken
        return (
            f"draco pinned a node kube-scheduler refused ({_rule_names(broken) or 'no rule here'}), "
            f"then {draco.kind}"
        ), True
    if draco.kind != "bound":
        held = ", holding devices" if draco.devices else ""
        pinned = ""
        if draco.kind == "refused" and draco.node in world.nodes:
            # Which rules the node draco pinned the pod to breaks (kube-scheduler's refusal).
            broken = rules.check_node(world, pod, draco.node)
            detail["draco's pinned node breaks"] = broken
            pinned = f" ({_rule_names(broken) or 'no rule here'})"
        if upstream.kind != "bound":
            if draco.kind == "refused" or draco.devices:
                # Unschedulable either way, but the pod must not keep devices it cannot use.
                return f"draco {draco.kind}{pinned}{held}, upstream found no node", True
            return "agree: both unschedulable", False
        reason = {
            "unschedulable": "no node fits (draco's FailedScheduling)",
            "refused": f"pinned to a node kube-scheduler refuses{pinned}",
            "timeout": "no verdict in time",
        }[draco.kind]
        return f"draco unbound, upstream bound: {reason}{held}", True
    broken = rules.check_node(world, pod, draco.node) + rules.check_devices(
        world, claim, draco.node, draco.devices
    )
    if broken:
        detail["draco breaks"] = broken
        return "draco breaks " + _rule_names(broken), True
    if upstream.kind != "bound":
        return "draco bound, upstream found no node", True
    if draco.node == upstream.node:
        if draco.devices != upstream.devices:
            return "same node, other devices", True
        return "agree: same node, same devices", False
    if draco.node not in feasible:
        return "draco's node not feasible for upstream (no rule here says why)", True
    if draco.node not in top:
        return "preference: draco's node scored below upstream's top" + (
            " (tie)" if len(top) > 1 else ""
        ), True
    if fits.get(draco.node) != draco.devices:
        return "tie: draco's devices are not the first fit on its node", True
    return "agree: upstream tie, draco took another top node", False


def summarize(counts: Counter[str]) -> str:
    width = max((len(k) for k in counts), default=0)
    return "\n".join(
        f"  {k:<{width}}  {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
