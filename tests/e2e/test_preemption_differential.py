"""Preemption for CPU alone, draco against kube-scheduler, on random cases from a seed.

Each case: 2 to 4 nodes of 4 CPUs (labelled for the case), pods bound to them with CPU
requests and priorities 0 to 30 (PriorityClasses; some without one), sometimes a
PodDisruptionBudget over some of them (no disruption allowed), and an incoming pod of
priority 100 whose CPU request fits no node as it is. The same case runs twice in one
namespace: first the pod names this test's kube-scheduler (its DefaultPreemption
decides), then, everything made again, it names draco (draco's preemption decides). Both
answers are read from the API: the pod's ``status.nominatedNodeName`` and the pods marked
``DisruptionTarget`` (reason ``PreemptionByScheduler``).

They agree when the nominated node is the same, or the two nodes tie by upstream's order
(PDB violations, highest victim priority, priority sum, victim count: the pods never start,
so start times tie), and the victims' priorities are the same multiset (kube-scheduler sorts
victims of equal priority unstably: which one of two equals it reprieves is its choice).
``DRACO_PREEMPTION_CASES`` (default 4) and ``DRACO_PREEMPTION_SEED`` choose the run; the
summary goes to ``DRACO_PREEMPTION_OUT``.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from draco.api.constants import SCHEDULER_NAME
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.schedulerkit import NEEDS_KUBE_SCHEDULER
from tests.e2e.support import DracoProcess, start_operator, wait_for

pytestmark = [pytest.mark.e2e, NEEDS_KUBE_SCHEDULER]

Start = Callable[..., DracoProcess]
Obj = dict[str, Any]
CASES = int(os.environ.get("DRACO_PREEMPTION_CASES") or 4)
SEED = int(os.environ.get("DRACO_PREEMPTION_SEED") or random.SystemRandom().randrange(1, 2**31))
PRIORITIES = (10, 20, 30)
LABEL = "e2e.draco.dev/preemption-case"
#: Where the run's summary and mismatches are written (the e2e workers keep stdout).
OUT = Path(os.environ.get("DRACO_PREEMPTION_OUT") or "/tmp/draco-preemption-differential.txt")


def case(rng: random.Random, index: int) -> Obj:
    """Nodes of 4 CPUs; bound pods (name, node, millicores, priority or 0, protected by the
    PDB); the incoming pod's millicores, more than any node has free."""
    nodes = [f"n{i}" for i in range(rng.choice((2, 3, 4)))]
    pods = []
    for node in nodes:
        free = 4000
        for _ in range(rng.choice((1, 2, 3))):
            cpu = min(free, rng.choice((500, 1000, 1500, 2000)))
            if cpu <= 0:
                break
            free -= cpu
            pods.append(
                {
                    "name": f"e{len(pods)}",
                    "node": node,
                    "cpu": cpu,
                    "priority": rng.choice((0, *PRIORITIES)),
                    "kept": rng.random() < 0.25,
                }
            )
    used = {n: sum(p["cpu"] for p in pods if p["node"] == n) for n in nodes}
    most_free = max(4000 - u for u in used.values())
    want = rng.choice([c for c in (1000, 1500, 2000, 2500, 3000, 3500, 4000) if c > most_free] or [4000])
    return {"index": index, "nodes": nodes, "pods": pods, "want": want, "pdb": rng.random() < 0.4}


@pytest.fixture
def classes(kube: ControlPlane, namespace: str) -> Iterator[dict[int, str]]:
    names = {value: f"{namespace}-p{value}" for value in (*PRIORITIES, 100)}
    k.apply(
        kube,
        [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": n},
                "value": v,
            }
            for v, n in names.items()
        ],
    )
    yield names
    for name in names.values():
        kube.kubectl("delete", "priorityclass", name, "--ignore-not-found", "--wait=false")


def objects(namespace: str, spec: Obj, classes: dict[int, str], scheduler: str, run: str) -> list[Obj]:
    label = f"{namespace}-{spec['index']}-{run}"
    made: list[Obj] = [
        k.node(f"{label}-{n}", labels={LABEL: label}, cpu="4", memory="64Gi") for n in spec["nodes"]
    ]
    for pod in spec["pods"]:
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod["name"],
                "namespace": namespace,
                "labels": {"kept": str(pod["kept"]).lower()},
            },
            "spec": {
                "nodeName": f"{label}-{pod['node']}",
                "terminationGracePeriodSeconds": 30,
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/none",
                        "resources": {"requests": {"cpu": f"{pod['cpu']}m"}},
                    }
                ],
            },
        }
        if pod["priority"]:
            body["spec"]["priorityClassName"] = classes[pod["priority"]]
        made.append(body)
    made.append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "incoming", "namespace": namespace},
            "spec": {
                "schedulerName": scheduler,
                "priorityClassName": classes[100],
                "nodeSelector": {LABEL: label},
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/none",
                        "resources": {"requests": {"cpu": f"{spec['want']}m"}},
                    }
                ],
            },
        }
    )
    return made


def answer(kube: ControlPlane, namespace: str, spec: Obj, run: str) -> tuple[str, list[str]] | None:
    """(nominated node, victims) once the incoming pod is nominated; ("", []) when it was
    told it fits nowhere and nominated nowhere."""
    pod = k.get(kube, "pod", "incoming", namespace=namespace) or {}
    nominated = (pod.get("status") or {}).get("nominatedNodeName") or ""
    victims = sorted(
        p["metadata"]["name"]
        for p in k.items(kube, "pods", namespace=namespace)
        if p["metadata"].get("deletionTimestamp")
        or any(
            c.get("reason") == "PreemptionByScheduler"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )
    if nominated:
        prefix = f"{namespace}-{spec['index']}-{run}-"
        return nominated.removeprefix(prefix), victims
    conditions = (pod.get("status") or {}).get("conditions") or []
    refused = any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)
    told = k.event_notes(kube, namespace, "incoming", "FailedScheduling")
    return ("", victims) if refused and told and not victims else None


def clear(kube: ControlPlane, namespace: str) -> None:
    kube.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", "--wait=true")
    kube.kubectl("delete", "pdb", "--all", "-n", namespace, "--ignore-not-found")
    kube.kubectl("delete", "nodes", "-l", LABEL, "--ignore-not-found")


def order_key(spec: Obj, victims: list[str]) -> tuple[int, int, int, int]:
    """upstream's order over a node's victims: PDB violations, highest priority, sum, count."""
    by_name = {p["name"]: p for p in spec["pods"]}
    chosen = [by_name[v] for v in victims if v in by_name]
    violations = sum(1 for p in chosen if p["kept"]) if spec["pdb"] else 0
    priorities = [p["priority"] for p in chosen]
    return violations, max(priorities, default=-1), sum(priorities), len(priorities)


def run_once(
    kube: ControlPlane, namespace: str, spec: Obj, classes: dict[int, str], scheduler: str, run: str
) -> Any:
    clear(kube, namespace)
    made = objects(namespace, spec, classes, scheduler, run)
    k.add_nodes(kube, [o for o in made if o["kind"] == "Node"])
    if spec["pdb"]:
        k.apply(
            kube,
            [
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": "kept", "namespace": namespace},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"kept": "true"}}},
                }
            ],
        )
    k.create(kube, [o for o in made if o["kind"] == "Pod" and o["metadata"]["name"] != "incoming"])
    k.create(kube, [o for o in made if o["metadata"].get("name") == "incoming"])
    return wait_for(lambda: answer(kube, namespace, spec, run), timeout=90, what=f"{run}'s preemption answer")


def test_draco_preempts_as_kube_scheduler_does_for_cpu(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str, classes: dict[int, str]
) -> None:
    print(f"\npreemption differential: seed {SEED}, {CASES} cases (DRACO_PREEMPTION_SEED={SEED} replays)")
    start_operator(draco_process, namespace)
    verdicts: Counter[str] = Counter()
    mismatches = []
    for index in range(CASES):
        spec = case(random.Random(f"{SEED}-{index}"), index)
        upstream = run_once(kube, namespace, spec, classes, scheduler, "upstream")
        draco = run_once(kube, namespace, spec, classes, SCHEDULER_NAME, "draco")
        (up_node, up_victims), (dr_node, dr_victims) = upstream, draco
        by_name = {p["name"]: p["priority"] for p in spec["pods"]}
        same_priorities = sorted(by_name[v] for v in up_victims) == sorted(by_name[v] for v in dr_victims)
        if (up_node, up_victims) == (dr_node, dr_victims):
            verdicts["same node, same victims"] += 1
        elif same_priorities and (
            up_node == dr_node or order_key(spec, up_victims) == order_key(spec, dr_victims)
        ):
            verdicts["tie (equal by upstream's order)"] += 1
        else:
            verdicts["different"] += 1
            mismatches.append(f"case {index} {spec}: upstream {upstream}, draco {draco}")
    clear(kube, namespace)
    summary = f"preemption differential: seed {SEED}, {CASES} cases: {dict(verdicts)}"
    print(summary)
    OUT.write_text("\n".join([summary, *mismatches]) + "\n")
    assert not mismatches, "\n".join(mismatches)
