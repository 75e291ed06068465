"""The pod claims annotation contract: parsing, resolution, generated names, pod states."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draco.api.constants import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION, SCHEDULER_NAME, SCHEDULING_GATE
from draco.scheduling.generatedclaims import generate_claim_name, without_generated_names
from draco.scheduling.podclaims import (
    ClaimNotCreatedError,
    PodClaim,
    PodClaimsError,
    bound_by_draco,
    claim_statuses,
    claim_statuses_annotation,
    controller_pod_uid,
    is_controlled_by_pod,
    is_pod_bound,
    is_pod_done,
    is_reserved_for,
    names_claims,
    parse_claims_annotation,
    parse_pod_claims,
    pod_reference,
    resolve_claim,
    resolve_claims,
    waits_for_draco,
)


def pod(
    *,
    claims: str | None = None,
    statuses: dict[str, str | None] | None = None,
    name: str = "p",
    uid: str = "uid-1",
    **extra: Any,
) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if claims is not None:
        annotations[CLAIMS_ANNOTATION] = claims
    if statuses is not None:
        annotations[CLAIM_STATUSES_ANNOTATION] = json.dumps(statuses)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations},
        "spec": {},
        "status": {},
    }
    for key, value in extra.items():
        section, _, field = key.partition("__")
        body[section][field] = value
    return body


# --- parsing ----------------------------------------------------------------------------------


def test_yaml_annotation_from_the_design_doc_parses() -> None:
    claims = parse_pod_claims(
        pod(
            claims="""
- name: gpu
  resourceClaimTemplateName: single-gpu
  containers: [trainer]
- name: shared
  resourceClaimName: shared-gpu
"""
        )
    )
    assert claims == [
        PodClaim("gpu", resource_claim_template_name="single-gpu", containers=("trainer",)),
        PodClaim("shared", resource_claim_name="shared-gpu"),
    ]


def test_json_annotation_parses_and_round_trips() -> None:
    entries = [
        {"name": "a", "resourceClaimName": "x"},
        {"name": "b", "resourceClaimTemplateName": "t", "containers": []},
    ]
    claims = parse_claims_annotation(json.dumps(entries))
    assert [c.to_json() for c in claims] == entries
    assert claims[1].containers == ()


def test_no_annotation_means_no_claims() -> None:
    assert parse_pod_claims(pod()) == []
    assert not names_claims(pod())
    assert names_claims(pod(claims="[]"))
    assert parse_pod_claims(pod(claims="")) == []


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{name: a}", "must be a list"),
        ("- [a, b]", "each entry must be a mapping"),
        ("- name: a", "exactly one of resourceClaimName or resourceClaimTemplateName"),
        ("- {name: a, resourceClaimName: x, resourceClaimTemplateName: t}", "exactly one of"),
        ("- resourceClaimName: x", "Required: every claim needs a name"),
        ("- {name: Bad_Name, resourceClaimName: x}", "must be a DNS label"),
        ("- {name: a, resourceClaimName: Not/A/Name}", "resourceClaimName: Invalid"),
        ("- {name: a, resourceClaimName: x, container: [c]}", "[0].container: NotSupported"),
        ("- {name: a, resourceClaimName: x, containers: c}", "must be a list of container names"),
        ("- {name: a, resourceClaimName: x}\n- {name: a, resourceClaimName: y}", "[1].name: Duplicate"),
        ("- {name: a, resourceClaimName: x", "not valid YAML or JSON"),
    ],
)
def test_invalid_annotations_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(PodClaimsError) as caught:
        parse_claims_annotation(text)
    assert fragment in str(caught.value)
    assert CLAIMS_ANNOTATION in str(caught.value)


def test_every_broken_entry_is_reported_at_once() -> None:
    with pytest.raises(PodClaimsError) as caught:
        parse_claims_annotation("- {name: a}\n- {resourceClaimName: x}")
    paths = [e.path for e in caught.value.errors]
    assert any("[0]" in p for p in paths) and any("[1]" in p for p in paths)


# --- claim statuses -----------------------------------------------------------------------------


def test_claim_statuses_round_trip_and_tolerate_garbage() -> None:
    statuses = {"gpu": "p-gpu-abcde", "skipped": None}
    value = claim_statuses_annotation(statuses)
    assert json.loads(value) == statuses
    assert claim_statuses(pod(statuses=statuses)) == statuses
    broken = pod()
    broken["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION] = "{not json"
    assert claim_statuses(broken) == {}
    assert claim_statuses_annotation({"b": "1", "a": "2"}) == '{"a":"2","b":"1"}'


# --- resolution -----------------------------------------------------------------------------------


def test_resolution_by_name_skips_the_owner_check() -> None:
    p = pod(claims="- {name: shared, resourceClaimName: shared-gpu}")
    [resolved] = resolve_claims(p)
    assert resolved.claim_name == "shared-gpu"
    assert not resolved.check_owner


def test_resolution_from_a_template_uses_the_recorded_name() -> None:
    p = pod(claims="- {name: gpu, resourceClaimTemplateName: t}", statuses={"gpu": "p-gpu-x1y2z"})
    [resolved] = resolve_claims(p)
    assert resolved.claim_name == "p-gpu-x1y2z"
    assert resolved.check_owner


def test_a_recorded_null_means_no_claim_is_needed() -> None:
    p = pod(claims="- {name: gpu, resourceClaimTemplateName: t}", statuses={"gpu": None})
    assert resolve_claims(p)[0].claim_name is None


def test_a_template_claim_without_a_record_is_not_created_yet() -> None:
    p = pod(claims="- {name: gpu, resourceClaimTemplateName: t}")
    with pytest.raises(ClaimNotCreatedError, match="not created yet"):
        resolve_claim(p, parse_pod_claims(p)[0])


def test_owner_check_needs_controller_v1_pod_and_the_same_uid() -> None:
    p = pod(uid="u1")

    def claim(**ref: Any) -> dict[str, Any]:
        base = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "controller": True}
        return {"metadata": {"ownerReferences": [{**base, **ref}]}}

    assert is_controlled_by_pod(claim(), p)
    assert controller_pod_uid(claim()) == "u1"
    assert not is_controlled_by_pod(claim(uid="u2"), p)
    assert not is_controlled_by_pod(claim(controller=False), p)
    assert not is_controlled_by_pod(claim(kind="Job", apiVersion="batch/v1"), p)
    assert not is_controlled_by_pod({"metadata": {}}, p)


# --- generated names ----------------------------------------------------------------------------


def test_short_names_are_pod_claim_and_a_dash() -> None:
    assert generate_claim_name("my-pod", "gpu") == "my-pod-gpu-"


def test_long_names_are_cut_in_proportion_without_a_trailing_dash() -> None:
    pod_name = "a" * 60
    claim_name = "b" * 20
    # base = 60 + 1 + 20 + 1 = 82; pod part 60*57//82 = 41; claim part 20*57//82 = 13
    assert generate_claim_name(pod_name, claim_name) == "a" * 41 + "-" + "b" * 13


def test_a_refusal_names_the_claim_to_be_generated_not_the_name_of_one_try() -> None:
    refusal = (
        'create ResourceClaim ns/trainer-gpu-*: resourceclaims.resource.draco.dev "trainer-gpu-x7k2p" '
        "is forbidden: exceeded quota: gpus"
    )
    assert without_generated_names(refusal, "trainer-gpu-") == (
        'create ResourceClaim ns/trainer-gpu-*: resourceclaims.resource.draco.dev "trainer-gpu-*" '
        "is forbidden: exceeded quota: gpus"
    )
    # A name the API server did not generate from it (too long, other letters) stays.
    assert without_generated_names('"trainer-gpu-x7k2pq"', "trainer-gpu-") == '"trainer-gpu-x7k2pq"'
    assert without_generated_names('"trainer-gpu-aeiou"', "trainer-gpu-") == '"trainer-gpu-aeiou"'
    assert without_generated_names("anything", "") == "anything"


def test_the_limit_is_inclusive_at_57() -> None:
    pod_name = "p" * 50
    assert generate_claim_name(pod_name, "c" * 5) == pod_name + "-ccccc-"  # exactly 57
    assert generate_claim_name(pod_name, "c" * 6) == "p" * 49 + "-" + "c" * 5  # 58: cut


@given(
    st.text("abcdefghij-", min_size=1, max_size=253),
    st.text("abcdefghij-", min_size=1, max_size=63),
)
def test_generated_names_always_leave_room_for_the_suffix(pod_name: str, claim_name: str) -> None:
    name = generate_claim_name(pod_name, claim_name)
    assert len(name) <= 57
    if len(pod_name) + len(claim_name) + 2 <= 57:
        assert name == f"{pod_name}-{claim_name}-"
    else:
        # Both parts are prefixes of the originals, joined by exactly one dash.
        pod_len = len(pod_name) * 57 // (len(pod_name) + len(claim_name) + 2)
        assert name[:pod_len] == pod_name[:pod_len]
        assert name[pod_len] == "-"
        assert claim_name.startswith(name[pod_len + 1 :])


# --- pod states -----------------------------------------------------------------------------------


def test_pod_done_and_bound() -> None:
    assert not is_pod_done(pod())
    assert is_pod_done(pod(status__phase="Succeeded"))
    assert is_pod_done(pod(status__phase="Failed"))
    deleting = pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert is_pod_done(deleting), "deleted before it was bound: nothing runs"
    deleting["spec"]["nodeName"] = "n1"
    assert is_pod_bound(deleting)
    assert not is_pod_done(deleting), "running pods keep their claims until the kubelet stops them"


def test_gate_and_reservations() -> None:
    p = pod(spec__schedulingGates=[{"name": SCHEDULING_GATE}])
    assert waits_for_draco(p)
    assert not waits_for_draco(pod(spec__schedulingGates=[{"name": "other"}]))
    # A pod that names draco as its scheduler waits for draco until it is bound.
    named = pod(spec__schedulerName=SCHEDULER_NAME)
    assert waits_for_draco(named) and bound_by_draco(named)
    assert not waits_for_draco(pod(spec__schedulerName=SCHEDULER_NAME, spec__nodeName="n1"))
    assert not bound_by_draco(p)
    ref = pod_reference(p)
    assert ref == {"apiGroup": "", "resource": "pods", "name": "p", "uid": "uid-1"}
    assert is_reserved_for({"status": {"reservedFor": [ref]}}, p)
    assert not is_reserved_for({"status": {"reservedFor": [{**ref, "uid": "other"}]}}, p)
    assert not is_reserved_for({"status": {}}, p)


def test_a_pod_may_name_at_most_the_cap_of_claims() -> None:
    from draco.scheduling.podclaims import MAX_CLAIMS_PER_POD, PodClaimsError, parse_claims_annotation

    entries = [{"name": f"c{i}", "resourceClaimTemplateName": "t"} for i in range(MAX_CLAIMS_PER_POD)]
    assert len(parse_claims_annotation(json.dumps(entries))) == MAX_CLAIMS_PER_POD
    entries.append({"name": "one-more", "resourceClaimTemplateName": "t"})
    with pytest.raises(PodClaimsError) as caught:
        parse_claims_annotation(json.dumps(entries))
    assert f"names {MAX_CLAIMS_PER_POD + 1} claims; a pod may use at most {MAX_CLAIMS_PER_POD}" in str(
        caught.value
    )
    assert caught.value.errors[0].type == "TooMany"


def test_containers_may_name_a_request_of_the_claim() -> None:
    text = "- {name: g, resourceClaimName: c, containers: [main, {name: side, request: small}, {name: x, request: ''}]}"
    (entry,) = parse_claims_annotation(text)
    assert entry.containers == ("main", "side", "x")
    assert entry.container_requests == (("side", "small"),)
    assert entry.requests_for("main") is None
    assert entry.requests_for("x") is None
    assert entry.requests_for("side") == frozenset({"small"})
    assert entry.gives_to("side") and not entry.gives_to("other")
    assert parse_claims_annotation(json.dumps([entry.to_json()])) == [entry]


def test_a_container_named_plainly_and_with_a_request_gets_the_whole_claim() -> None:
    (entry,) = parse_claims_annotation(
        "- {name: g, resourceClaimName: c, containers: [a, {name: a, request: r}]}"
    )
    assert entry.requests_for("a") is None


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ("{name: a, request: Bad_Name}", "must be a request name"),
        ("{name: a, claim: x}", "unknown field: use name, request"),
        ("{request: r}", "must be a container name or {name, request}"),
    ],
)
def test_broken_container_entries_say_what_is_wrong(item: str, fragment: str) -> None:
    with pytest.raises(PodClaimsError) as info:
        parse_claims_annotation(f"- {{name: g, resourceClaimName: c, containers: [{item}]}}")
    assert fragment in str(info.value.errors), info.value.errors
