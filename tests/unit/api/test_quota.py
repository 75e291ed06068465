"""Device quota: what a claim counts (upstream's claim evaluator) and how it is charged."""

from __future__ import annotations

from typing import Any

import pytest

from draco.api.quota import (
    QuotaCharge,
    QuotaRefusal,
    charge,
    claim_usage,
    class_of_entry,
    is_quota_refusal,
    namespace_usage,
    quota_entry,
    status_patch,
)

GPU = quota_entry("gpu")
MIG = quota_entry("mig")


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
    ("claim", "expected"),
    [
        (spec(exactly("a", "gpu")), {GPU: 1}),  # count unset: the API's default, 1
        (spec(exactly("a", "gpu", allocationMode="ExactCount", count=3)), {GPU: 3}),
        (spec(exactly("a", "gpu", allocationMode="All")), {GPU: 32}),  # the worst case
        (spec(exactly("a", "gpu", allocationMode="Someday")), {GPU: 0}),  # unknown: counts nothing
        (spec(exactly("a", "gpu", count=2, adminAccess=True)), {GPU: 2}),  # admin access counts
        (spec(exactly("a", "gpu", count=2), exactly("b", "gpu"), exactly("c", "mig")), {GPU: 3, MIG: 1}),
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
            {GPU: 4, MIG: 3},  # per class, the largest alternative
        ),
        (spec(), {}),
        ({}, {}),
    ],
)
def test_claim_usage(claim: dict[str, Any], expected: dict[str, int]) -> None:
    assert claim_usage(claim) == expected


def test_namespace_usage_adds_claims() -> None:
    claims = [{"spec": spec(exactly("a", "gpu", count=2))}, {"spec": spec(exactly("a", "gpu"))}, {}]
    assert namespace_usage(claims) == {GPU: 3}


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
