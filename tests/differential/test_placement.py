"""Where draco + kube-scheduler place a pod against where kube-scheduler with native DRA does.

Random cases (:mod:`.placement.generator`: a small cluster with pods already bound and
devices already allocated, one incoming pod carrying node selection, taints and
tolerations, requests, host ports, pod (anti-)affinity, topology spread and a device
claim) go through two systems on two real kube-apiservers (:mod:`.placement.systems`):
upstream kube-scheduler v1.37 allocating ``resource.k8s.io/v1`` claims itself, and
draco's operator with the same kube-scheduler binding what it un-gates. Every case is
judged (:mod:`.placement.judge`): every pod upstream binds must be bound by draco, on a
node that keeps every rule (checked apart from both systems, :mod:`.placement.rules`),
the same node with the same devices unless upstream had a tie among its top-scored nodes.

``make differential`` runs 1,000 cases, ``make test`` a few dozen, from a fresh seed each
time (printed, with the command that replays it). DRACO_PLACEMENT_SEED and
DRACO_PLACEMENT_CASES choose; DRACO_PLACEMENT_ONLY=3,17 runs only those case indices of
the seed; DRACO_PLACEMENT_CONCURRENCY sets the cases in flight (default 6). Each
mismatching case is written as JSON (the case, what each system did, upstream's scores,
where the rules admit the pod) to DRACO_PLACEMENT_OUT (/tmp/draco-placement-differential).
The test skips only when the control-plane binaries (with kube-scheduler) are missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from draco.tools.dev.controlplane import find_binaries

from .placement import render, rules
from .placement.generator import DRIVER, ZONE, Generator, Json
from .placement.judge import judge, summarize
from .placement.run import Clock, Judged, load, run_cases, world_of
from .placement.systems import Outcome, System

CASES = int(os.environ.get("DRACO_PLACEMENT_CASES") or 30)
SEED = int(os.environ.get("DRACO_PLACEMENT_SEED") or random.SystemRandom().randrange(1, 2**31))
ONLY = [int(i) for i in (os.environ.get("DRACO_PLACEMENT_ONLY") or "").split(",") if i.strip()]
CONCURRENCY = int(os.environ.get("DRACO_PLACEMENT_CONCURRENCY") or 6)
OUT = Path(os.environ.get("DRACO_PLACEMENT_OUT") or "/tmp/draco-placement-differential")


def _assets() -> Path:
    try:
        assets = find_binaries()
    except Exception as exc:
        pytest.skip(f"no control-plane binaries: {exc}")
    if not os.access(assets / "kube-scheduler", os.X_OK):
        pytest.skip(
            f"{assets} lacks kube-scheduler: run hack/controlplane.sh kube-scheduler (make differential does)"
        )
    return assets


@pytest.mark.timeout(4 * 3600)
async def test_draco_places_pods_where_upstream_does() -> None:
    assets = _assets()
    indices = ONLY or list(range(CASES))
    replay = f"DRACO_PLACEMENT_SEED={SEED} DRACO_PLACEMENT_CASES={CASES} make differential PYTEST_ARGS='-k placement'"
    print(f"\nplacement differential: seed {SEED}, {len(indices)} cases, {CONCURRENCY} at a time ({load()})")
    print(f"  replay: {replay}")
    workdir = Path(tempfile.mkdtemp(prefix="draco-placement-"))
    upstream = System("upstream", assets, workdir / "upstream")
    draco = System("draco", assets, workdir / "draco")
    counts: Counter[str] = Counter()
    harness: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    mismatches: list[str] = []
    clock = Clock()

    def on_judged(judged: Judged) -> None:
        verdict = judged.verdict
        counts[verdict.category] += 1
        for problem in verdict.harness:
            harness[problem] += 1
        for system in ("upstream", "draco"):
            outcomes[f"{system} {(verdict.detail.get(system) or {}).get('kind', 'not run')}"] += 1
        if verdict.mismatch:
            OUT.mkdir(parents=True, exist_ok=True)
            path = OUT / f"{SEED}-{judged.index}.json"
            report = {
                "seed": SEED,
                "index": judged.index,
                "replay": f"DRACO_PLACEMENT_SEED={SEED} DRACO_PLACEMENT_ONLY={judged.index} "
                "make differential PYTEST_ARGS='-k placement'",
                "category": verdict.category,
                "harness": verdict.harness,
                **verdict.detail,
                "cluster": rules.describe(_case_world(judged)),
                "case": judged.case,
            }
            path.write_text(json.dumps(report, indent=1))
            mismatches.append(f"{judged.index}: {verdict.category} {verdict.harness} ({path})")
        done = sum(counts.values())
        if done % 100 == 0:
            print(f"  {done}/{len(indices)} cases in {clock.seconds():.0f}s ({load()})", flush=True)

    try:
        await asyncio.gather(upstream.start(), draco.start())
        print(f"  both systems started in {clock.seconds():.0f}s ({load()})", flush=True)
        await run_cases(
            upstream, draco, Generator(SEED), indices, concurrency=CONCURRENCY, on_judged=on_judged
        )
    finally:
        await asyncio.gather(upstream.close(), draco.close(), return_exceptions=True)
        if mismatches:
            keep = OUT / f"{SEED}-logs"
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(workdir, keep, ignore=shutil.ignore_patterns("*.yaml"))
        shutil.rmtree(workdir, ignore_errors=True)
    total = sum(counts.values())
    agreed = sum(v for k, v in counts.items() if k.startswith("agree"))
    print(
        f"placement differential: {total} cases in {clock.seconds():.0f}s ({load()}), seed {SEED}\n"
        f"  agreements {agreed}, mismatches {len(mismatches)}; by category:\n{summarize(counts)}"
        + (f"\n  harness doubts:\n{summarize(harness)}" if harness else "")
        + f"\n  outcomes:\n{summarize(outcomes)}"
    )
    assert not mismatches, (
        f"{len(mismatches)} of {total} cases: draco's placement differs from upstream's or breaks a rule "
        f"(seed {SEED}; replay: {replay}; JSON in {OUT}):\n" + "\n".join(mismatches[:20])
    )


def _case_world(judged: Judged) -> rules.World:
    return world_of(judged.case, f"c{judged.index}")


def test_generated_cases_render_for_both_systems() -> None:
    """Every case renders into objects that name only the case's own nodes and namespaces."""
    generator = Generator(1)
    for index in range(200):
        case = generator.case(index)
        tag = f"c{index}"
        for system in ("upstream", "draco"):
            pod = render.incoming_pod(case, tag, system)
            assert pod["spec"]["nodeSelector"][render.CASE_LABEL] == tag
            assert (render.GATE in json.dumps(pod)) == (system == "draco")
        world = world_of(case, tag)
        assert all(name.startswith(f"{tag}-") for name in world.nodes)


# --- the rules, on clusters written by hand --------------------------------------------------


def _node(name: str, zone: str | None = "z1", *, taints: list[Json] | None = None, cpu: str = "4") -> Json:
    labels = {rules.HOSTNAME: name, **({ZONE: zone} if zone else {})}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def _pod(name: str, node: str = "", *, labels: Json | None = None, ns: str = "a", **spec: Any) -> Json:
    containers = spec.pop("containers", [{"name": "main"}])
    body = {
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {"containers": containers, **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def _world(nodes: list[Json], pods: list[Json], devices: dict[str, list[Json]] | None = None) -> rules.World:
    return rules.World(
        nodes={n["metadata"]["name"]: n for n in nodes},
        namespaces={"a": {"team": "a"}, "b": {"team": "b"}},
        pods=pods,
        devices=devices or {},
    )


def _term(app: str, key: str = rules.HOSTNAME, **extra: Any) -> Json:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **extra}


def _problems(world: rules.World, pod: Json) -> dict[str, list[str]]:
    return {
        n: sorted({p.split(":")[0] for p in rules.check_node(world, pod, n)}) for n in sorted(world.nodes)
    }


def test_rules_anti_affinity_both_ways() -> None:
    nodes = [_node("n1"), _node("n2", "z2")]
    web = _pod("e1", "n1", labels={"app": "web"})
    pod = _pod(
        "p",
        labels={"app": "db"},
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("web")]}},
    )
    assert _problems(_world(nodes, [web]), pod) == {"n1": ["pod-anti-affinity"], "n2": []}
    # Another namespace is out of the term's reach unless the term names it.
    other = _pod("e1", "n1", labels={"app": "web"}, ns="b")
    assert _problems(_world(nodes, [other]), pod) == {"n1": [], "n2": []}
    reaching = _pod(
        "p",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [_term("web", namespaceSelector={})]
            }
        },
    )
    assert _problems(_world(nodes, [other]), reaching)["n1"] == ["pod-anti-affinity"]
    # A bound pod's own anti-affinity keeps the pod out of its zone.
    guard = _pod(
        "e2",
        "n1",
        labels={"app": "x"},
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("db", ZONE)]}},
    )
    assert _problems(_world([*nodes, _node("n3")], [guard]), pod) == {
        "n1": ["existing-anti-affinity"],
        "n2": [],
        "n3": ["existing-anti-affinity"],
    }


def test_rules_affinity_and_the_first_of_a_group() -> None:
    nodes = [_node("n1"), _node("n2", "z2"), _node("n3", None)]
    pod = _pod(
        "p",
        labels={"app": "web"},
        affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("web", ZONE)]}},
    )
    # Nobody matches and the pod matches itself: anywhere with the key.
    assert _problems(_world(nodes, []), pod) == {"n1": [], "n2": [], "n3": ["pod-affinity"]}
    # Once one matches, only its domain.
    assert _problems(_world(nodes, [_pod("e1", "n2", labels={"app": "web"})]), pod) == {
        "n1": ["pod-affinity"],
        "n2": [],
        "n3": ["pod-affinity"],
    }
    # A pod that does not match itself cannot be the first.
    stranger = _pod("p", labels={"app": "db"}, affinity=pod["spec"]["affinity"])
    assert _problems(_world(nodes, []), stranger)["n1"] == ["pod-affinity"]


def test_rules_topology_spread() -> None:
    nodes = [_node("n1"), _node("n2", "z2"), _node("n3", "z3", taints=[{"key": "k", "effect": "NoSchedule"}])]
    web = [_pod(f"e{i}", "n1", labels={"app": "web"}) for i in range(2)]
    spread = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    tolerant = [{"key": "k", "operator": "Exists"}]
    pod = _pod("p", labels={"app": "web"}, topologySpreadConstraints=[spread], tolerations=tolerant)
    # Global minimum 0 (z2, z3): z1 has skew 3.
    assert _problems(_world(nodes, web), pod) == {"n1": ["topology-spread"], "n2": [], "n3": []}
    # Soft constraints are preferences only.
    soft = _pod(
        "p",
        labels={"app": "web"},
        topologySpreadConstraints=[{**spread, "whenUnsatisfiable": "ScheduleAnyway"}],
    )
    assert _problems(_world(nodes[:2], web), soft) == {"n1": [], "n2": []}
    # minDomains above the eligible domains makes the minimum 0 even where every domain has pods.
    full = [*web, _pod("e9", "n2", labels={"app": "web"}), _pod("e8", "n3", labels={"app": "web"})]
    few = _pod(
        "p",
        labels={"app": "web"},
        topologySpreadConstraints=[{**spread, "maxSkew": 2, "minDomains": 4}],
        tolerations=tolerant,
    )
    assert _problems(_world(nodes, full), few) == {"n1": ["topology-spread"], "n2": [], "n3": []}
    enough = _pod(
        "p", labels={"app": "web"}, topologySpreadConstraints=[{**spread, "maxSkew": 2}], tolerations=tolerant
    )
    assert _problems(_world(nodes, full), enough) == {"n1": [], "n2": [], "n3": []}


def test_rules_ports_resources_taints_selection() -> None:
    port = [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 80}]}]
    local = [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 80, "hostIP": "127.0.0.1"}]}]
    udp = [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "UDP"}]}]
    nodes = [_node("n1", cpu="1"), _node("n2", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])]
    busy = [
        _pod("e1", "n1", containers=local),
        _pod("e2", "n1", containers=[{"name": "m", "resources": {"requests": {"cpu": "2"}}}]),
    ]
    world = _world(nodes, busy)
    # The wildcard conflicts with a specific IP, UDP with nothing; no CPU asked, no CPU checked.
    assert _problems(world, _pod("p", containers=port)) == {"n1": ["host-ports"], "n2": ["taints"]}
    assert _problems(world, _pod("p", containers=udp, tolerations=[{"key": "k", "value": "v"}])) == {
        "n1": [],
        "n2": [],
    }
    hungry = [{"name": "m", "resources": {"requests": {"cpu": "100m"}}}]
    assert _problems(world, _pod("p", containers=hungry))["n1"] == ["resources"]
    pinned = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}
                ]
            }
        }
    }
    assert _problems(world, _pod("p", affinity=pinned, nodeSelector={ZONE: "z1"}))["n1"] == ["node-selector"]


def test_rules_devices_first_fit_in_order() -> None:
    def gpu(name: str, model: str) -> Json:
        return {
            "name": name,
            "attributes": {"model": {"string": model}, "index": {"int": int(name[-1])}},
            "capacity": {"memory": {"value": "80Gi"}},
        }

    world = _world(
        [_node("n1")], [], {"n1": [gpu("gpu-0", "a100"), gpu("gpu-1", "h100"), gpu("gpu-2", "h100")]}
    )
    world.in_use = {("n1", "gpu-1")}
    prioritized = {
        "requests": [
            {
                "name": "r0",
                "firstAvailable": [
                    {"name": "h100", "deviceClassName": "gpu-h100", "count": 2},
                    {"name": "a100", "deviceClassName": "gpu-a100"},
                ],
            }
        ]
    }
    assert rules.expected_devices(world, prioritized, "n1") == [("r0/a100", DRIVER, "n1", "gpu-0")]
    world.in_use = set()
    assert rules.expected_devices(world, prioritized, "n1") == [
        ("r0/h100", DRIVER, "n1", "gpu-1"),
        ("r0/h100", DRIVER, "n1", "gpu-2"),
    ]
    taken = [("r0/h100", DRIVER, "n1", "gpu-1")]
    world.in_use = {("n1", "gpu-1")}
    assert rules.check_devices(world, prioritized, "n1", taken) == [
        "devices: gpu-1 of n1 is already allocated",
        "devices: request r0 got 1 devices, asks 2",
    ]


def test_a_refused_pin_is_a_difference_whatever_draco_did_next() -> None:
    """kube-scheduler refused the node draco pinned (the init container's CPU does not fit
    there), and the safety net then found no node, or placed the pod elsewhere: neither is
    agreement. The judge once saw the first as "both unschedulable"."""
    nodes = [_node("n1", cpu="1"), _node("n2", cpu="1")]
    world = _world(nodes, [])
    pod = _pod(
        "p",
        containers=[{"name": "main"}],
        initContainers=[{"name": "init", "resources": {"requests": {"cpu": "2"}}}],
    )
    claim: Json = {"spec": {"devices": {"requests": []}}}
    upstream = Outcome("unschedulable", message="0/2 nodes are available: 2 Insufficient cpu.")
    refused = [("n1", "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match ...")]
    for after in (Outcome("unschedulable", refusals=refused), Outcome("bound", node="n2", refusals=refused)):
        verdict = judge(world, pod, claim, upstream, [], after)
        assert verdict.mismatch, verdict.category
        assert (
            verdict.category == f"draco pinned a node kube-scheduler refused (resources), then {after.kind}"
        )
    assert not judge(world, pod, claim, upstream, [], Outcome("unschedulable")).mismatch
