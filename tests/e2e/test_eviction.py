"""Device-taint eviction on a real API server, the operator running as a process.

Pods are "running" once bound (`spec.nodeName` set by a Binding, as kube-scheduler would
do; there is no kubelet, so a deleted pod stays Terminating: "evicted" here means it has a
deletionTimestamp, or is gone). Each test builds its own nodes, class and slices for a
driver named after its namespace; a rule selects that driver only.

Negative cases ("not evicted") are checked once an observable signal proves the
controller has looked: another pod evicted in the same pass, a "Cancelling deletion"
Event, or the rule's condition.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import lifecycle_support as ls
from tests.e2e import schedkit as k
from tests.e2e.chartkit import operator_credentials
from tests.e2e.support import DracoProcess, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]
RULES = "devicetaintrules.resource.draco.dev"
TAINT_KEY = "example.com/maintenance"
ROOT = Path(__file__).resolve().parents[2]


def stamp(when: datetime.datetime | None = None) -> str:
    return (when or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def cluster(kube: ControlPlane, namespace: str, *, nodes: int, devices: int) -> list[str]:
    names = [f"{namespace}-n{i}" for i in range(nodes)]
    k.add_nodes(kube, [k.node(n) for n in names])
    k.apply(kube, [k.device_class(namespace)])
    k.apply(kube, [k.node_slice(namespace, n, devices) for n in names])
    return names


def claim_with(namespace: str, name: str, *, tolerations: list[k.Obj] | None = None) -> k.Obj:
    obj = k.claim(namespace, name)
    if tolerations is not None:
        obj["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = tolerations
    return obj


def running(kube: ControlPlane, namespace: str, name: str, *, bind: bool = True) -> k.Obj:
    """Wait until the operator un-gated pod `name`, then bind it to its pinned node."""
    pod = wait_for(
        lambda: (p := k.get(kube, "pod", name, namespace=namespace)) and not k.is_gated(p) and p,
        timeout=90,
        what=f"pod {name} un-gated",
    )
    assert isinstance(pod, dict)
    node = k.pinned_node(pod)
    assert node is not None
    if bind:
        ls.bind(kube, name, node, namespace=namespace)
    found = k.get(kube, "pod", name, namespace=namespace)
    assert found is not None
    return found


def device_of(
    kube: ControlPlane, namespace: str, pod: k.Obj, claim_name: str | None = None
) -> tuple[str, str, str]:
    if claim_name is None:
        claim_name = next(iter(k.generated_claims(pod).values())) or ""
    claim = k.get(kube, k.CLAIMS, claim_name, namespace=namespace)
    assert claim is not None
    devices = k.allocated_devices(claim)
    assert len(devices) == 1
    return devices[0]


def slice_name(namespace: str, node: str) -> str:
    return f"{node}-{k.driver_of(namespace)}"


def set_taints(kube: ControlPlane, namespace: str, node: str, taints: dict[str, list[k.Obj]]) -> None:
    """Replace the taints of devices (by name) in the node's slice."""
    obj = k.get(kube, k.SLICES, slice_name(namespace, node))
    assert obj is not None
    for device in obj["spec"]["devices"]:
        if device["name"] in taints:
            device["taints"] = taints[device["name"]]
    for key in ("resourceVersion", "managedFields", "uid", "creationTimestamp", "generation"):
        obj["metadata"].pop(key, None)
    k.apply(kube, [obj])


def taint(
    effect: str = "NoExecute", *, key: str = TAINT_KEY, added: str | None = None, **extra: str
) -> k.Obj:
    return {"key": key, "effect": effect, "timeAdded": added or stamp(), **extra}


def rule(name: str, namespace: str, *, effect: str, device: str | None = None) -> k.Obj:
    selector: k.Obj = {"driver": k.driver_of(namespace)}
    if device is not None:
        selector["device"] = device
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": selector,
            "taint": {"key": TAINT_KEY, "value": "gpu-swap", "effect": effect, "timeAdded": stamp()},
        },
    }


def evicted(kube: ControlPlane, namespace: str, name: str) -> bool:
    pod = k.get(kube, "pod", name, namespace=namespace)
    return pod is None or bool(pod["metadata"].get("deletionTimestamp"))


def disruption(kube: ControlPlane, namespace: str, name: str) -> k.Obj | None:
    pod = k.get(kube, "pod", name, namespace=namespace)
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget":
            return dict(condition)
    return None


def notes(kube: ControlPlane, namespace: str, name: str) -> list[str]:
    return k.event_notes(kube, namespace, name, "DeviceTaintManagerEviction")


def assert_evicted(kube: ControlPlane, namespace: str, name: str, *, timeout: float = 60) -> None:
    wait_for(lambda: evicted(kube, namespace, name), timeout=timeout, what=f"pod {name} evicted")
    condition = disruption(kube, namespace, name)
    if k.get(kube, "pod", name, namespace=namespace) is not None:  # Terminating: no kubelet here
        assert condition is not None, f"pod {name} has no DisruptionTarget condition"
        assert condition["status"] == "True"
        assert condition["reason"] == "DeletionByDeviceTaintManager"
        assert condition["message"] == "Device Taint manager: deleting due to NoExecute taint"
    assert "Marking for deletion" in notes(kube, namespace, name)


def assert_running(kube: ControlPlane, namespace: str, name: str) -> None:
    pod = k.get(kube, "pod", name, namespace=namespace)
    assert pod is not None and not pod["metadata"].get("deletionTimestamp"), f"pod {name} was evicted"
    assert disruption(kube, namespace, name) is None
    assert "Marking for deletion" not in notes(kube, namespace, name)


def condition_of(kube: ControlPlane, name: str) -> k.Obj | None:
    obj = k.get(kube, RULES, name)
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "EvictionInProgress":
            return dict(condition)
    return None


def wait_condition(kube: ControlPlane, name: str, reason: str, *, timeout: float = 60) -> k.Obj:
    found = wait_for(
        lambda: (c := condition_of(kube, name)) is not None and c["reason"] == reason and c,
        timeout=timeout,
        what=f"rule {name} condition {reason}",
    )
    assert isinstance(found, dict)
    return found


@pytest.fixture
def rules(kube: ControlPlane) -> Iterator[list[str]]:
    """Names of rules a test created; deleted at the end (rules are cluster-scoped)."""
    created: list[str] = []
    yield created
    for name in created:
        kube.kubectl("delete", RULES, name, "--ignore-not-found", "--wait=false", check=False)


def create_rule(kube: ControlPlane, rules: list[str], obj: k.Obj) -> None:
    rules.append(obj["metadata"]["name"])
    k.apply(kube, [obj])


# --- evictions --------------------------------------------------------------------------------


def test_slice_taint_evicts_pods_of_generated_and_user_claims_only(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    (node,) = cluster(kube, namespace, nodes=1, devices=6)
    k.apply(kube, [k.template(namespace, "t"), k.claim(namespace, "user")])
    for name in ("none", "nosched", "other", "unbound"):
        k.apply(kube, [k.claim(namespace, name)])
    k.create(
        kube,
        [
            k.pod(namespace, "p-gen", [{"name": "gpu", "resourceClaimTemplateName": "t"}]),
            k.pod(namespace, "p-user", [{"name": "gpu", "resourceClaimName": "user"}]),
            *(
                k.pod(namespace, f"p-{name}", [{"name": "gpu", "resourceClaimName": name}])
                for name in ("none", "nosched", "other", "unbound")
            ),
        ],
    )
    start_operator(draco_process, namespace)
    pods = {
        name: running(kube, namespace, f"p-{name}", bind=name != "unbound")
        for name in ("gen", "user", "none", "nosched", "other", "unbound")
    }
    device = {
        name: device_of(kube, namespace, pod, None if name == "gen" else name)[2]
        for name, pod in pods.items()
    }

    set_taints(
        kube,
        namespace,
        node,
        {
            device["gen"]: [taint()],
            device["user"]: [taint(), taint("None", key="example.com/info")],
            device["unbound"]: [taint()],
            device["none"]: [taint("None")],
            device["nosched"]: [taint("NoSchedule")],
        },
    )
    assert_evicted(kube, namespace, "p-gen")
    assert_evicted(kube, namespace, "p-user")
    for name in ("none", "nosched", "other", "unbound"):
        assert_running(kube, namespace, f"p-{name}")


def test_rule_status_for_each_effect_then_eviction(
    kube: ControlPlane, namespace: str, draco_process: Start, rules: list[str]
) -> None:
    cluster(kube, namespace, nodes=1, devices=2)
    k.apply(kube, [k.claim(namespace, "a"), k.claim(namespace, "b")])
    k.create(
        kube,
        [
            k.pod(namespace, "pa", [{"name": "gpu", "resourceClaimName": "a"}]),
            k.pod(namespace, "pb", [{"name": "gpu", "resourceClaimName": "b"}]),
        ],
    )
    start_operator(draco_process, namespace)
    running(kube, namespace, "pa")
    running(kube, namespace, "pb")
    target = device_of(kube, namespace, k.get(kube, "pod", "pa", namespace=namespace) or {}, "a")[2]
    name = f"drain-{namespace}"

    # None: who would be evicted, by name.
    create_rule(kube, rules, rule(name, namespace, effect="None", device=target))
    condition = wait_condition(kube, name, "NoEffect")
    assert condition["status"] == "False"
    assert condition["observedGeneration"] == 1
    assert condition["message"].startswith(
        "1 published device selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace "
        f"if the effect was NoExecute: {namespace} (pa)."
    )
    # The printer columns show the effect and the condition.
    header, row = kube.kubectl("get", RULES, name).stdout.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "KEY", "EFFECT", "EVICTING", "REASON"]
    assert row.split()[1:5] == [TAINT_KEY, "None", "False", "NoEffect"]

    # NoSchedule: no eviction here.
    k.apply(kube, [rule(name, namespace, effect="NoSchedule", device=target)])
    condition = wait_condition(kube, name, "OtherEffect")
    assert condition["message"] == "Eviction only happens for the NoExecute effect."
    assert condition["observedGeneration"] == 2
    assert_running(kube, namespace, "pa")

    # NoExecute: pa goes, pb (another device) stays.
    k.apply(kube, [rule(name, namespace, effect="NoExecute", device=target)])
    assert_evicted(kube, namespace, "pa")
    condition = wait_condition(kube, name, "Completed", timeout=60)
    assert condition["status"] == "False"
    assert condition["message"] == "1 pod evicted since starting the controller."
    assert_running(kube, namespace, "pb")


def test_none_rule_simulation_is_kept_current(
    kube: ControlPlane, namespace: str, draco_process: Start, rules: list[str]
) -> None:
    cluster(kube, namespace, nodes=1, devices=2)
    k.apply(kube, [k.claim(namespace, "a"), k.claim(namespace, "b")])
    k.create(kube, [k.pod(namespace, "pa", [{"name": "gpu", "resourceClaimName": "a"}])])
    start_operator(draco_process, namespace)
    running(kube, namespace, "pa")
    name = f"preview-{namespace}"
    create_rule(kube, rules, rule(name, namespace, effect="None"))
    wait_for(
        lambda: (
            f"1 pod would be evicted in 1 namespace if the effect was NoExecute: {namespace} (pa)."
            in (condition_of(kube, name) or {}).get("message", "")
        ),
        timeout=60,
        what="the None rule names pa",
    )
    k.create(kube, [k.pod(namespace, "pb", [{"name": "gpu", "resourceClaimName": "b"}])])
    running(kube, namespace, "pb")
    wait_for(
        lambda: (
            f"2 pods would be evicted in 1 namespace if the effect was NoExecute: {namespace} (pa, pb)."
            in (condition_of(kube, name) or {}).get("message", "")
        ),
        timeout=60,
        what="the None rule names pa and pb",
    )
    assert_running(kube, namespace, "pa")
    assert_running(kube, namespace, "pb")


def test_toleration_seconds_delay_eviction_and_forever_tolerates(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    (node,) = cluster(kube, namespace, nodes=1, devices=2)
    several = [
        {"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        {"key": TAINT_KEY, "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 6},
        {"key": "example.com/second", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 40},
    ]
    forever = [{"operator": "Exists", "effect": "NoExecute"}]
    k.apply(kube, [claim_with(namespace, "later", tolerations=several)])
    k.apply(kube, [claim_with(namespace, "forever", tolerations=forever)])
    k.create(
        kube,
        [
            k.pod(namespace, "p-later", [{"name": "gpu", "resourceClaimName": "later"}]),
            k.pod(namespace, "p-forever", [{"name": "gpu", "resourceClaimName": "forever"}]),
        ],
    )
    start_operator(draco_process, namespace)
    later = device_of(kube, namespace, running(kube, namespace, "p-later"), "later")[2]
    kept = device_of(kube, namespace, running(kube, namespace, "p-forever"), "forever")[2]

    added = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    two = [taint(added=stamp(added), value="v"), taint(key="example.com/second", added=stamp(added))]
    set_taints(kube, namespace, node, {later: two, kept: two})
    assert_evicted(kube, namespace, "p-later", timeout=60)
    condition = disruption(kube, namespace, "p-later")
    assert condition is not None
    at = parse(condition["lastTransitionTime"])
    # min(60, 6) for the first taint, 40 for the second: 6 s after timeAdded, not before.
    assert at >= added + datetime.timedelta(seconds=6), (at, added)
    assert at < added + datetime.timedelta(seconds=40), (at, added)
    assert_running(kube, namespace, "p-forever")


def test_tainted_before_allocation_with_matching_toleration_is_not_evicted(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    (node,) = cluster(kube, namespace, nodes=1, devices=2)
    set_taints(kube, namespace, node, {"gpu-0": [taint()], "gpu-1": [taint()]})
    tolerant = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}]
    brief = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]
    k.apply(kube, [claim_with(namespace, "tolerant", tolerations=tolerant)])
    k.apply(kube, [claim_with(namespace, "brief", tolerations=brief)])
    k.create(
        kube,
        [
            k.pod(namespace, "p-tolerant", [{"name": "gpu", "resourceClaimName": "tolerant"}]),
            k.pod(namespace, "p-brief", [{"name": "gpu", "resourceClaimName": "brief"}]),
        ],
    )
    start_operator(draco_process, namespace)
    running(kube, namespace, "p-tolerant")
    running(kube, namespace, "p-brief")
    claim = k.get(kube, k.CLAIMS, "tolerant", namespace=namespace) or {}
    assert claim["status"]["allocation"]["devices"]["results"][0]["tolerations"] == tolerant
    # The control: the other pod's toleration of the same taint ends after 2 s.
    assert_evicted(kube, namespace, "p-brief")
    assert_running(kube, namespace, "p-tolerant")


# --- cancellation -----------------------------------------------------------------------------


def test_pending_evictions_are_cancelled(
    kube: ControlPlane, namespace: str, draco_process: Start, rules: list[str]
) -> None:
    nodes = cluster(kube, namespace, nodes=4, devices=1)
    long_wait = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}]
    names = ["removed", "sliced", "newgen", "ruled", "gone"]
    k.apply(kube, [claim_with(namespace, n, tolerations=long_wait) for n in names[:4]])
    k.create(kube, [k.pod(namespace, f"p-{n}", [{"name": "gpu", "resourceClaimName": n}]) for n in names[:4]])
    start_operator(draco_process, namespace)
    where = {n: k.pinned_node(running(kube, namespace, f"p-{n}")) or "" for n in names[:4]}
    assert sorted(where.values()) == sorted(nodes)

    for n in ("removed", "sliced", "newgen"):
        set_taints(kube, namespace, where[n], {"gpu-0": [taint()]})
    name = f"cancel-{namespace}"
    obj = rule(name, namespace, effect="NoExecute")
    obj["spec"]["deviceSelector"]["pool"] = where["ruled"]  # the "ruled" pod's pool only
    create_rule(kube, rules, obj)
    condition = wait_condition(kube, name, "PodsPendingEviction")
    assert condition["message"] == "1 pod needs to be evicted in 1 namespace."

    set_taints(kube, namespace, where["removed"], {"gpu-0": []})
    kube.kubectl("delete", k.SLICES, slice_name(namespace, where["sliced"]))
    newer = k.node_slice(namespace, where["newgen"], 1)
    newer["metadata"]["name"] += "-gen2"
    newer["spec"]["pool"]["generation"] = 2
    k.apply(kube, [newer])
    kube.kubectl("delete", RULES, name)
    for n in names[:4]:
        wait_for(
            lambda n=n: "Cancelling deletion" in notes(kube, namespace, f"p-{n}"),
            timeout=60,
            what=f"eviction of p-{n} cancelled",
        )
        assert_running(kube, namespace, f"p-{n}")


def test_deleted_pod_leaves_the_rule_status(
    kube: ControlPlane, namespace: str, draco_process: Start, rules: list[str]
) -> None:
    cluster(kube, namespace, nodes=1, devices=1)
    wait = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}]
    k.apply(kube, [claim_with(namespace, "c", tolerations=wait)])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "c"}])])
    start_operator(draco_process, namespace)
    running(kube, namespace, "p")
    name = f"gone-{namespace}"
    create_rule(kube, rules, rule(name, namespace, effect="NoExecute"))
    wait_condition(kube, name, "PodsPendingEviction")
    kube.kubectl("delete", "pod", "p", "-n", namespace, "--grace-period=0", "--force")
    condition = wait_condition(kube, name, "NotStarted", timeout=60)
    assert condition["message"] == ""


def test_taint_added_while_the_operator_was_down(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    (node,) = cluster(kube, namespace, nodes=1, devices=1)
    k.apply(kube, [k.claim(namespace, "c")])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "c"}])])
    operator = start_operator(draco_process, namespace)
    running(kube, namespace, "p")
    operator.stop()
    set_taints(kube, namespace, node, {"gpu-0": [taint()]})
    assert_running(kube, namespace, "p")
    start_operator(draco_process, namespace)
    assert_evicted(kube, namespace, "p")


def test_many_pods_in_many_namespaces(
    kube: ControlPlane, namespace: str, draco_process: Start, rules: list[str]
) -> None:
    others = [f"{namespace[:50]}-x{i}" for i in range(2)]
    for other in others:
        kube.kubectl("create", "namespace", other)
    try:
        cluster(kube, namespace, nodes=2, devices=6)
        pods: dict[str, list[str]] = {}
        for ns in (namespace, *others):
            pods[ns] = [f"p{i}" for i in range(4)]
            objs = [
                k.claim(namespace, f"c{i}") | {"metadata": {"name": f"c{i}", "namespace": ns}}
                for i in range(4)
            ]
            k.apply(kube, objs)
            k.create(
                kube, [k.pod(ns, f"p{i}", [{"name": "gpu", "resourceClaimName": f"c{i}"}]) for i in range(4)]
            )
        start_operator(draco_process, namespace, *others)
        for ns, names in pods.items():
            for pod_name in names:
                running(kube, ns, pod_name)
        name = f"many-{namespace}"
        create_rule(kube, rules, rule(name, namespace, effect="None"))
        condition = wait_condition(kube, name, "NoEffect")
        assert (
            "12 pods would be evicted in 3 different namespaces if the effect was NoExecute"
            in condition["message"]
        )
        for ns in (namespace, *others):
            assert f"{ns} (p0, p1, p2, p3)" in condition["message"]

        k.apply(kube, [rule(name, namespace, effect="NoExecute")])
        for ns, names in pods.items():
            for pod_name in names:
                assert_evicted(kube, ns, pod_name)
        condition = wait_condition(kube, name, "Completed", timeout=60)
        assert condition["message"] == "12 pods evicted since starting the controller."
    finally:
        for other in others:
            kube.kubectl("delete", "namespace", other, "--wait=false", check=False)


def test_the_documented_rbac_is_enough_for_eviction(
    kube: ControlPlane, namespace: str, draco_process: Start, rules: list[str], tmp_path: Path
) -> None:
    """The operator as the chart's ServiceAccount: Event, pod status, delete, rule status."""
    kubeconfig, lease = operator_credentials(kube, namespace=namespace, folder=tmp_path)
    cluster(kube, namespace, nodes=1, devices=1)
    k.apply(kube, [k.claim(namespace, "c")])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "c"}])])
    # The Lease the chart's Role grants (it names the Lease).
    operator = start_operator(
        draco_process,
        namespace,
        lease=lease,
        extra=["--leader-election-namespace", namespace],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    running(kube, namespace, "p")
    name = f"rbac-{namespace}"
    create_rule(kube, rules, rule(name, namespace, effect="NoExecute"))
    assert_evicted(kube, namespace, "p")
    wait_condition(kube, name, "Completed")
    assert "orbidden" not in operator.logs(), operator.logs()[-3000:]
