"""The claim lifecycle against a real API server, with the operator running as a process.

No allocator is needed: where a test needs an allocated, reserved claim it writes
`status.allocation` and `reservedFor` itself, as the scheduler would. There is no
kube-scheduler, Job controller or garbage collector in the test cluster, so tests bind,
finish and stamp out pods themselves, and the operator has to delete generated claims on
its own.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.api.constants import FINALIZER, NODE_LABEL, POD_CLAIM_NAME_ANNOTATION
from draco.scheduling.generatedclaims import generate_claim_name
from draco.tools.dev.controlplane import ControlPlane, free_port
from tests.e2e.chartkit import operator_credentials
from tests.e2e.conftest import kopf_operator
from tests.e2e.lifecycle_support import (
    CLAIMS,
    CLASSES,
    TEMPLATES,
    allocate,
    apply,
    bind,
    create,
    device_class,
    events,
    get,
    list_objects,
    pod,
    recorded_claim,
    set_phase,
    stamp_job_pods,
    template,
    user_claim,
)
from tests.e2e.support import DracoProcess, selectable_fields_served, start_operator, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

Start = Callable[..., DracoProcess]


@pytest.fixture
def gpu_class(kube: ControlPlane, namespace: str) -> str:
    name = f"{namespace}-gpu"
    apply(kube, device_class(name))
    return name


def claim_of(
    kube: ControlPlane, pod_name: str, pod_claim: str, namespace: str, *, timeout: float = 30
) -> dict[str, Any]:
    name = wait_for(
        lambda: recorded_claim(kube, pod_name, pod_claim, namespace=namespace),
        timeout=timeout,
        what=f"claim {pod_claim} recorded on pod {pod_name}",
    )
    found = get(kube, CLAIMS, str(name), namespace=namespace)
    assert found is not None, f"recorded claim {name} does not exist"
    return found


def gone(kube: ControlPlane, kind: str, name: str, namespace: str) -> bool:
    return get(kube, kind, name, namespace=namespace) is None


def test_generated_claim_is_named_owned_annotated_and_recorded(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    apply(
        kube,
        template("single-gpu", gpu_class, labels={"team": "ml"}, annotations={"note": "from-template"}),
        namespace=namespace,
    )
    created = create(
        kube,
        pod("trainer", [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]),
        namespace=namespace,
    )
    operator = start_operator(draco_process, namespace, log_level="DEBUG")

    claim = claim_of(kube, "trainer", "gpu", namespace)
    meta = claim["metadata"]
    assert meta["name"].startswith("trainer-gpu-") and len(meta["name"]) == len("trainer-gpu-") + 5
    assert meta["generateName"] == "trainer-gpu-"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "trainer",
            "uid": created["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["annotations"] == {"note": "from-template", POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert meta["labels"] == {"team": "ml"}
    # Created with the finalizer, so the allocation writes only the claim's status.
    assert meta["finalizers"] == [FINALIZER]
    tmpl = get(kube, TEMPLATES, "single-gpu", namespace=namespace)
    assert tmpl is not None
    assert claim["spec"] == tmpl["spec"]["spec"]
    # Exactly one claim, and Kopf left no annotations of its own on the pod or the claim.
    assert len(list_objects(kube, CLAIMS, namespace=namespace)) == 1
    live = get(kube, "pod", "trainer", namespace=namespace)
    assert live is not None
    assert not [a for a in live["metadata"].get("annotations", {}) if "kopf" in a]
    assert not [a for a in meta.get("annotations", {}) if "kopf" in a]
    assert "Traceback" not in operator.logs()


def test_long_pod_names_are_truncated_to_57_characters(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    pod_name = "a-very-long-pod-name-for-a-distributed-training-worker-000001"
    claim_name = "accelerators"
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(kube, pod(pod_name, [{"name": claim_name, "resourceClaimTemplateName": "t"}]), namespace=namespace)
    start_operator(draco_process, namespace, log_level="DEBUG")

    claim = claim_of(kube, pod_name, claim_name, namespace)
    expected = generate_claim_name(pod_name, claim_name)
    # 61 + 1 + 12 + 1 = 75 > 57: pod part 61*57//75 = 46, claim part 12*57//75 = 9, no trailing dash.
    assert expected == "a-very-long-pod-name-for-a-distributed-trainin-accelerat"
    assert claim["metadata"]["generateName"] == expected
    assert claim["metadata"]["name"].startswith(expected)
    assert len(claim["metadata"]["name"]) == len(expected) + 5 <= 63


def test_an_orphan_owned_by_the_pod_is_adopted_not_duplicated(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    apply(kube, template("t", gpu_class), namespace=namespace)
    created = create(kube, pod("p", [{"name": "gpu", "resourceClaimTemplateName": "t"}]), namespace=namespace)
    orphan = user_claim("p-gpu-left-behind", gpu_class)
    orphan["metadata"]["annotations"] = {POD_CLAIM_NAME_ANNOTATION: "gpu"}
    orphan["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "p",
            "uid": created["metadata"]["uid"],
            "controller": True,
        }
    ]
    create(kube, orphan, namespace=namespace)
    start_operator(draco_process, namespace, log_level="DEBUG")

    assert claim_of(kube, "p", "gpu", namespace)["metadata"]["name"] == "p-gpu-left-behind"
    assert len(list_objects(kube, CLAIMS, namespace=namespace)) == 1


def test_missing_template_is_an_event_then_the_claim_appears_once_it_exists(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    create(kube, pod("p", [{"name": "gpu", "resourceClaimTemplateName": "later"}]), namespace=namespace)
    start_operator(draco_process, namespace, log_level="DEBUG")

    failures = wait_for(
        lambda: events(kube, namespace=namespace, reason="FailedResourceClaimCreation"),
        what="a FailedResourceClaimCreation event",
    )
    event = failures[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "p" and event["involvedObject"]["kind"] == "Pod"
    assert event["message"].startswith("PodResourceClaim gpu: ")
    assert '"later" not found' in event["message"]
    assert list_objects(kube, CLAIMS, namespace=namespace) == []
    described = kube.kubectl("describe", "pod", "p", "-n", namespace).stdout
    assert "FailedResourceClaimCreation" in described

    apply(kube, template("later", gpu_class), namespace=namespace)
    claim = claim_of(kube, "p", "gpu", namespace, timeout=15)
    assert claim["metadata"]["annotations"][POD_CLAIM_NAME_ANNOTATION] == "gpu"


def test_missing_device_class_of_the_template_is_reported_and_retried(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    class_name = f"{namespace}-late-class"
    apply(kube, template("t", class_name), namespace=namespace)
    create(kube, pod("p", [{"name": "gpu", "resourceClaimTemplateName": "t"}]), namespace=namespace)
    start_operator(draco_process, namespace, log_level="DEBUG")
    wait_for(
        lambda: [
            e
            for e in events(kube, namespace=namespace, reason="FailedResourceClaimCreation")
            if class_name in e["message"]
        ],
        what="an event naming the missing class",
    )
    apply(kube, device_class(class_name))
    claim_of(kube, "p", "gpu", namespace, timeout=15)


def test_invalid_claims_annotation_is_an_event(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    body = pod("p", [])
    body["metadata"]["annotations"]["resource.draco.dev/claims"] = "- name: gpu\n"
    create(kube, body, namespace=namespace)
    start_operator(draco_process, namespace, log_level="DEBUG")
    found = wait_for(
        lambda: events(kube, namespace=namespace, reason="InvalidResourceClaims"),
        what="an invalid-claims event",
    )
    assert "exactly one of resourceClaimName or resourceClaimTemplateName" in found[0]["message"]


def test_claims_allocated_before_the_node_field_get_it_when_the_operator_starts(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    """An operator from before `status.nodeName` labelled allocated claims with their node
    (or, older still, did neither): node agents now select on the field, so the operator
    writes it at start, from the label or else from a one-node selector."""
    names = ("labelled", "selected", "network")
    entries = [{"name": name, "resourceClaimName": name} for name in names]
    user = create(kube, pod("user", entries, gated=False), namespace=namespace)
    for name in names:
        create(kube, user_claim(name, gpu_class), namespace=namespace)
        allocate(kube, name, namespace=namespace, pods=[user])
    kube.kubectl("label", CLAIMS, "labelled", "-n", namespace, f"{NODE_LABEL}=node-7")
    one_node = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-8"]}]}
        ]
    }
    kube.kubectl(
        "patch",
        CLAIMS,
        "selected",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"allocation": {"nodeSelector": one_node}}}),
    )
    assert all("nodeName" not in (get(kube, CLAIMS, n, namespace=namespace) or {})["status"] for n in names)

    start_operator(draco_process, namespace)

    def nodes() -> dict[str, str | None]:
        return {n: (get(kube, CLAIMS, n, namespace=namespace) or {})["status"].get("nodeName") for n in names}

    wait_for(
        lambda: nodes()["labelled"] and nodes()["selected"], what="the nodes of allocated claims recorded"
    )
    assert nodes() == {"labelled": "node-7", "selected": "node-8", "network": None}
    if selectable_fields_served(kube):
        selector = ("--field-selector", "status.nodeName=node-8")
    else:  # kube-apiserver < 1.31: agents select on the label, which the operator writes too
        selector = ("-l", f"{NODE_LABEL}=node-8")
    selected = wait_for(
        lambda: kube.kubectl("get", CLAIMS, "-n", namespace, *selector, "-o", "name").stdout.split(),
        what="the claim of node-8 selected",
    )
    assert selected == ["resourceclaim.resource.draco.dev/selected"]


def test_done_pods_lose_generated_claims_and_the_shared_claim_is_deallocated_when_unused(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(kube, user_claim("shared", gpu_class), namespace=namespace)
    entries = [
        {"name": "gpu", "resourceClaimTemplateName": "t"},
        {"name": "shared", "resourceClaimName": "shared"},
    ]
    # Un-gated (as after allocation): the scheduler leaves them alone and our hand-written
    # allocations stand.
    first = create(kube, pod("first", entries, gated=False), namespace=namespace)
    second = create(kube, pod("second", entries, gated=False), namespace=namespace)
    start_operator(draco_process, namespace, log_level="DEBUG")
    first_claim = claim_of(kube, "first", "gpu", namespace)["metadata"]["name"]
    second_claim = claim_of(kube, "second", "gpu", namespace)["metadata"]["name"]
    allocate(kube, first_claim, namespace=namespace, pods=[first])
    allocate(kube, second_claim, namespace=namespace, pods=[second])
    allocate(kube, "shared", namespace=namespace, pods=[first, second])
    # As an operator from before `status.nodeName` left it: the node label, which the
    # release takes off with the finalizer.
    kube.kubectl("label", CLAIMS, "shared", "-n", namespace, f"{NODE_LABEL}=node-1")

    set_phase(kube, "first", "Succeeded", namespace=namespace)
    wait_for(lambda: gone(kube, CLAIMS, first_claim, namespace), what="the first pod's claim to be deleted")

    def shared_reserved_for() -> list[str]:
        shared = get(kube, CLAIMS, "shared", namespace=namespace)
        assert shared is not None
        return [r["name"] for r in shared.get("status", {}).get("reservedFor", [])]

    wait_for(lambda: shared_reserved_for() == ["second"], what="the shared claim to keep only the second pod")
    shared = get(kube, CLAIMS, "shared", namespace=namespace)
    assert shared is not None and shared["status"].get("allocation"), "still in use: stays allocated"
    assert FINALIZER in shared["metadata"]["finalizers"]
    assert get(kube, CLAIMS, second_claim, namespace=namespace) is not None

    set_phase(kube, "second", "Failed", namespace=namespace)
    wait_for(lambda: gone(kube, CLAIMS, second_claim, namespace), what="the second pod's claim to be deleted")

    def shared_released() -> bool:
        shared = get(kube, CLAIMS, "shared", namespace=namespace)
        assert shared is not None, "a user's claim is never deleted"
        return not shared.get("status", {}).get("allocation") and not shared["metadata"].get("finalizers")

    wait_for(shared_released, what="the shared claim to be deallocated and unprotected")
    released = get(kube, CLAIMS, "shared", namespace=namespace)
    assert released is not None and NODE_LABEL not in (released["metadata"].get("labels") or {})
    assert "nodeName" not in released["status"], "the node goes with the allocation"
    shared = get(kube, CLAIMS, "shared", namespace=namespace)
    assert shared is not None and not shared["status"].get("reservedFor")


@pytest.mark.parametrize("ungate_first", [False, True], ids=["while-gated", "after-ungating"])
def test_deleted_pods_release_and_lose_their_claims(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start, ungate_first: bool
) -> None:
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(kube, user_claim("shared", gpu_class), namespace=namespace)
    created = create(
        kube,
        pod(
            "p",
            [{"name": "gpu", "resourceClaimTemplateName": "t"}, {"name": "s", "resourceClaimName": "shared"}],
        ),
        namespace=namespace,
    )
    start_operator(draco_process, namespace, log_level="DEBUG")
    generated = claim_of(kube, "p", "gpu", namespace)["metadata"]["name"]
    allocate(kube, generated, namespace=namespace, pods=[created])
    allocate(kube, "shared", namespace=namespace, pods=[created])
    if ungate_first:
        # The operator may un-gate the pod itself (its claims are allocated and reserved):
        # a merge patch to null is a no-op then, where a JSON "remove" would be refused.
        kube.kubectl(
            "patch",
            "pod",
            "p",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"schedulingGates": None}}),
        )
    # Forced: once un-gated, a kube-scheduler (the session's node runs one) may bind the pod
    # to a Node without a kubelet, and only a kubelet finishes a graceful deletion.
    kube.kubectl("delete", "pod", "p", "-n", namespace, "--wait=true", "--grace-period=0", "--force")

    wait_for(lambda: gone(kube, CLAIMS, generated, namespace), what="the generated claim to be deleted")

    def released() -> bool:
        shared = get(kube, CLAIMS, "shared", namespace=namespace)
        assert shared is not None
        status = shared.get("status", {})
        # A gated pod's claims may have been freed by the scheduler first (its PostFilter
        # keeps the finalizer, as upstream's does); either way nothing is left in use.
        return not status.get("reservedFor") and not status.get("allocation")

    wait_for(released, what="the shared claim to be released")


def test_a_pending_generated_claim_goes_with_its_deleted_pod_despite_its_finalizer(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    """A generated claim carries the finalizer from its creation, before any allocation: when
    its pod is deleted while still waiting, the operator deletes the claim and takes the
    finalizer off, so it does not hang."""
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(kube, pod("waiting", [{"name": "gpu", "resourceClaimTemplateName": "t"}]), namespace=namespace)
    start_operator(draco_process, namespace, log_level="DEBUG")
    claim = claim_of(kube, "waiting", "gpu", namespace)
    assert claim["metadata"]["finalizers"] == [FINALIZER]
    assert not (claim.get("status") or {}).get("allocation"), "no devices in this class: stays pending"

    kube.kubectl("delete", "pod", "waiting", "-n", namespace, "--wait=true", "--grace-period=0", "--force")

    wait_for(
        lambda: gone(kube, CLAIMS, claim["metadata"]["name"], namespace),
        what="the pending generated claim to be deleted, finalizer and all",
    )


def test_a_pod_bound_without_draco_is_added_to_reserved_for(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    create(kube, user_claim("shared", gpu_class), namespace=namespace)
    allocate(kube, "shared", namespace=namespace, pods=[])
    created = create(
        kube, pod("p", [{"name": "s", "resourceClaimName": "shared"}], gated=False), namespace=namespace
    )
    start_operator(draco_process, namespace, log_level="DEBUG")
    bind(kube, "p", "node-1", namespace=namespace)

    def reserved() -> list[str]:
        shared = get(kube, CLAIMS, "shared", namespace=namespace)
        assert shared is not None
        return [r["uid"] for r in shared.get("status", {}).get("reservedFor", [])]

    wait_for(lambda: reserved() == [created["metadata"]["uid"]], what="the bound pod's reservation")


def test_deleting_an_unused_allocated_claim_removes_the_finalizer(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    create(kube, user_claim("c", gpu_class), namespace=namespace)
    allocate(kube, "c", namespace=namespace, pods=[])
    start_operator(draco_process, namespace, log_level="DEBUG")
    kube.kubectl("delete", CLAIMS, "c", "-n", namespace, "--wait=false")
    wait_for(lambda: gone(kube, CLAIMS, "c", namespace), what="the claim's deletion to be unblocked")


def test_restart_cleans_up_what_happened_while_the_operator_was_down(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(kube, user_claim("shared", gpu_class), namespace=namespace)
    created = create(
        kube,
        pod(
            "p",
            [{"name": "gpu", "resourceClaimTemplateName": "t"}, {"name": "s", "resourceClaimName": "shared"}],
            gated=False,
        ),
        namespace=namespace,
    )
    keeper = create(
        kube, pod("keeper", [{"name": "s", "resourceClaimName": "shared"}], gated=False), namespace=namespace
    )
    operator = start_operator(draco_process, namespace, log_level="DEBUG")
    generated = claim_of(kube, "p", "gpu", namespace)["metadata"]["name"]
    operator.stop()

    allocate(kube, generated, namespace=namespace, pods=[created])
    allocate(kube, "shared", namespace=namespace, pods=[created, keeper])
    kube.kubectl("delete", "pod", "p", "-n", namespace, "--wait=true")
    assert get(kube, CLAIMS, generated, namespace=namespace) is not None, (
        "nobody cleans up while the operator is down"
    )

    start_operator(draco_process, namespace, log_level="DEBUG")
    wait_for(lambda: gone(kube, CLAIMS, generated, namespace), what="the vanished pod's claim to be deleted")

    def shared_keeps_only_the_keeper() -> bool:
        shared = get(kube, CLAIMS, "shared", namespace=namespace)
        assert shared is not None
        return [r["name"] for r in shared.get("status", {}).get("reservedFor", [])] == ["keeper"]

    wait_for(shared_keeps_only_the_keeper, what="the shared claim to keep only the live pod")
    assert get(kube, CLASSES, gpu_class) is not None


def _http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_probes_and_metrics_report_the_lifecycle(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(
        kube, pod("p", [{"name": "gpu", "resourceClaimTemplateName": "t"}], gated=False), namespace=namespace
    )
    metrics_port, health_port = free_port(), free_port()
    start_operator(draco_process, namespace, metrics_port=metrics_port, health_port=health_port)
    wait_for(
        lambda: _http_get(f"http://127.0.0.1:{health_port}/readyz")[0] == 200, what="/readyz to answer 200"
    )
    assert _http_get(f"http://127.0.0.1:{health_port}/healthz")[0] == 200
    claim_of(kube, "p", "gpu", namespace)

    def scraped() -> str:
        status, body = _http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        return body if status == 200 and "dynamic_resource_allocation_resource_claims{" in body else ""

    body = str(wait_for(scraped, what="the claims gauge on /metrics"))
    assert (
        'dynamic_resource_allocation_resourceclaim_creates_total{admin_access="false",status="success"} 1.0'
        in body
    )
    assert (
        'dynamic_resource_allocation_resource_claims{admin_access="false",allocated="false",'
        'source="resource_claim_template"} 1.0' in body
    )
    assert 'workqueue_adds_total{name="resource_claim"}' in body


def test_the_example_job_runs_in_waves_and_leaves_only_the_shared_claim(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    docs = [d for path in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    apply(kube, by_kind["DeviceClass"])
    for kind in ("ResourceClaimTemplate", "ResourceClaim", "Job"):
        by_kind[kind]["metadata"]["namespace"] = namespace
        apply(kube, by_kind[kind], namespace=namespace)
    job = get(kube, "job", by_kind["Job"]["metadata"]["name"], namespace=namespace)
    assert job is not None
    start_operator(draco_process, namespace, log_level="DEBUG")

    seen: set[str] = set()
    completions, parallelism = job["spec"]["completions"], job["spec"]["parallelism"]
    for wave in range(completions // parallelism):
        pods = stamp_job_pods(kube, job, indexes=range(wave * parallelism, (wave + 1) * parallelism))
        names = []
        for created in pods:
            claim = claim_of(kube, created["metadata"]["name"], "separate-gpu-claim", namespace)
            assert claim["metadata"]["labels"] == {"app.kubernetes.io/part-of": "dra-example-job"}
            assert claim["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
            names.append(claim["metadata"]["name"])
        seen.update(names)
        for created in pods:
            set_phase(kube, created["metadata"]["name"], "Succeeded", namespace=namespace)
        for name in names:
            wait_for(
                lambda name=name: gone(kube, CLAIMS, name, namespace), what=f"claim {name} of a finished pod"
            )
    assert len(seen) == completions
    remaining = [c["metadata"]["name"] for c in list_objects(kube, CLAIMS, namespace=namespace)]
    assert remaining == ["shared-gpu"]


def test_the_documented_rbac_is_enough_for_the_lifecycle(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start, tmp_path: Path
) -> None:
    """The operator as the chart's ServiceAccount, with the chart's RBAC, through a lifecycle."""
    kubeconfig, lease = operator_credentials(kube, namespace=namespace, folder=tmp_path)
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(kube, user_claim("shared", gpu_class), namespace=namespace)
    entries = [
        {"name": "gpu", "resourceClaimTemplateName": "t"},
        {"name": "s", "resourceClaimName": "shared"},
    ]
    created = create(kube, pod("p", entries, gated=False), namespace=namespace)
    operator = start_operator(
        draco_process,
        namespace,
        lease=lease,
        extra=["--leader-election-namespace", namespace],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    generated = claim_of(kube, "p", "gpu", namespace)["metadata"]["name"]
    allocate(kube, generated, namespace=namespace, pods=[created])
    allocate(kube, "shared", namespace=namespace, pods=[created])
    set_phase(kube, "p", "Succeeded", namespace=namespace)
    wait_for(lambda: gone(kube, CLAIMS, generated, namespace), what="the generated claim to be deleted")
    wait_for(
        lambda: (
            not (get(kube, CLAIMS, "shared", namespace=namespace) or {}).get("metadata", {}).get("finalizers")
        ),
        what="the shared claim's finalizer to be removed",
    )
    assert "Forbidden" not in operator.logs() and "forbidden" not in operator.logs(), operator.logs()[-3000:]


def test_kopf_run_of_the_package_registers_the_lifecycle(
    kube: ControlPlane, namespace: str, gpu_class: str
) -> None:
    """`kopf run -m draco.operator` (no `draco operator`, default options) works too."""
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(
        kube, pod("p", [{"name": "gpu", "resourceClaimTemplateName": "t"}], gated=False), namespace=namespace
    )
    with kopf_operator():
        claim = claim_of(kube, "p", "gpu", namespace)
        assert claim["metadata"]["annotations"][POD_CLAIM_NAME_ANNOTATION] == "gpu"


def test_namespace_globs_are_served(
    kube: ControlPlane, namespace: str, gpu_class: str, draco_process: Start
) -> None:
    apply(kube, template("t", gpu_class), namespace=namespace)
    create(
        kube, pod("p", [{"name": "gpu", "resourceClaimTemplateName": "t"}], gated=False), namespace=namespace
    )
    start_operator(draco_process, namespace[:-2] + "*", lease=f"draco-{namespace}")
    claim_of(kube, "p", "gpu", namespace)
