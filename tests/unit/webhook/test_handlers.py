"""draco's admission handlers answered by Kopf's admission machinery (as `draco webhook`
runs it, without a cluster: `tests.unit.webhook.kopfkit`): each webhook path's handler
id, the version the user wrote kept in errors and defaults, the pod gate, and what Kopf
would keep in memory per object."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
from kopf._core.reactor.inventory import ResourceMemories

from draco.api.constants import SCHEDULING_GATE
from draco.frame.memories import AdmissionMemories
from draco.webhook.handlers import MUTATE, MUTATE_PODS, VALIDATE, VALIDATE_QUOTA
from tests.unit.webhook.kopfkit import PLURALS, admission_fn

GROUP = "resource.draco.dev"


def review(
    obj: dict[str, Any], *, operation: str = "CREATE", old: dict[str, Any] | None = None, uid: str = "r1"
) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = PLURALS.get(obj["kind"]) or obj["kind"].lower() + "s"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": plural},
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
            "oldObject": old,
        },
    }


def template(version: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", **request}]}}},
    }


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    if "patch" not in response:
        return obj
    result: dict[str, Any] = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    return result


async def test_a_v1beta1_template_is_refused_at_the_fields_v1beta1_has() -> None:
    answer = admission_fn()
    bad_class = {"deviceClassName": "Not A Class"}
    written = await answer(review(template("v1beta1", bad_class)), webhook=VALIDATE)
    message = written["response"]["status"]["message"]
    assert written["response"]["allowed"] is False and written["response"]["status"]["code"] == 422
    assert "spec.spec.devices.requests[0].deviceClassName: Invalid value" in message
    assert "exactly" not in message
    # The same template in v1 is refused at v1's path.
    v1 = await answer(review(template("v1", {"exactly": bad_class})), webhook=VALIDATE)
    assert (
        "spec.spec.devices.requests[0].exactly.deviceClassName: Invalid value"
        in (v1["response"]["status"]["message"])
    )


async def test_a_v1beta1_request_naming_no_class_is_told_so_in_v1beta1_words() -> None:
    written = await admission_fn()(review(template("v1beta1", {"count": 0})), webhook=VALIDATE)
    message = written["response"]["status"]["message"]
    assert "spec.spec.devices.requests[0]" in message and "`exactly`" not in message
    assert "`deviceClassName` or `firstAvailable`" in message


async def test_defaults_are_written_in_the_version_the_user_wrote() -> None:
    claim = {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu"}]}},
    }
    answer = await admission_fn()(review(claim), webhook=MUTATE)
    request = patched(claim, answer["response"])["spec"]["devices"]["requests"][0]
    assert (request["allocationMode"], request["count"], request["deviceClassName"]) == (
        "ExactCount",
        1,
        "gpu",
    )
    assert "exactly" not in request


async def test_each_path_is_answered_by_its_own_handler_only() -> None:
    broken = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "GPU!", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    answer = admission_fn()
    assert (await answer(review(broken), webhook=VALIDATE))["response"]["allowed"] is False
    # The quota path only charges quota (none configured here): the spec is not judged.
    assert (await answer(review(broken), webhook=VALIDATE_QUOTA))["response"]["allowed"] is True


async def test_a_pod_naming_claims_is_gated() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {"resource.draco.dev/claims": "- name: gpu\n  resourceClaimTemplateName: t\n"},
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    answer = await admission_fn()(review(pod), webhook=MUTATE_PODS)
    assert {"name": SCHEDULING_GATE} in patched(pod, answer["response"])["spec"]["schedulingGates"]


async def test_no_memory_is_kept_per_object_updated() -> None:
    """Kopf keeps a memory per object of every UPDATE it answers and forgets it only when a
    watch reports the object deleted, which a webhook never sees; `AdmissionMemories`
    keeps none."""
    rule = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "DeviceTaintRule",
        "spec": {
            "taint": {"key": "example.com/t", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
        },
    }
    updates = [
        review({**rule, "metadata": {"name": f"r{i}", "uid": f"u{i}"}}, operation="UPDATE", old=rule)
        for i in range(50)
    ]
    kopfs, ours = ResourceMemories(), AdmissionMemories()
    for memories in (kopfs, ours):
        answer = admission_fn(memories=memories)
        for update in updates:
            assert (await answer(update, webhook=VALIDATE))["response"]["allowed"] is True
    assert len(list(kopfs.iter_all_memories())) == 50
    assert list(ours.iter_all_memories()) == []


def pod_group(min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.draco.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ns"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


async def test_a_pod_group_is_validated_by_the_same_handler_as_the_resource_kinds() -> None:
    answer = admission_fn()
    refused = await answer(review(pod_group(0)), webhook=VALIDATE)
    assert refused["response"]["allowed"] is False and refused["response"]["status"]["code"] == 422
    assert "spec.schedulingPolicy.gang.minCount" in refused["response"]["status"]["message"]
    allowed = await answer(review(pod_group(4)), webhook=VALIDATE)
    assert allowed["response"]["allowed"] is True


def _rule(selector: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": "example.com/k", "effect": "NoExecute"}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"apiVersion": f"{GROUP}/v1", "kind": "DeviceTaintRule", "metadata": {"name": "r"}, "spec": spec}


async def test_an_empty_taint_rule_selector_is_admitted_with_upstreams_warning() -> None:
    """kubernetes/kubernetes#141831 ("resource: warn on empty DeviceTaintRule selector"),
    upstream's TestDeviceTaintRuleEmptySelectorWarning cases (nil-selector-matches-nothing,
    empty-selector-matches-everything, selector-with-driver-is-scoped): `deviceSelector: {}`
    is written with the warning, on create and on update, whatever the effect."""
    from draco.validation import taint_rule_warnings
    from draco.validation.taintrules import EMPTY_SELECTOR_WARNING

    answer = admission_fn()
    empty = await answer(review(_rule({})), webhook=VALIDATE)
    assert empty["response"]["allowed"] is True
    assert empty["response"]["warnings"] == [EMPTY_SELECTOR_WARNING]
    updated = await answer(
        review(_rule({}), operation="UPDATE", old=_rule({"driver": "gpu.example.com"})), webhook=VALIDATE
    )
    assert updated["response"]["warnings"] == [EMPTY_SELECTOR_WARNING]
    for quiet in (_rule(None), _rule({"driver": "gpu.example.com"}), _rule({"device": "gpu-0"})):
        written = await answer(review(quiet), webhook=VALIDATE)
        assert written["response"]["allowed"] is True
        assert not written["response"].get("warnings"), quiet
    effect_none = _rule({})
    effect_none["spec"]["taint"]["effect"] = "None"
    assert taint_rule_warnings(effect_none["spec"]) == [EMPTY_SELECTOR_WARNING]
