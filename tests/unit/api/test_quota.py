"""Device quota: what a claim counts (upstream's claim evaluator) and how it is charged."""

from __future__ import annotations

from typing import Any

import pytest

from draco.api.quota import (
    QuotaCharge,
    QuotaNames,
    QuotaRefusal,
    charge,
    claim_usage,
    class_of_entry,
    is_quota_refusal,
    namespace_usage,
    owner_usage,
    pod_requests,
    quota_entry,
    status_patch,
    undercounted,
)

GPU = quota_entry("gpu")
MIG = quota_entry("mig")
#: The implicit extended resources' entries (upstream: requests.deviceclass.resource.kubernetes.io/<class>).
R_GPU = "requests.deviceclass.resource.draco.dev/gpu"
R_MIG = "requests.deviceclass.resource.draco.dev/mig"
R_TPU = "requests.deviceclass.resource.draco.dev/tpu"
#: The explicit one of class gpu (its extendedResourceName).
R_EXAMPLE = "requests.example.com/gpu"
NAMES = QuotaNames({"gpu": "example.com/gpu"}, frozenset({"gpu", "mig", "tpu"}))


def exactly(name: str, cls: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, **fields}}


def spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def quota(name: str, hard: dict[str, Any], used: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name, "resourceVersion": "7"}, "spec": {"hard": hard}}
    if used is not None:
        body["status"] = {"hard": dict(hard), "used": used}
    return body


def test_entry_names_follow_upstreams_under_dracos_group() -> None:
    assert GPU == "gpu.deviceclass.resource.draco.dev/devices"
    assert class_of_entry(GPU) == "gpu"
    assert class_of_entry("gpu.deviceclass.resource.k8s.io/devices") is None
    assert class_of_entry(".deviceclass.resource.draco.dev/devices") is None


@pytest.mark.parametrize(
    ("entries", "counted"),
    [
        pytest.param(
            [GPU, R_EXAMPLE, R_GPU],
            [GPU, R_EXAMPLE, R_GPU],
            id="supported-resources",
        ),
        pytest.param(
            [
                "resourceclaims",
                "storage",
                "bronze.deviceclass.resource.draco.dev/storage",
                "gpu.deviceclass.resource.k8s.io/devices",
                "requests.deviceclass.resource.kubernetes.io/gpu",
                "requests.deviceclass.resource.draco.dev/absent",
                "requests.example.com/other",
            ],
            [],
            id="unsupported-resources",
        ),
    ],
)
def test_the_entries_device_quota_counts(entries: list[str], counted: list[str]) -> None:
    """Upstream's TestResourceClaimEvaluatorMatchingResources (a class `gpu` naming
    `example.com/gpu`), under draco's group; a class's implicit entry is matched only while
    the class exists, an explicit one only while a class names it. (The object count
    `count/resourceclaims.resource.draco.dev` is kube-apiserver's, for any custom resource.)"""
    names = QuotaNames.of(
        [{"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": "example.com/gpu"}}]
    )
    assert [e for e in entries if names.counted(e)] == counted


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        (spec(exactly("a", "gpu")), {GPU: 1, R_GPU: 1}),  # count unset: the API's default, 1
        (spec(exactly("a", "gpu", allocationMode="ExactCount", count=3)), {GPU: 3, R_GPU: 3}),
        (spec(exactly("a", "gpu", allocationMode="All")), {GPU: 32, R_GPU: 32}),  # the worst case
        (spec(exactly("a", "gpu", allocationMode="Someday")), {GPU: 0}),  # unknown: counts nothing
        (spec(exactly("a", "gpu", count=2, adminAccess=True)), {GPU: 2, R_GPU: 2}),  # admin access counts
        (
            spec(exactly("a", "gpu", count=2), exactly("b", "gpu"), exactly("c", "mig")),
            {GPU: 3, R_GPU: 3, MIG: 1, R_MIG: 1},
        ),
        (
            spec(
                {
                    "name": "a",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "gpu", "count": 4},
                        {"name": "small", "deviceClassName": "gpu", "count": 2},
                        {"name": "part", "deviceClassName": "mig", "count": 3},
                    ],
                }
            ),
            {GPU: 4, R_GPU: 4, MIG: 3, R_MIG: 3},  # per class, the largest alternative
        ),
        (spec(), {}),
        ({}, {}),
    ],
)
def test_claim_usage(claim: dict[str, Any], expected: dict[str, int]) -> None:
    assert claim_usage(claim) == expected


# Ported from upstream's TestResourceClaimEvaluatorUsage (pkg/quota/v1/evaluator/core,
# kubernetes/kubernetes PR #134210, "DRA extended resource quota"), its case names as ids:
# a claim counts per class, under the class's implicit extended resource and, with a
# mapping (class gpu -> example.com/gpu), under the explicit one too.
@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        pytest.param(spec(exactly("req-0", "gpu", count=1)), {GPU: 1, R_GPU: 1, R_EXAMPLE: 1}, id="simple"),
        pytest.param(
            spec(*[exactly("req-0", "gpu", count=1)] * 5),
            {GPU: 5, R_GPU: 5, R_EXAMPLE: 5},
            id="many-requests",
        ),
        pytest.param(spec(exactly("req-0", "gpu", count=5)), {GPU: 5, R_GPU: 5, R_EXAMPLE: 5}, id="count"),
        pytest.param(
            spec(exactly("req-0", "gpu", allocationMode="All")), {GPU: 32, R_GPU: 32, R_EXAMPLE: 32}, id="all"
        ),
        pytest.param(
            spec(exactly("req-0", "gpu", count=1, adminAccess=True)),
            {GPU: 1, R_GPU: 1, R_EXAMPLE: 1},
            id="admin",
        ),
        pytest.param(
            spec(
                {
                    "name": "req-0",
                    "firstAvailable": [{"name": "subreq-0", "deviceClassName": "gpu", "count": 1}],
                }
            ),
            {GPU: 1, R_GPU: 1, R_EXAMPLE: 1},
            id="prioritized-list",
        ),
        pytest.param(
            spec(
                {
                    "name": "req-0",
                    "firstAvailable": [
                        {"name": "subreq-0", "deviceClassName": "gpu", "count": 2},
                        {"name": "subreq-1", "deviceClassName": "gpu", "count": 1},
                    ],
                }
            ),
            {GPU: 2, R_GPU: 2, R_EXAMPLE: 2},
            id="prioritized-list-multiple-subrequests",
        ),
        pytest.param(
            spec(
                {
                    "name": "req-0",
                    "firstAvailable": [
                        {"name": "subreq-0", "deviceClassName": "gpu", "count": 1},
                        {"name": "subreq-1", "deviceClassName": "tpu", "allocationMode": "All"},
                    ],
                }
            ),
            {GPU: 1, R_GPU: 1, R_EXAMPLE: 1, quota_entry("tpu"): 32, R_TPU: 32},
            id="prioritized-list-multiple-subrequests-different-device-classes",
        ),
    ],
)
def test_claim_usage_with_extended_resources(claim: dict[str, Any], expected: dict[str, int]) -> None:
    assert claim_usage(claim, names=NAMES) == expected


def special_claim(pod: str, *requests: dict[str, Any], name: str = "foo") -> dict[str, Any]:
    """A pod's special claim, as the operator creates it (upstream's `testResourceClaim(..., true, pod)`)."""
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {"resource.draco.dev/extended-resource-claim": "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": "uid", "controller": True}
            ],
        },
        "spec": spec(*requests),
    }


def pod_of(
    name: str,
    *,
    init: list[dict[str, int]] = (),
    containers: list[dict[str, int]] = (),
    record: str | None = "foo",
) -> dict[str, Any]:  # type: ignore[assignment]
    annotations = {}
    if record is not None:
        annotations["resource.draco.dev/extended-resource-claim-status"] = (
            f'{{"resourceClaimName":"{record}"}}'
        )
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "uid", "annotations": annotations},
        "spec": {
            "initContainers": [{"name": f"i{i}", "resources": {"requests": r}} for i, r in enumerate(init)],
            "containers": [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(containers)],
        },
    }


IMPLICIT = "deviceclass.resource.draco.dev/gpu"
ONE = exactly("container-0-request-0", "gpu", count=1)


@pytest.mark.parametrize(
    ("claim", "pod", "expected"),
    [
        # The pod asked under the implicit name: that entry is the pod's, the explicit one the claim's.
        pytest.param(
            special_claim("pod-implicit", ONE),
            pod_of("pod-implicit", containers=[{IMPLICIT: 1}]),
            {GPU: 1, R_EXAMPLE: 1},
            id="implicit-extended-resource-claim",
        ),
        pytest.param(
            special_claim("pod-explicit", ONE),
            pod_of("pod-explicit", init=[{"example.com/gpu": 1}]),
            {GPU: 1, R_GPU: 1},
            id="explicit-extended-resource-claim",
        ),
        pytest.param(
            special_claim(
                "pod-hybrid",
                exactly("container-1-request-0", "gpu", count=1),
                exactly("container-1-request-1", "gpu", count=1),
            ),
            pod_of(
                "pod-hybrid",
                init=[{"example.com/gpu": 1, IMPLICIT: 1}],
                containers=[{"example.com/gpu": 1, IMPLICIT: 1}],
            ),
            {GPU: 2, R_GPU: 1, R_EXAMPLE: 1},
            id="hybrid-extended-resource-claim",
        ),
        pytest.param(
            special_claim(
                "pod-nil-status",
                exactly("request-0", "gpu", count=1),
                exactly("container-1-request-0", "gpu", count=1),
            ),
            pod_of("pod-nil-status", init=[{"example.com/gpu": 1}], containers=[{IMPLICIT: 1}], record=None),
            {GPU: 2, R_GPU: 1, R_EXAMPLE: 1},
            id="nil-status-extended-resource-claim",
        ),
        pytest.param(
            special_claim(
                "pod-init",
                exactly("container-2-request-0", "gpu", count=1),
                exactly("container-2-request-1", "gpu", count=1),
            ),
            pod_of(
                "pod-init",
                init=[{"example.com/gpu": 1, IMPLICIT: 1}, {"example.com/gpu": 1, IMPLICIT: 1}],
                containers=[{"example.com/gpu": 1, IMPLICIT: 1}],
            ),
            {GPU: 2, R_GPU: 1, R_EXAMPLE: 1},
            id="init-extended-resource-claim",
        ),
    ],
)
def test_a_pods_special_claim_does_not_count_again_what_the_pod_counts(
    claim: dict[str, Any], pod: dict[str, Any], expected: dict[str, int]
) -> None:
    counts_itself = owner_usage(claim, pod=pod)
    assert claim_usage(claim["spec"], names=NAMES, pod_usage=counts_itself) == expected


def test_a_special_claim_whose_owner_does_not_check_out_counts_in_full() -> None:
    """upstream's `nil-status-two-extended-resource-claims` ("both claims set the same pod as
    owner, the second claim cannot get the usage subtraction from pod requests": with no
    record, only the first created is the pod's), and the other ways an annotation alone
    proves nothing (kubernetes/kubernetes#135404)."""
    claim = special_claim("p", ONE)
    claim["metadata"]["creationTimestamp"] = "2026-01-01T00:00:02Z"
    earlier = special_claim("p", ONE, name="bar")
    earlier["metadata"]["creationTimestamp"] = "2026-01-01T00:00:01Z"
    unrecorded = pod_of("p", containers=[{IMPLICIT: 1}], record=None)
    assert owner_usage(claim, pod=unrecorded, siblings=[earlier]) is None
    assert owner_usage(earlier, pod=unrecorded, siblings=[claim]) == {R_GPU: 1}
    stranger = pod_of("p", containers=[{IMPLICIT: 1}])
    stranger["metadata"]["uid"] = "other"
    assert owner_usage(claim, pod=stranger) is None
    assert owner_usage(claim, pod=pod_of("p", containers=[{IMPLICIT: 1}], record="bar")) is None
    assert owner_usage(claim, pod=None) is None
    plain = {**claim, "metadata": {**claim["metadata"], "annotations": {}}}
    assert owner_usage(plain, pod=pod_of("p", containers=[{IMPLICIT: 1}])) is None
    assert claim_usage(claim["spec"], names=NAMES, pod_usage=None) == {GPU: 1, R_GPU: 1, R_EXAMPLE: 1}
    # Two unrecorded claims of one pod: the first is the pod's, the other counts in full;
    # the pod's own request on top.
    assert namespace_usage([claim, earlier], names=NAMES, pods=[unrecorded]) == {
        GPU: 2,
        R_GPU: 2,
        R_EXAMPLE: 2,
    }


def test_pod_requests_add_up_as_upstreams_pod_requests() -> None:
    pod = pod_of(
        "p", init=[{"example.com/gpu": 3}], containers=[{"example.com/gpu": 1}, {"example.com/gpu": 1}]
    )
    assert pod_requests(pod) == {"example.com/gpu": 3}  # the init container's 3 beats 1 + 1
    sidecar = pod_of("p", init=[{"example.com/gpu": 1}], containers=[{"example.com/gpu": 1}])
    sidecar["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    assert pod_requests(sidecar) == {"example.com/gpu": 2}
    limits_only = {"spec": {"containers": [{"resources": {"limits": {"example.com/gpu": "2", "cpu": "1"}}}]}}
    assert pod_requests(limits_only) == {"example.com/gpu": 2}


def test_namespace_usage_adds_pods_to_the_shared_entries_as_kube_controller_manager_counts_them() -> None:
    done = pod_of("done", containers=[{"example.com/gpu": 4}])
    done["status"] = {"phase": "Succeeded"}
    done["metadata"]["uid"] = "done"
    pods = [pod_of("p", containers=[{"example.com/gpu": 2, "other.example.com/nic": 1}]), done]
    claims = [{"spec": spec(exactly("a", "gpu"))}]
    assert namespace_usage(claims, names=NAMES, pods=pods) == {GPU: 1, R_GPU: 1, R_EXAMPLE: 3}


def test_charges_reach_the_shared_entries_and_leave_other_requests_alone() -> None:
    body = quota("q", {R_EXAMPLE: "2", "requests.cpu": "4"}, {R_EXAMPLE: "1", "requests.cpu": "1"})
    outcome = charge([body], {GPU: 1, R_GPU: 1, R_EXAMPLE: 1}, NAMES)
    assert isinstance(outcome, QuotaCharge)
    assert outcome.updates[0][1] == {R_EXAMPLE: "2"}
    refused = charge([body], {GPU: 2, R_GPU: 2, R_EXAMPLE: 2}, NAMES)
    assert refused == QuotaRefusal(
        f"exceeded quota: q, requested: {R_EXAMPLE}=2, used: {R_EXAMPLE}=1, limited: {R_EXAMPLE}=2"
    )
    # Without the class's mapping the entry is not device quota's.
    assert charge([body], {R_EXAMPLE: 2}) == QuotaCharge(())


def test_a_shared_entry_below_the_count_is_undercounted_one_above_is_a_charge() -> None:
    body = quota("q", {R_EXAMPLE: "4", GPU: "4"}, {R_EXAMPLE: "1", GPU: "2"})
    assert undercounted(body, {R_EXAMPLE: 2, GPU: 2}, NAMES)  # kube-controller-manager's pods-only 1
    assert not undercounted(body, {R_EXAMPLE: 1, GPU: 1}, NAMES)  # a charge not counted yet
    assert not undercounted(quota("q", {GPU: "4"}, {GPU: "0"}), {GPU: 3}, NAMES)  # per class: draco's alone
    assert status_patch(body, {R_EXAMPLE: 2, GPU: 2}, NAMES) == {"status": {"used": {R_EXAMPLE: "2"}}}


def test_namespace_usage_adds_claims() -> None:
    claims = [{"spec": spec(exactly("a", "gpu", count=2))}, {"spec": spec(exactly("a", "gpu"))}, {}]
    assert namespace_usage(claims) == {GPU: 3, R_GPU: 3}


def test_charge_within_the_limit_adds_to_used() -> None:
    outcome = charge([quota("q", {GPU: "3", "pods": "5"}, {GPU: "1", "pods": "2"})], {GPU: 2})
    assert isinstance(outcome, QuotaCharge)
    ((charged, used),) = outcome.updates
    assert charged["metadata"]["name"] == "q"
    assert used == {GPU: "3"}  # only draco's entries, never `pods`


def test_charge_past_the_limit_is_refused_with_upstreams_message() -> None:
    outcome = charge([quota("gpus", {GPU: "2", MIG: "9"}, {GPU: "1", MIG: "0"})], {GPU: 2, MIG: 1})
    assert outcome == QuotaRefusal(
        f"exceeded quota: gpus, requested: {GPU}=2, used: {GPU}=1, limited: {GPU}=2"
    )
    assert is_quota_refusal(outcome.message)


def test_every_quota_must_admit_and_the_first_refusing_by_name_is_named() -> None:
    quotas = [quota("b-tight", {GPU: "1"}, {GPU: "1"}), quota("a-loose", {GPU: "10"}, {GPU: "1"})]
    outcome = charge(quotas, {GPU: 1})
    assert isinstance(outcome, QuotaRefusal)
    assert outcome.message.startswith("exceeded quota: b-tight,")


def test_quotas_without_the_claims_classes_are_left_alone() -> None:
    outcome = charge([quota("other", {MIG: "0"}, {MIG: "0"}), quota("plain", {"pods": "1"}, {})], {GPU: 5})
    assert outcome == QuotaCharge(())


def test_a_quota_not_counted_yet_refuses_like_upstream() -> None:
    outcome = charge([quota("new", {GPU: "4"})], {GPU: 1})
    assert outcome == QuotaRefusal(f"status unknown for quota: new, resource: {GPU}")
    assert is_quota_refusal(f'admission webhook "x" denied the request: {outcome.message}')


def test_fractional_limits_compare_exactly() -> None:
    assert isinstance(charge([quota("q", {GPU: "1500m"}, {GPU: "1"})], {GPU: 1}), QuotaRefusal)
    assert isinstance(charge([quota("q", {GPU: "2500m"}, {GPU: "1"})], {GPU: 1}), QuotaCharge)


def test_status_patch_writes_only_dracos_entries() -> None:
    body = quota("q", {GPU: "4", "pods": "5"}, {GPU: "1", "pods": "3"})
    assert status_patch(body, {GPU: 2}) == {"status": {"used": {GPU: "2"}}}
    assert status_patch(body, {GPU: 1}) is None
    fresh = quota("q", {GPU: "4", "pods": "5"})
    assert status_patch(fresh, {}) == {"status": {"hard": {GPU: "4"}, "used": {GPU: "0"}}}


def test_status_patch_removes_entries_no_longer_limited() -> None:
    body = quota("q", {"pods": "5"}, {"pods": "3"})
    body["status"]["hard"][MIG] = "1"
    body["status"]["used"][MIG] = "1"
    assert status_patch(body, {MIG: 1}) == {"status": {"hard": {MIG: None}, "used": {MIG: None}}}


def test_other_messages_are_not_quota_refusals() -> None:
    assert not is_quota_refusal('resourceclaims "x" is invalid: spec: Required value')


def test_a_recount_is_due_when_the_limits_change_not_when_used_does() -> None:
    from draco.api.quota import recount_due

    assert recount_due(quota("q", {GPU: "4"}))  # never counted
    counted = quota("q", {GPU: "4", "pods": "1"}, {GPU: "3"})
    assert not recount_due(counted)
    counted["spec"]["hard"][GPU] = "5"
    assert recount_due(counted)  # the limit changed
    assert not recount_due(quota("plain", {"pods": "1"}, {"pods": "0"}))
