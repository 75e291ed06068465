"""Pods whose claim-statuses annotation is stale make progress, across operator restarts.

What a restored backup, a `kubectl apply` of an exported pod, or an operator killed
between two writes leaves behind: `resource.draco.dev/claim-statuses` names, for a
template entry, a claim that is gone, a user's claim, a claim of a deleted pod of the
same name, or the pod's own claim of another entry. As upstream's resourceclaim controller
(TestSyncHandler's "recreate" and foreign-claim cases), each pod gets a new claim from its
template and is placed with it; nothing it did not own is allocated for it. A new user
found the pods waiting for ever after their new claim, in silence.

The operator is killed and started again between each of the lifecycle's writes: each
write is held back by a ValidatingAdmissionPolicy (the API refuses it, as a policy or a
webhook of the cluster would) while an operator runs and is killed, then let through for
the next one: the claims' creation, their allocation (claim status), the pod's pin and
un-gating. After every phase each pod has made progress or says why it waits
(`tests.e2e.progress`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from draco.api.constants import CLAIM_STATUSES_ANNOTATION, POD_CLAIM_NAME_ANNOTATION
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.progress import unexplained_waits
from tests.e2e.support import DracoProcess, scaled, start_operator, wait_for

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]

#: pod -> what its annotation names for its entry "gpu".
SHAPES = {
    "missing": "missing-claim",
    "foreign": "users-claim",
    "replaced": "old-pod-claim",
    "wrong-entry": "other-entry-claim",
}

#: The writes held back, in the lifecycle's order: (name, resource rule, operation).
WALLS = (
    ("create-claims", "resource.draco.dev", "resourceclaims", "CREATE"),
    ("allocate-claims", "resource.draco.dev", "resourceclaims/status", "UPDATE"),
    ("pin-pods", "", "pods", "UPDATE"),
)


def wall(namespace: str, name: str, group: str, resource: str, operation: str) -> list[k.Obj]:
    """A policy and its binding that refuse `operation` on `resource` in `namespace`."""
    policy = f"{namespace}-{name}"
    scope = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    **scope,
                    "resourceRules": [
                        {
                            "apiGroups": [group],
                            "apiVersions": ["*"],
                            "operations": [operation],
                            "resources": [resource],
                        }
                    ],
                },
                "validations": [{"expression": "false", "message": f"the test holds back {name} here"}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"], "matchResources": scope},
        },
    ]


def refused(kube: ControlPlane, namespace: str, name: str) -> bool:
    """A dry-run of the write `name` holds back is refused by its policy (policies take a
    moment to be enforced after they are created)."""
    probe = {
        "create-claims": [
            "create",
            "-f",
            "-",
            "--dry-run=server",
            "-n",
            namespace,
        ],
    }.get(name)
    if probe is None:  # the status and pod walls are checked through the claim wall's timing
        return True
    body = json.dumps(k.claim(namespace, "probe"))
    result = kube.kubectl(*probe, input=body, check=False)
    return result.returncode != 0 and f"holds back {name}" in result.stderr


def generated_for(kube: ControlPlane, namespace: str, pod: k.Obj) -> list[k.Obj]:
    uid = pod["metadata"]["uid"]
    return [
        c
        for c in k.items(kube, k.CLAIMS, namespace=namespace)
        if any(
            r.get("uid") == uid and r.get("controller") for r in c["metadata"].get("ownerReferences") or []
        )
        and (c["metadata"].get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION) == "gpu"
    ]


def pods_of(kube: ControlPlane, namespace: str) -> dict[str, k.Obj]:
    return {p["metadata"]["name"]: p for p in k.items(kube, "pods", namespace=namespace)}


def assert_told_or_moving(kube: ControlPlane, namespace: str, *, grace: float) -> None:
    """Every pod has made progress or says why it waits (the soak's invariant)."""

    def broken() -> dict[str, str]:
        pods = list(pods_of(kube, namespace).values())
        return unexplained_waits(pods, k.events(kube, namespace), now=time.time(), grace=0.0)

    # The attempt after a change may still be running: give it `grace` to speak.
    deadline = time.monotonic() + scaled(grace)
    found = broken()
    while found and time.monotonic() < deadline:
        time.sleep(1)
        found = broken()
    assert not found, "\n".join(found.values())


def told_refused(kube: ControlPlane, namespace: str, wall_name: str, operator: DracoProcess) -> None:
    """Every pod has a FailedScheduling Event naming the refused write (not only the log)."""
    wait_for(
        lambda: all(
            any(
                f"holds back {wall_name}" in note
                for note in k.event_notes(kube, namespace, name, "FailedScheduling")
            )
            for name in SHAPES
        ),
        timeout=90,
        what=f"every pod told that {wall_name} was refused",
        explain=operator.logs,
    )


def test_stale_claim_statuses_get_new_claims_across_restarts_between_writes(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    nodes = [f"{namespace}-n0"]
    k.add_nodes(kube, [k.node(n) for n in nodes])
    k.apply(kube, [k.device_class(namespace), k.node_slice(namespace, nodes[0], 8)])
    k.apply(kube, [k.template(namespace, "single-gpu")])
    entry = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    k.create(kube, [k.pod(namespace, name, entry) for name in SHAPES])
    pods = pods_of(kube, namespace)
    # The stale claims: a user's, one owned by a pod of the same name deleted before, the
    # pod's own claim of another entry; "missing" names a claim that never existed.
    foreign = k.claim(namespace, SHAPES["foreign"])
    replaced = k.claim(namespace, SHAPES["replaced"])
    replaced["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "replaced",
            "uid": "uid-of-the-pod-before",
            "controller": True,
        }
    ]
    replaced["metadata"]["annotations"] = {POD_CLAIM_NAME_ANNOTATION: "gpu"}
    other = k.claim(namespace, SHAPES["wrong-entry"])
    other["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "wrong-entry",
            "uid": pods["wrong-entry"]["metadata"]["uid"],
            "controller": True,
        }
    ]
    other["metadata"]["annotations"] = {POD_CLAIM_NAME_ANNOTATION: "nic"}
    k.create(kube, [foreign, replaced, other])
    for name, recorded in SHAPES.items():
        patch = {"metadata": {"annotations": {CLAIM_STATUSES_ANNOTATION: json.dumps({"gpu": recorded})}}}
        kube.kubectl("patch", "pod", name, "-n", namespace, "--type=merge", "-p", json.dumps(patch))
    for name, group, resource, operation in WALLS:
        k.apply(kube, wall(namespace, name, group, resource, operation))
    wait_for(lambda: refused(kube, namespace, "create-claims"), timeout=60, what="the policies enforced")

    # 1. Claims cannot be made: each pod is told why.
    operator = start_operator(draco_process, namespace, lease=f"{namespace}-1")
    wait_for(
        lambda: all(k.event_notes(kube, namespace, name, "FailedResourceClaimCreation") for name in SHAPES),
        timeout=90,
        what="every pod told that its claim cannot be created",
        explain=operator.logs,
    )
    assert_told_or_moving(kube, namespace, grace=30)
    operator.kill()
    kube.kubectl("delete", "validatingadmissionpolicybinding", f"{namespace}-create-claims")

    # 2. Claims are made (one per pod), their allocation cannot be written.
    operator = start_operator(draco_process, namespace, lease=f"{namespace}-2")
    wait_for(
        lambda: all(len(generated_for(kube, namespace, pod)) == 1 for pod in pods.values()),
        timeout=90,
        what="one new claim generated for every pod",
        explain=operator.logs,
    )
    told_refused(kube, namespace, "allocate-claims", operator)
    assert_told_or_moving(kube, namespace, grace=60)
    operator.kill()
    kube.kubectl("delete", "validatingadmissionpolicybinding", f"{namespace}-allocate-claims")

    # 3. The new claims are allocated and reserved; the pods cannot be pinned.
    operator = start_operator(draco_process, namespace, lease=f"{namespace}-3")

    def allocated() -> bool:
        for pod in pods.values():
            (claim,) = generated_for(kube, namespace, pod)
            if k.reserved_uids(claim) != {pod["metadata"]["uid"]}:
                return False
        return True

    wait_for(allocated, timeout=90, what="every new claim allocated for its pod", explain=operator.logs)
    told_refused(kube, namespace, "pin-pods", operator)
    assert_told_or_moving(kube, namespace, grace=60)
    operator.kill()
    kube.kubectl("delete", "validatingadmissionpolicybinding", f"{namespace}-pin-pods")

    # 4. Every pod is pinned and un-gated, its annotation names its new claim.
    operator = start_operator(draco_process, namespace, lease=f"{namespace}-4")
    wait_for(
        lambda: all(not k.is_gated(p) for p in pods_of(kube, namespace).values()),
        timeout=90,
        what="every pod un-gated",
        explain=operator.logs,
    )
    for name, pod in pods_of(kube, namespace).items():
        (claim,) = generated_for(kube, namespace, pod)
        assert k.generated_claims(pod) == {"gpu": claim["metadata"]["name"]}, name
        assert k.pinned_node(pod) == nodes[0]
        assert k.reserved_uids(claim) == {pod["metadata"]["uid"]}
    for stale in SHAPES.values():
        left = k.get(kube, k.CLAIMS, stale, namespace=namespace)
        assert left is None or not (left.get("status") or {}).get("allocation"), (
            f"{stale} was not the pod's: nothing is allocated on it"
        )
    # Exactly one generated claim per pod, the stale ones aside.
    for pod in pods.values():
        assert len(generated_for(kube, namespace, pod)) == 1
    for policy in WALLS:
        kube.kubectl("delete", "validatingadmissionpolicy", f"{namespace}-{policy[0]}", check=False)
