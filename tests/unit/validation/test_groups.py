"""Workload and PodGroup are judged by upstream's rules for `scheduling.k8s.io/v1beta1`."""

from __future__ import annotations

from typing import Any

from draco.validation.objects import validate_object


def _group(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.draco.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


def _paths(obj: dict[str, Any], **kwargs: Any) -> list[str]:
    return [f"{e.path}: {e.detail}" for e in validate_object(obj, **kwargs)]


def test_a_valid_group_and_workload_pass_in_either_api_version() -> None:
    assert _paths(_group()) == []
    native = {**_group(), "apiVersion": "scheduling.k8s.io/v1beta1"}
    assert _paths(native) == []
    workload = {
        "apiVersion": "scheduling.draco.dev/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "j"},
            "podGroupTemplates": [
                {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}},
                {"name": "driver", "schedulingPolicy": {"basic": {}}},
            ],
        },
    }
    assert _paths(workload) == []
    duplicate = {**workload, "spec": {"podGroupTemplates": [workload["spec"]["podGroupTemplates"][0]] * 2}}
    assert _paths(duplicate) == ["spec.podGroupTemplates[1].name: "]


def test_broken_groups_are_refused_field_by_field() -> None:
    assert _paths(_group(schedulingPolicy={"gang": {"minCount": 0}})) == [
        "spec.schedulingPolicy.gang.minCount: must be greater than or equal to 1"
    ]
    assert _paths(_group(schedulingPolicy={"basic": {}, "gang": {"minCount": 1}})) == [
        "spec.schedulingPolicy: exactly one of `basic` or `gang` must be set"
    ]
    claims = [{"name": f"c{i}", "resourceClaimTemplateName": "t"} for i in range(5)]
    assert _paths(_group(resourceClaims=claims)) == ["spec.resourceClaims: must have at most 4 items"]
    assert _paths(
        _group(resourceClaims=[{"name": "c", "resourceClaimName": "a", "resourceClaimTemplateName": "t"}])
    ) == [
        "spec.resourceClaims[0]: exactly one of `resourceClaimName` or `resourceClaimTemplateName` must be set"
    ]
    assert _paths(_group(schedulingConstraints={"topology": [{"key": "a"}, {"key": "b"}]})) == [
        "spec.schedulingConstraints.topology: must have at most 1 items"
    ]
    bad_attribute = _paths(_group(schedulingConstraints={"deviceTopology": [{"matchAttribute": "cliqueID"}]}))
    assert bad_attribute == [
        "spec.schedulingConstraints.deviceTopology[0].matchAttribute: "
        "a fully qualified name must be a domain and a name separated by a slash"
    ]
    assert _paths(_group(unknown=1)) == ['spec.unknown: unknown field "spec.unknown"']


def test_only_a_gangs_min_count_may_change() -> None:
    old = _group()
    assert _paths(_group(schedulingPolicy={"gang": {"minCount": 5}}), old=old) == []
    assert _paths(_group(schedulingPolicy={"basic": {}}), old=old) == [
        "spec.schedulingPolicy: the policy may not change (only a gang's minCount)"
    ]
    changed = _group(resourceClaims=[{"name": "c", "resourceClaimName": "a"}])
    assert _paths(changed, old=old) == ["spec.resourceClaims: field is immutable"]
    # The status is draco's to write: only its shape is checked.
    status = {**old, "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True"}]}}
    assert _paths(status, old=old, subresource="status") == []
