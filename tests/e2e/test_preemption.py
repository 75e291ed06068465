"""Priority preemption for pods that hold devices, on a real API server with the operator as
a process and a real kube-scheduler beside it: a pod of high priority that fits nowhere
evicts the fewest pods of lower priority (DisruptionTarget PreemptionByScheduler, the
Preempted Event), is nominated to their node and runs on the devices they freed, on the
gate path (kube-scheduler binds what draco pinned) and when draco binds;
``preemptionPolicy: Never`` waits; a PodDisruptionBudget is respected where another victim
exists. There is no kubelet: a deleted pod stays Terminating, so the test finishes the
deletion of a victim as the kubelet would once its containers stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from draco.api.constants import POD_GROUP_LABEL, SCHEDULER_NAME
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.schedulerkit import NEEDS_KUBE_SCHEDULER
from tests.e2e.support import DracoProcess, start_operator, wait_for
from tests.e2e.test_gangs import ONE_GPU, all_running, pod_group, pods_of, setup, told
from tests.e2e.test_placement import nodes, pod, template, wait_bound

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]
Obj = dict[str, Any]


@pytest.fixture
def priorities(kube: ControlPlane, namespace: str) -> Iterator[dict[str, str]]:
    """PriorityClasses of this test (cluster-scoped, removed after): low 10, mid 20,
    high 1000, and high-never (1000, preemptionPolicy Never)."""
    made = {
        "low": (10, "PreemptLowerPriority"),
        "mid": (20, "PreemptLowerPriority"),
        "high": (1000, "PreemptLowerPriority"),
        "high-never": (1000, "Never"),
    }
    names = {role: f"{namespace}-{role}" for role in made}
    k.apply(
        kube,
        [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": names[role]},
                "value": value,
                "preemptionPolicy": policy,
            }
            for role, (value, policy) in made.items()
        ],
    )
    yield names
    for name in names.values():
        kube.kubectl("delete", "priorityclass", name, "--ignore-not-found", "--wait=false")


def workload(namespace: str, name: str, scheduler: str, priority_class: str, **spec: Any) -> Obj:
    """A pod of one GPU (template ``one``) on the gate path (``scheduler``: this test's
    kube-scheduler) or bound by draco (``scheduler`` is draco's name: no gate)."""
    body = pod(namespace, name, scheduler, priorityClassName=priority_class, **spec)
    if scheduler == SCHEDULER_NAME:
        body["spec"].pop("schedulingGates", None)
    return body


def preempted(obj: Obj | None) -> bool:
    return any(
        c.get("type") == "DisruptionTarget" and c.get("reason") == "PreemptionByScheduler"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


def devices_of(kube: ControlPlane, namespace: str, name: str) -> list[tuple[str, str, str]]:
    obj = k.get(kube, "pod", name, namespace=namespace) or {}
    found = []
    for claim_name in k.generated_claims(obj).values():
        claim = k.get(kube, k.CLAIMS, str(claim_name), namespace=namespace) if claim_name else None
        found += k.allocated_devices(claim or {})
    return found


def finish_deletion(kube: ControlPlane, namespace: str, name: str) -> None:
    """What the kubelet does once a deleted pod's containers stopped."""
    kube.kubectl("delete", "pod", name, "-n", namespace, "--grace-period=0", "--force", "--ignore-not-found")


def evicted(
    kube: ControlPlane, namespace: str, names: list[str], operator: DracoProcess, *, what: str
) -> None:
    """Wait until each of ``names`` is marked preempted (or already gone), then finish their
    deletion as a kubelet would: a pod some kube-scheduler of the worker's control plane bound
    meanwhile stays Terminating on these kubelet-less nodes, one never bound is gone at once."""

    def marked() -> bool:
        return all((p := k.get(kube, "pod", n, namespace=namespace)) is None or preempted(p) for n in names)

    wait_for(marked, timeout=120, what=what + ": marked", explain=operator.logs)
    for name in names:
        finish_deletion(kube, namespace, name)
    wait_for(
        lambda: all(k.get(kube, "pod", n, namespace=namespace) is None for n in names),
        timeout=60,
        what=what + ": gone",
        explain=operator.logs,
    )


def full_node(
    kube: ControlPlane,
    namespace: str,
    scheduler: str,
    priorities: dict[str, str],
    draco_process: Start,
    *,
    extra: tuple[str, ...] = (),
) -> tuple[str, DracoProcess, dict[str, list[tuple[str, str, str]]]]:
    """One node of two GPUs, each held by a running pod of low priority; the operator."""
    (node,) = nodes(kube, namespace, 1, devices=2)
    k.apply(kube, [template(namespace)])
    k.create(kube, [workload(namespace, f"low{i}", scheduler, priorities["low"]) for i in range(2)])
    operator = start_operator(draco_process, namespace, extra=extra)
    wait_bound(kube, namespace, ["low0", "low1"])
    held = {name: devices_of(kube, namespace, name) for name in ("low0", "low1")}
    assert all(held.values())
    return node, operator, held


@NEEDS_KUBE_SCHEDULER
@pytest.mark.parametrize("path", ["gate", "draco-binds"])
def test_a_high_priority_pod_evicts_exactly_one_low_priority_pod_and_runs_on_its_gpu(
    kube: ControlPlane,
    namespace: str,
    draco_process: Start,
    scheduler: str,
    priorities: dict[str, str],
    path: str,
) -> None:
    name = scheduler if path == "gate" else SCHEDULER_NAME
    node, operator, held = full_node(kube, namespace, name, priorities, draco_process)
    k.create(kube, [workload(namespace, "high", name, priorities["high"])])

    def victims() -> list[str] | None:
        marked = [n for n in held if preempted(k.get(kube, "pod", n, namespace=namespace))]
        return marked or None

    marked = wait_for(victims, timeout=90, what="a victim marked", explain=operator.logs)
    assert isinstance(marked, list) and len(marked) == 1
    (victim,) = marked
    survivor = next(n for n in held if n != victim)
    high = k.get(kube, "pod", "high", namespace=namespace)
    assert high is not None and high["status"].get("nominatedNodeName") == node
    assert k.event_notes(kube, namespace, victim, "Preempted")
    notes = k.event_notes(kube, namespace, "high", "Preempting")
    assert notes and f"{namespace}/{victim}" in notes[0] and survivor not in notes[0]

    finish_deletion(kube, namespace, victim)
    assert wait_bound(kube, namespace, ["high"]) == {"high": node}
    assert wait_for(lambda: devices_of(kube, namespace, "high"), timeout=60, what="high's devices")
    assert devices_of(kube, namespace, "high") == held[victim]
    after = k.get(kube, "pod", survivor, namespace=namespace)
    assert after is not None and not preempted(after) and not after["metadata"].get("deletionTimestamp")
    assert devices_of(kube, namespace, survivor) == held[survivor]


def test_an_operator_killed_between_evictions_and_placement_resumes_and_keeps_the_gpu(
    kube: ControlPlane, namespace: str, draco_process: Start, priorities: dict[str, str]
) -> None:
    """The operator is killed once the victim is marked; meanwhile a pod of low priority
    asks for a GPU. The new operator finds the nomination in the API: the freed GPU goes to
    the preemptor, not to the newcomer, and nothing more is preempted."""
    node, operator, held = full_node(
        kube, namespace, SCHEDULER_NAME, priorities, draco_process, extra=("--leader-elect=false",)
    )
    k.create(kube, [workload(namespace, "high", SCHEDULER_NAME, priorities["high"])])
    marked = wait_for(
        lambda: [n for n in held if preempted(k.get(kube, "pod", n, namespace=namespace))] or None,
        timeout=90,
        what="a victim marked",
        explain=operator.logs,
    )
    assert isinstance(marked, list) and len(marked) == 1
    (victim,) = marked
    operator.kill()
    k.create(kube, [workload(namespace, "newcomer", SCHEDULER_NAME, priorities["low"])])
    operator = start_operator(draco_process, namespace, extra=("--leader-elect=false",))
    finish_deletion(kube, namespace, victim)
    assert wait_bound(kube, namespace, ["high"]) == {"high": node}
    assert wait_for(lambda: devices_of(kube, namespace, "high"), timeout=60, what="high's devices")
    assert devices_of(kube, namespace, "high") == held[victim]
    survivor = next(n for n in held if n != victim)
    assert not preempted(k.get(kube, "pod", survivor, namespace=namespace))
    newcomer = k.get(kube, "pod", "newcomer", namespace=namespace)
    assert newcomer is not None and not newcomer["spec"].get("nodeName")


@NEEDS_KUBE_SCHEDULER
def test_preemption_policy_never_waits(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str, priorities: dict[str, str]
) -> None:
    _, operator, held = full_node(kube, namespace, SCHEDULER_NAME, priorities, draco_process)
    k.create(kube, [workload(namespace, "polite", SCHEDULER_NAME, priorities["high-never"])])
    wait_for(
        lambda: any(
            "preemptionPolicy=Never" in note
            for note in k.event_notes(kube, namespace, "polite", "FailedScheduling")
        ),
        timeout=90,
        what="FailedScheduling saying preemptionPolicy=Never",
        explain=operator.logs,
    )
    for name in held:
        obj = k.get(kube, "pod", name, namespace=namespace)
        assert obj is not None and not preempted(obj) and not obj["metadata"].get("deletionTimestamp")
    polite = k.get(kube, "pod", "polite", namespace=namespace)
    assert polite is not None and not polite["spec"].get("nodeName")
    assert not (polite.get("status") or {}).get("nominatedNodeName")


@NEEDS_KUBE_SCHEDULER
def test_a_pdb_is_respected_where_another_victim_exists(
    kube: ControlPlane, namespace: str, draco_process: Start, scheduler: str, priorities: dict[str, str]
) -> None:
    """Two nodes of one GPU: the lowest-priority pod is covered by a PodDisruptionBudget
    (no disruption allowed), the other, of higher priority, is not: that one is evicted."""
    names = nodes(kube, namespace, 2, devices=1)
    k.apply(kube, [template(namespace)])
    k.apply(
        kube,
        [
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "keep", "namespace": namespace},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kept"}}},
            }
        ],
    )
    k.create(
        kube,
        [workload(namespace, "kept", SCHEDULER_NAME, priorities["low"], labels={"app": "kept"})],
    )
    operator = start_operator(draco_process, namespace)
    wait_bound(kube, namespace, ["kept"])
    k.create(kube, [workload(namespace, "other", SCHEDULER_NAME, priorities["mid"])])
    wait_bound(kube, namespace, ["other"])
    k.create(kube, [workload(namespace, "high", SCHEDULER_NAME, priorities["high"])])
    wait_for(
        lambda: preempted(k.get(kube, "pod", "other", namespace=namespace)),
        timeout=90,
        what="the pod no PDB covers preempted",
        explain=operator.logs,
    )
    assert not preempted(k.get(kube, "pod", "kept", namespace=namespace))
    finish_deletion(kube, namespace, "other")
    placed = wait_bound(kube, namespace, ["high", "kept"])
    assert placed["high"] != placed["kept"] and sorted(placed.values()) == names


# --- groups ------------------------------------------------------------------------------------


def gated(namespace: str, name: str, priority_class: str, **labels: str) -> Obj:
    body = k.pod(namespace, name, ONE_GPU, labels=labels)
    body["spec"]["priorityClassName"] = priority_class
    return body


def running_pinned(kube: ControlPlane, namespace: str, names: list[str], operator: DracoProcess) -> None:
    wait_for(
        lambda: all(
            (p := k.get(kube, "pod", n, namespace=namespace)) and not k.is_gated(p) and k.pinned_node(p)
            for n in names
        ),
        timeout=90,
        what=f"{names} placed",
        explain=operator.logs,
    )


def gang_beside_singles(
    kube: ControlPlane, namespace: str, draco_process: Start, priorities: dict[str, str], *, outranked: bool
) -> DracoProcess:
    """Four one-GPU nodes, each held by a single pod of low priority (the last of high
    priority when ``outranked``: only three GPUs can be freed), then a gang of four."""
    setup(kube, namespace, {s: 1 for s in "abcd"})
    k.create(
        kube,
        [
            gated(namespace, f"single{i}", priorities["high" if outranked and i == 3 else "low"])
            for i in range(4)
        ],
    )
    operator = start_operator(draco_process, namespace)
    running_pinned(kube, namespace, [f"single{i}" for i in range(4)], operator)
    k.apply(kube, [pod_group(namespace, "train", 4)])
    k.create(
        kube,
        [gated(namespace, f"train-{i}", priorities["mid"], **{POD_GROUP_LABEL: "train"}) for i in range(4)],
    )
    return operator


def test_a_gang_of_four_preempts_four_single_pods_at_once(
    kube: ControlPlane, namespace: str, draco_process: Start, priorities: dict[str, str]
) -> None:
    operator = gang_beside_singles(kube, namespace, draco_process, priorities, outranked=False)
    evicted(kube, namespace, [f"single{i}" for i in range(4)], operator, what="the four single pods evicted")
    assert wait_for(lambda: all_running(kube, namespace, "train", 4), timeout=120, what="the gang running")
    notes = [n for i in range(4) for n in k.event_notes(kube, namespace, f"train-{i}", "Preempting")]
    assert sorted(n.rsplit(" ", 1)[-1] for n in notes) == [f"{namespace}/single{i}" for i in range(4)]


def test_a_gang_of_four_that_three_evictions_cannot_place_evicts_nobody(
    kube: ControlPlane, namespace: str, draco_process: Start, priorities: dict[str, str]
) -> None:
    operator = gang_beside_singles(kube, namespace, draco_process, priorities, outranked=True)
    wait_for(
        lambda: told(kube, namespace, "train-0", "can be placed together"),
        timeout=90,
        what="the gang told it cannot be placed",
        explain=operator.logs,
    )
    assert "No preemption places the group" in operator.logs()
    assert all(k.get(kube, "pod", f"single{i}", namespace=namespace) is not None for i in range(4))
    assert not any(preempted(k.get(kube, "pod", f"single{i}", namespace=namespace)) for i in range(4))
    assert all(k.is_gated(p) for p in pods_of(kube, namespace, "train"))


def test_a_running_gang_is_evicted_whole(
    kube: ControlPlane, namespace: str, draco_process: Start, priorities: dict[str, str]
) -> None:
    """A gang of two on two one-GPU nodes; a pod of higher priority needing one GPU evicts
    the whole gang, not one member (a gang with one member stopped does not run)."""
    setup(kube, namespace, {"a": 1, "b": 1})
    k.apply(kube, [pod_group(namespace, "train", 2)])
    k.create(
        kube,
        [gated(namespace, f"train-{i}", priorities["low"], **{POD_GROUP_LABEL: "train"}) for i in range(2)],
    )
    operator = start_operator(draco_process, namespace)
    running_pinned(kube, namespace, ["train-0", "train-1"], operator)
    k.create(kube, [gated(namespace, "urgent", priorities["high"])])
    evicted(kube, namespace, ["train-0", "train-1"], operator, what="both members of the gang evicted")
    assert not pods_of(kube, namespace, "train")
    running_pinned(kube, namespace, ["urgent"], operator)
    # The decision that evicted the running gang named both members. Once train-0 is gone,
    # and before its claim is deallocated, the pod may be decided again and name train-1,
    # terminating already, as kube-scheduler's PostFilter counts a victim still on its node:
    # a second Preempting Event, no second delete (a terminating victim is not deleted again).
    notes = k.event_notes(kube, namespace, "urgent", "Preempting")
    assert any("train-0" in note and "train-1" in note for note in notes), notes
